// The contrast ratio (WCAG) of the first 40 shown elements matching `sel` against the first
// opaque background behind them: [[ratio, "TAG text"], ...].
sel => {
  const rgb = c => (c.match(/[\d.]+/g) || []).slice(0, 3).map(Number);
  const lum = c => { const [r, g, b] = rgb(c).map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
                     return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const opaque = c => c.startsWith("rgb(") || (c.startsWith("rgba(") && rgb(c).length && Number(c.split(",")[3]) >= 0.5);
  const bg = e => { for (; e; e = e.parentElement) { const c = getComputedStyle(e).backgroundColor;
                    if (opaque(c)) return c; } return "rgb(255, 255, 255)"; };
  return [...document.querySelectorAll(sel)].filter(e => e.getClientRects().length).slice(0, 40).map(e => {
    const a = lum(getComputedStyle(e).color), b = lum(bg(e));
    return [(Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05), e.tagName + " " + e.textContent.trim().slice(0, 30)];
  });
}
