// How many lines an element's text stands on.
e => { const r = document.createRange(); r.selectNodeContents(e); return lineCount(r.getClientRects()); }
