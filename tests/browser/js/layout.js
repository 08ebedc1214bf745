// What a reader of the article would call a layout defect, as a list of sentences.
() => {
  const problems = [];
  const art = document.querySelector("article");
  const column = contentColumn(art);
  const all = sel => [...art.querySelectorAll(sel)].filter(shown);
  const label = e => (e.className || e.tagName).toString().slice(0, 40) + ": " + text(e, 40);
  if (document.documentElement.scrollWidth > innerWidth + 1)
    problems.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} > ${innerWidth} px`);
  // Code, outputs and the title use the whole content width (code blocks in lists and boxes are
  // indented; the blocks that stand on their own are measured).
  const full = "h1, .jp-InputArea-editor, .jp-OutputArea-output, .md-content__inner > .highlight";
  for (const e of all(full)) {
    const w = e.getBoundingClientRect().width;
    if (w < 0.95 * column.width) problems.push(`${Math.round(w)} of ${Math.round(column.width)} px wide: ${label(e)}`);
  }
  // No word of the title, of the headings or of a code or output line split across two lines.
  for (const e of all("h1, h2, h3, pre")) {
    const ws = getComputedStyle(e).whiteSpace;  // (a pre that does not wrap needs no word check)
    if (e.tagName === "PRE" && (ws === "pre" || ws === "nowrap")) continue;
    for (const word of splitWords(e)) problems.push(`word split across lines: ${JSON.stringify(word)} in ${label(e)}`);
  }
  // Tables fit, or scroll inside the content: every column can be reached.
  for (const t of all("table")) {
    if (t.getBoundingClientRect().right <= column.right + 1) continue;
    let scrolls = false;
    for (let e = t; e && e !== art; e = e.parentElement) {
      const ox = getComputedStyle(e).overflowX;
      if ((ox === "auto" || ox === "scroll") && e.getBoundingClientRect().right <= column.right + 1
          && e.scrollWidth >= t.getBoundingClientRect().width - 1) { scrolls = true; break; }
    }
    if (!scrolls) problems.push(`table clipped at ${Math.round(column.right)} px: ${label(t)}`);
  }
  // Cell-tag chips (names like 'pitfall-batch') mean nothing to a reader.
  for (const e of all(".cell-tag, .celltoolbar")) problems.push(`cell tag shown: ${label(e)}`);
  // The download link is a line of its own above the title, not a column beside the notebook.
  const dl = document.querySelector("a.jp-DownloadNB"), h1 = art.querySelector("h1");
  if (dl && h1 && dl.getBoundingClientRect().bottom > h1.getBoundingClientRect().top + 1)
    problems.push("the download link sits beside the title instead of above it");
  return problems;
}
