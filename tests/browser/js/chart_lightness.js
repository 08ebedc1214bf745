// An image as the page draws it (with its CSS filter), scaled to 64x64: the mean lightness of its
// pixels (0 black, 1 white), and the filter.
img => new Promise(done => {
  const c = document.createElement("canvas"), w = c.width = 64, h = c.height = 64, g = c.getContext("2d");
  g.filter = getComputedStyle(img).filter;
  g.drawImage(img, 0, 0, w, h);
  const d = g.getImageData(0, 0, w, h).data;
  let sum = 0;
  for (let i = 0; i < d.length; i += 4) sum += (0.2126 * d[i] + 0.7152 * d[i + 1] + 0.0722 * d[i + 2]) / 255;
  done([sum / (w * h), getComputedStyle(img).filter]);
})
