// What the tests read of a page as it loaded, besides reading.js and layout.js.
() => {
  const art = document.querySelector("article");
  const copy = 'button[data-md-type="copy"]';
  const links = [...document.querySelectorAll("nav.md-nav--primary a.md-nav__link")];
  const diagram = f => {
    const img = f.querySelector("a > img");
    return {src: img.getAttribute("src"), href: img.parentElement.getAttribute("href"), width: img.getBoundingClientRect().width,
            natural: img.naturalWidth, box: f.clientWidth, scroll: f.scrollWidth, overflow: getComputedStyle(f).overflowX,
            hint: getComputedStyle(f.querySelector("figcaption")).display};
  };
  return {
    // the navigation's pages (not a page's own contents) and, for each label shown, its lines
    navigation: links.filter(a => !a.getAttribute("href").startsWith("#")).map(a => a.textContent.trim()),
    navigation_lines: [...document.querySelectorAll("nav.md-nav--primary .md-nav__link .md-ellipsis")]
      .filter(e => e.getBoundingClientRect().height > 0)
      .map(e => [e.textContent.trim(), Math.round(e.getBoundingClientRect().height / parseFloat(getComputedStyle(e).lineHeight))]),
    // code blocks that get a copy button (all but .no-copy: a block whose command runs a script
    // under runs/, tools/site_build/code_blocks.py), the buttons, and what each copies (Material:
    // the closest [data-copy] of its target, else the target's text)
    code_blocks: [...art.querySelectorAll("pre > code")].filter(e => !e.closest(".no-copy")).length,
    copy_buttons: art.querySelectorAll(copy).length,
    copied: [...art.querySelectorAll(copy)].map(b => {
      const target = document.querySelector(b.getAttribute("data-clipboard-target"));
      const owner = target.closest("[data-copy]");
      return owner ? owner.getAttribute("data-copy") : target.innerText;
    }),
    text: art.textContent,  // (collapsed blocks included)
    links: [...new Set([...art.querySelectorAll("a[href]")].map(e => e.getAttribute("href")))],
    // PNGs: source, width shown, natural width
    pngs: [...art.querySelectorAll("img")].filter(e => /^data:image\/png|\.png$/.test(e.getAttribute("src")))
      .map(e => [e.src, e.getBoundingClientRect().width, e.naturalWidth]),
    diagrams: [...art.querySelectorAll("figure.diagram")].map(diagram),
    // a notebook page: its output areas, the text of those shown, its download links
    outputs: document.querySelectorAll(".jp-OutputArea-output").length,
    output_text: [...document.querySelectorAll(".jp-OutputArea-output")].filter(shown).map(e => e.innerText).join("\n"),
    downloads: [...document.querySelectorAll("a.jp-DownloadNB[download]")].map(a => a.getAttribute("href")),
  };
}
