// Per page: code blocks and tables that scroll sideways, by kind (an output: what a command
// printed, including error messages, which wraps; source: python, bash, batch scripts, diffs,
// which keep their lines and scroll), source lines wider than their block, text clipped by a
// box or the window, copy buttons covering a character of their block, tokens (a flag, a file
// name) split across two lines in a heading, a table cell or a wrapped output, output table rows
// that wrap, and where inline code breaks inside a token.
() => {
  const art = document.querySelector("article");
  const {right} = contentColumn(art);
  const all = sel => [...art.querySelectorAll(sel)].filter(shown);
  const label = e => text(e, 50);
  const scrolls = e => e.scrollWidth > e.clientWidth + 1 && ["auto", "scroll"].includes(getComputedStyle(e).overflowX);
  const kind = pre => {
    if (pre.closest(".jp-OutputArea-output")) return "output";
    if (pre.closest(".jp-InputArea, .highlight-ipynb")) return "source";
    const hl = pre.closest(".highlight");
    const lang = hl && [...hl.classList].find(c => c.startsWith("language-"));
    return (!lang || lang === "language-text" || lang === "language-console") ? "output" : "source";
  };
  const out = {output: [0, []], source: [0, []], table: [0, []], overlap: [], clipped: [], split: [], lines: [0, 0], codebreak: [], columns: [0, []], colscroll: 0, numrows: [0, []], colwide: [], srcblocks: [0, []]};
  const wide = pre => [pre, pre.parentElement, ...pre.querySelectorAll(":scope > code")].some(scrolls) || pre.getBoundingClientRect().right > right + 1;
  for (const pre of all("pre")) {
    const k = kind(pre);
    out[k][0]++;
    if (wide(pre)) {  // (an output whose table rows alone are wider scrolls on purpose)
      const cols = [...pre.querySelectorAll(".columns")];
      cols.forEach(c => c.style.display = "none");
      const still = wide(pre);
      cols.forEach(c => c.style.display = "");
      if (k === "source" || still) out[k][1].push(label(pre)); else { out.colscroll++; out.colwide.push(label(pre)); }
    }
    if (k === "source") {  // how many of its lines are wider than the block shows
      const code = pre.querySelector(":scope > code") || pre;
      const box = [code, pre, pre.parentElement].find(e => ["auto", "scroll"].includes(getComputedStyle(e).overflowX)) || code;
      const probe = document.createElement("span"); probe.textContent = "0".repeat(40); code.appendChild(probe);
      const cw = probe.getBoundingClientRect().width / 40; probe.remove();
      const cs = getComputedStyle(code);
      const room = Math.floor((box.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight)) / cw);
      const lines = code.textContent.replace(/\n$/, "").split("\n");
      const over = lines.filter(l => l.length > room).length;
      out.lines[0] += lines.length; out.lines[1] += over;
      out.srcblocks[0]++; if (over) out.srcblocks[1].push(label(pre));
    }
  }
  for (const t of all("table")) {
    out.table[0]++;
    let wide = t.getBoundingClientRect().right > right + 1 || scrolls(t);
    for (let e = t.parentElement; e && e !== art && !wide; e = e.parentElement) wide = scrolls(e) && e.scrollWidth > e.clientWidth + 1;
    if (wide) out.table[1].push(label(t));
  }
  // Copy buttons: do they cover a character of the block as shown (no scrolling)?
  for (const b of all('button[data-md-type="copy"], .jp-InputArea-editor clipboard-copy')) {
    const br = b.getBoundingClientRect();
    const pre = b.closest("pre") || b.closest(".jp-InputArea-editor").querySelector("pre");
    const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    let hit = null;
    for (let n = walker.nextNode(); n && !hit; n = walker.nextNode()) {
      if (b.contains(n)) continue;
      for (const m of n.data.matchAll(/\S+/g)) {
        const r = document.createRange(); r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
        if ([...r.getClientRects()].some(q => q.width > 0 && q.right > br.left && q.left < br.right && q.bottom > br.top && q.top < br.bottom)) { hit = m[0]; break; }
      }
    }
    if (hit) out.overlap.push(hit + " in " + label(pre));
  }
  // Clipped: text that lies right of the window, or right of a box that hides it or makes the
  // whole box (not one block or table) scroll.
  const ownScroller = a => a.matches("pre, code, table, .highlight, .highlight-ipynb, .md-typeset__scrollwrap, .md-typeset__table, .jp-OutputArea-output, .tabbed-labels");
  for (const e of all("h1, h2, h3, h4, p, li, td, th, dt, dd, summary")) {
    if (e.closest("pre, .search-only") || e.querySelector("pre, table")) continue;
    const range = document.createRange(); range.selectNodeContents(e);
    const r = range.getBoundingClientRect();
    if (!r.width) continue;
    let hidden = null, scroller = false;
    for (let a = e.parentElement; a && a !== art.parentElement; a = a.parentElement) {
      if (ownScroller(a)) { scroller = true; break; }
      if (getComputedStyle(a).overflowX !== "visible" && r.right > a.getBoundingClientRect().right + 1) {
        hidden = `${Math.round(r.right - a.getBoundingClientRect().right)} px past ${(a.className || a.tagName).toString().slice(0, 30)}`; break;
      }
    }
    if (!hidden && !scroller && r.right > innerWidth + 1) hidden = `${Math.round(r.right - innerWidth)} px right of the window`;
    if (hidden) out.clipped.push(`${hidden}: ${e.tagName} ${label(e)}`);
  }
  // No token of a heading, a table cell or a wrapped output split across two lines.
  const keepsLines = n => ["pre", "nowrap"].includes(getComputedStyle(n.parentElement).whiteSpace);
  for (const e of all("h1, h2, h3, td, th, pre")) {
    const ws = getComputedStyle(e).whiteSpace;
    if (e.tagName === "PRE" && (ws === "pre" || ws === "nowrap") && !e.querySelector("code[style], code")) continue;
    for (const word of splitWords(e, keepsLines)) out.split.push(`${JSON.stringify(word)} in ${e.tagName} ${label(e)}`);
  }
  // Output lines that are table rows (next to another row; a gap of two or more spaces inside,
  // a short last field: squeue, sacct, a sweep) stay on one line each.
  // (a line of a diff, "+    x = 1  # y", is code, not a row)
  const row = l => l !== undefined && !l.startsWith("$ ") && !/^([-+](?![-+])|@@)/.test(l) && /\S {2,}\S/.test(l) && l.trim().split(/ {2,}/).pop().split(/\s+/).length <= 6;
  for (const pre of all("pre")) {
    if (kind(pre) !== "output") continue;
    const nodes = []; let full = "";
    const w = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    for (let n = w.nextNode(); n; n = w.nextNode()) {
      if (n.parentElement.closest("button, .md-code__nav")) continue;
      nodes.push([n, full.length]); full += n.data;
    }
    const at = k => { let i = nodes.length - 1; while (i > 0 && nodes[i][1] > k) i--; return [nodes[i][0], Math.min(k - nodes[i][1], nodes[i][0].data.length)]; };
    const lines = full.split("\n");
    // Rows of numbers the rule above misses (a long last field): neighbours that share a column
    // (a field starting at the same place after a gap of two or more spaces), every one ending
    // in a token with a digit: ZeRO's bytes per rank, a table of results.
    // (indentation is not a gap; a line that a program's name or a key prefixes, "ddp_check: ...",
    // is a message)
    const starts = l => l === undefined ? new Set() : new Set([...l.matchAll(/(?<=\S) {2,}(?=\S)/g)].map(m => m.index + m[0].length));
    const numeric = l => l !== undefined && !/^\s*[\w.]+: \S/.test(l) && /\d/.test(l.trim().split(/\s+/).pop() || "") && starts(l).size > 0;
    const shares = (l, m) => [...starts(l)].some(c => starts(m).has(c));
    const inNumGroup = new Set();
    for (let i = 0; i < lines.length; ) {
      let j = i;
      while (j + 1 < lines.length && numeric(lines[j]) && numeric(lines[j + 1]) && shares(lines[j], lines[j + 1])) j++;
      if (j > i) for (let q = i; q <= j; q++) inNumGroup.add(q);
      i = j + 1;
    }
    let start = 0;
    lines.forEach((l, i) => {
      const s0 = start; start += l.length + 1;
      const isRow = row(l) && (row(lines[i - 1]) || row(lines[i + 1]));
      if (!isRow && !inNumGroup.has(i)) return;
      const r = document.createRange(), [a, ao] = at(s0), [b, bo] = at(s0 + l.trimEnd().length);
      r.setStart(a, ao); r.setEnd(b, bo);
      const wraps = lineCount(r.getClientRects()) > 1;
      if (isRow) { out.columns[0]++; if (wraps) out.columns[1].push(l.trim().slice(0, 60)); }
      if (inNumGroup.has(i)) { out.numrows[0]++; if (wraps) out.numrows[1].push(l.trim().slice(0, 60)); }
    });
  }
  // Inline code (prose, lists, tables) that breaks across lines inside a token: where (the two
  // characters before the break and the one after), judged per width by the test.
  for (const c of all("code")) {
    if (c.closest("pre, .search-only, h1, h2, h3, h4, h5, h6")) continue;
    if (lineCount(c.getClientRects()) < 2) continue;
    const walker = document.createTreeWalker(c, NodeFilter.SHOW_TEXT), full = c.textContent;
    let top0 = null, before = "", k = -1;
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      for (let i = 0; i < n.data.length; i++) {
        const ch = n.data[i]; k++;
        if (/\s/.test(ch)) { top0 = null; before = ""; continue; }  // a break at a space is between words
        const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + 1);
        const q = [...r.getClientRects()].find(q => q.width > 0);
        if (!q) continue;
        if (top0 !== null && Math.abs(Math.round(q.top) - top0) > 2)
          out.codebreak.push([before + full.slice(k).split(/\s/)[0], before.slice(-2), ch, c.closest("td, th") ? "table" : "prose"]);
        top0 = Math.round(q.top); before += ch;
      }
    }
  }
  return out;
}
