// The memory calculator on the page: the page's and its own scroll widths, the right edges of
// its content and of its table against the article's, and how many labels are shown and at how
// many distinct left edges.
c => {
  const art = c.closest("article").getBoundingClientRect();
  const labels = [...c.querySelectorAll("label")].filter(l => l.getClientRects().length);
  return {page: document.documentElement.scrollWidth, window: innerWidth, calc: [c.scrollWidth, c.clientWidth],
          right: Math.max(...[...c.querySelectorAll("*")].map(e => e.getBoundingClientRect().right)), article: art.right,
          lefts: new Set(labels.map(l => Math.round(l.getBoundingClientRect().left))).size, labels: labels.length,
          table: c.querySelector(".mc-terms").getBoundingClientRect().right};
}
