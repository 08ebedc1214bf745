// Helpers of the measurements (declarations only; conftest.py's js() puts them in scope).

// How many lines the rectangles of a range or an element stand on.
const lineCount = rects => new Set([...rects].filter(q => q.width > 0).map(q => Math.round(q.top))).size;

const shown = e => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== "hidden";

// An element's text as a sentence of a report (without the copy button's "Copied!").
const text = (e, n) => e.textContent.replace(/Copied!/g, "").replace(/\s+/g, " ").trim().slice(0, n);

// The article's content column. Material lets code blocks and tables reach into the article's
// margins on phones, so what they may reach (right) can lie beyond the column (left + width).
function contentColumn(art) {
  const cs = getComputedStyle(art);
  const left = art.getBoundingClientRect().left + parseFloat(cs.paddingLeft);
  const width = art.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
  return {width, right: Math.max(left + width, art.parentElement.getBoundingClientRect().right)};
}

// The words of e's text nodes that are split across two lines (skip: text nodes not to look at).
function splitWords(e, skip = () => false) {
  const split = [];
  const walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (skip(n)) continue;
    for (const m of n.data.matchAll(/\S+/g)) {
      const r = document.createRange();
      r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
      if (lineCount(r.getClientRects()) > 1) split.push(m[0]);
    }
  }
  return split;
}
