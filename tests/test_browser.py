"""The built site as a reader sees it, in headless Chromium (Debian's, driven by Playwright).

Checks: the steps appear in order in the navigation, content tabs switch, code blocks have
copy buttons that copy commands without their `$ ` prompt, every snippet include is rendered,
internal links resolve, notebook pages show their stored outputs and offer the .ipynb for
download, pages read well from 1280 px down to 390 px (measured: content width, no word split
across lines, tables that scroll instead of being clipped), the header links to the repository,
a search opens the step's page, and step 16's calculator prints what code/memory_formula.py
computes.

Loading a page is what costs, so every page is loaded once at 1280 px and once at 390 px, and all
the checks of that width run on that one visit (Visit, checks_at); a test asserts on what its
check found on its page, and a check that failed raises its assertion in that page's test. The
tests that only open pages and read them share one tab; a test that changes what the site
remembers (dark mode, a content tab chosen) has a browser context of its own.
"""
import functools
import http.server
import io
import json
import re
import shutil
import sys
import threading
import urllib.request
import zipfile
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(not CHROMIUM, reason="chromium missing: apt-get install chromium")

PAGES = sorted(p.relative_to(ROOT / "docs").with_suffix("").as_posix() for p in (ROOT / "docs").glob("*.md"))
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))


def url_of(page):
    return "" if page == "index" else f"{page}/"


@pytest.fixture(scope="session")
def base_url(site_dir):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            if not isinstance(sys.exc_info()[1], ConnectionError):  # (the browser left a page early)
                super().handle_error(request, client_address)

    handler = functools.partial(Quiet, directory=str(site_dir))
    server = Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        # Flags keep Chromium from calling home (this machine has no network beyond loopback).
        b = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A tab in a new browser context: for a test that changes what the site remembers (the colour
    scheme, the content tab chosen) or writes a page of its own."""
    ctx = browser.new_context()
    pg = ctx.new_page()
    yield pg
    ctx.close()


@pytest.fixture(scope="module")
def reader_tab(browser):
    ctx = browser.new_context()
    yield ctx.new_page()
    ctx.close()


@pytest.fixture
def tab(reader_tab):
    """The one tab of the tests that open pages and only read them (navigation, search), at a new
    context's size (1280x720): a context for each costs about a second. Each test opens its page."""
    reader_tab.set_viewport_size({"width": 1280, "height": 720})
    return reader_tab


# --- One visit per page and width -------------------------------------------------------------
# Loading a page is what costs here (about 0.6 s of Chromium's CPU), so each page is loaded once
# at 1280 px and once at 390 px, in one tab per width, and every check of that width runs on it
# (checks_at). A test asks for the visit of its page and asserts on what a check returned; a check
# that failed raises its own assertion there, in the test of that page. A test run alone loads
# only the pages it asks for.

class Visit:
    """Page `name` loaded at `width`: what each check of checks_at returned, or what it raised."""

    def __init__(self, tab, base_url, site_dir, name, width):
        self.page, self.base_url, self.site_dir, self.name, self.width = tab, base_url, site_dir, name, width
        self.returned, self.raised = {}, {}
        try:
            tab.goto(base_url + url_of(name))
        except Exception as e:  # (every check fails with it)
            self.raised = {check: e for check in checks_at(width, name)}
            return
        for check in checks_at(width, name):
            try:
                self.returned[check] = check(self)
            except Exception as e:  # an assertion of the check, or the browser's error
                self.raised[check] = e

    def result(self, check):
        """What `check` returned on this page; or raises what it raised (its assertion, message and all)."""
        if check in self.raised:
            raise self.raised[check]
        return self.returned[check]


@pytest.fixture(scope="module")
def visited(browser, base_url, site_dir):
    """visited(width, name): the Visit of page `name` at `width`, made the first time it is asked for."""
    tabs, visits = {}, {}

    def visited(width, name):
        if (width, name) not in visits:
            if width not in tabs:
                tabs[width] = browser.new_page(viewport={"width": width, "height": 900})
            visits[width, name] = Visit(tabs[width], base_url, site_dir, name, width)
        return visits[width, name]

    yield visited
    for t in tabs.values():
        t.close()
    fetch.cache_clear()


def checks_at(width, name):
    """The checks that a visit of page `name` at `width` runs, in this order (the first measures
    the page as it loaded; none changes it)."""
    notebook = name.startswith("notebooks/")
    checks = [reading]  # every page, both widths: test_nothing_important_off_screen
    if width == 1280:
        checks.append(chart_text)  # test_chart_text_at_least_11_px
        if not notebook:
            checks.append(code_blocks_snippets_and_links)  # test_page_code_blocks_snippets_and_links
        if name in NAVIGATION_LABEL_PAGES:
            checks.append(navigation_labels)  # test_navigation_reads_in_order_with_short_labels
    elif notebook:
        checks.append(notebook_outputs_and_download)  # test_notebook_page_has_outputs_and_download
    if name in READING_WIDTH_PAGES:
        checks.append(reading_width_and_screenshot)  # test_reading_width_and_screenshot
    if name in DIAGRAM_PAGES:
        checks.append(diagrams)  # test_diagrams_keep_their_size_on_a_phone
    return checks


PAGE_LABELS = """els => els.filter(a => !a.getAttribute("href").startsWith("#"))  // (not a page's own contents)
  .map(a => a.textContent.trim())"""


def test_steps_in_order_in_navigation(tab, base_url):
    """The navigation's pages, across its collapsible parts, hold the numbered steps in order."""
    tab.goto(base_url)
    labels = tab.locator("nav.md-nav--primary a.md-nav__link").evaluate_all(PAGE_LABELS)
    steps = [int(m.group(1)) for t in labels if (m := re.match(r"(\d+)\. ", t))]
    assert steps and steps == sorted(steps) and steps[0] == 1, labels
    on_disk = sorted({int(p.name[:2]) for p in (ROOT / "docs").glob("[0-9][0-9]-*.md")  # numbered
                      if re.match(r"# \d+\. ", p.read_text())})
    assert steps == on_disk, f"navigation {steps} vs pages {on_disk}"


NAVIGATION_LABEL_PAGES = ["01-ddp", "09-reliability", "12-fsdp2", "notebooks/your-own-script"]


@pytest.mark.parametrize("name", NAVIGATION_LABEL_PAGES)
def test_navigation_reads_in_order_with_short_labels(visited, name):
    """The quick start, then step 1, come right after Home, and no label of the navigation wraps to
    more than two lines at 1280 px (Next from Home leads into the path, not into a reference page)."""
    visited(1280, name).result(navigation_labels)


def navigation_labels(visit):
    page, name = visit.page, visit.name
    labels = page.locator("nav.md-nav--primary a.md-nav__link").evaluate_all(PAGE_LABELS)
    assert labels[:2] == ["Home", "Quick start: your script on two nodes"] and labels[2].startswith("1. "), labels[:3]
    lines = page.locator("nav.md-nav--primary .md-nav__link .md-ellipsis").evaluate_all("""els => els
      .filter(e => e.getBoundingClientRect().height > 0)
      .map(e => [e.textContent.trim(), Math.round(e.getBoundingClientRect().height / parseFloat(getComputedStyle(e).lineHeight))])""")
    long = [(t, n) for t, n in lines if n > 2]
    assert not long, f"{name}: navigation labels on more than two lines: {long}"


# a page of each part of the navigation, and the part with the most entries open on a notebook page
@pytest.mark.parametrize("name", ["index", "01-ddp", "05-multinode", "notebooks/13-data", "07-lightning",
                                  "10-performance", "14-profiling", "troubleshooting"])
def test_navigation_fits_a_laptop_screen(tab, base_url, name):
    """At 1280x800 the sidebar shows the whole navigation of the page without scrolling: the parts
    collapse, only the page's own is open (all entries open take more than the sidebar's height)."""
    tab.set_viewport_size({"width": 1280, "height": 800})
    tab.goto(base_url + url_of(name))
    wrap = tab.locator(".md-sidebar--primary .md-sidebar__scrollwrap")
    height, scroll = wrap.evaluate("e => [e.clientHeight, e.scrollHeight]")
    assert scroll <= height, f"{name}: navigation {scroll} px tall in a {height} px sidebar"
    bottom = tab.locator("nav.md-nav--primary > ul").evaluate("e => e.getBoundingClientRect().bottom")
    assert bottom <= 800, f"{name}: navigation ends at {bottom} px, below the 800 px screen"
    parts = tab.locator("nav.md-nav--primary > ul > li").count()
    assert parts <= 8, f"{parts} top-level entries"


def test_content_tabs_switch(page, base_url):
    tabbed = [p for p in PAGES if "=== \"" in (ROOT / "docs" / f"{p}.md").read_text()]
    assert tabbed, "no page uses content tabs"
    for name in tabbed:
        page.goto(base_url + url_of(name))
        sets = page.locator(".tabbed-set")
        assert sets.count() > 0, name
        first = sets.first
        labels = first.locator(".tabbed-labels > label")
        assert labels.count() >= 2, name
        for i in range(labels.count()):
            labels.nth(i).click()
            blocks = first.locator(":scope > .tabbed-content > .tabbed-block")
            assert blocks.nth(i).is_visible(), f"{name}: tab {i} does not show its content"
            others = [j for j in range(blocks.count()) if j != i]
            assert not any(blocks.nth(j).is_visible() for j in others), f"{name}: tab {i} shows others"


@pytest.mark.parametrize("name", PAGES)
def test_page_code_blocks_snippets_and_links(visited, name):
    """Copy buttons on the code blocks, copying no prompt; every snippet include rendered; internal
    links and anchors resolve (checked at 1280 px)."""
    visited(1280, name).result(code_blocks_snippets_and_links)


@functools.lru_cache(maxsize=None)
def fetch(url):
    """The status and body of a file of the site, fetched once (many pages link to the same few)."""
    with urllib.request.urlopen(url) as r:
        return r.status, r.read()


def code_blocks_snippets_and_links(visit):
    page, base_url, name = visit.page, visit.base_url, visit.name
    article = page.locator("article")
    # Material adds a copy button to every code block (its JavaScript, so wait for it), except
    # in .no-copy (a block whose command runs a script under runs/, tools/site_build/code_blocks.py).
    copy = 'button[data-md-type="copy"]'
    blocks = article.locator("pre > code").evaluate_all("els => els.filter(e => !e.closest('.no-copy')).length")
    if blocks:
        page.wait_for_selector(f"article {copy}", state="attached", timeout=10_000)
    assert article.locator(copy).count() == blocks
    # What each copy button copies (Material: the closest data-copy, else the block's text):
    # commands without the `$ ` prompt a shell would not accept.
    for copied in article.locator(copy).evaluate_all(COPIED_JS):
        prompts = [l for l in copied.splitlines() if l.startswith("$ ")]
        assert not prompts, f"{name}: a copy button copies prompts: {prompts[:3]}"
    text = article.text_content()  # includes collapsed blocks (??? details)
    assert "--8<--" not in text
    # Each snippet include shows the first line of what it includes.
    md = (ROOT / "docs" / f"{name}.md").read_text()
    for target in re.findall(r'--8<-- "([^"]+)"', md):
        path, _, section = target.partition(":")
        lines = (ROOT / path).read_text().splitlines()
        if section:
            start = next(i for i, l in enumerate(lines) if f"[start:{section}]" in l)
            lines = lines[start + 1:]
        first = next(l.strip() for l in lines if l.strip())
        assert first in text, f"{name}: include {target} not rendered (looked for {first!r})"
    # Internal links resolve; in-page anchors exist.
    for href in set(article.locator("a[href]").evaluate_all("els => els.map(e => e.getAttribute('href'))")):
        absolute = urljoin(page.url, href)
        if urlparse(absolute).netloc != urlparse(base_url).netloc:
            continue
        target, _, anchor = absolute.partition("#")
        status, body = fetch(target)
        assert status == 200, href
        if anchor:
            assert f'id="{anchor}"' in body.decode(), f"{name}: broken anchor {href}"


@pytest.mark.parametrize("nb", NOTEBOOKS)
def test_notebook_page_has_outputs_and_download(visited, nb):
    """The stored outputs shown, the notebook offered for download as it is, the page reading well
    on a phone (390 px: the hardest width)."""
    visited(390, f"notebooks/{nb}").result(notebook_outputs_and_download)


def notebook_outputs_and_download(visit):
    page, nb = visit.page, visit.name.removeprefix("notebooks/")
    assert_reads_well(page, visit.name, 390)
    cells = json.loads((ROOT / "notebooks" / f"{nb}.ipynb").read_text())["cells"]
    stream = next("".join(o["text"]) for c in cells for o in c.get("outputs", []) if o.get("output_type") == "stream")
    first_line = next(l for l in stream.splitlines() if l.strip())
    assert page.locator(".jp-OutputArea-output").count() > 0
    assert first_line.strip() in page.locator("body").inner_text()
    link = page.locator("a.jp-DownloadNB[download]")
    assert link.count() == 1
    with urllib.request.urlopen(urljoin(page.url, link.get_attribute("href"))) as r:
        assert json.loads(r.read())["cells"] == cells


# --- Reading width: measured in the browser -------------------------------------------------

# Material's copy button copies the closest [data-copy] of its target, else the target's text.
COPIED_JS = """buttons => buttons.map(b => {
    const target = document.querySelector(b.getAttribute('data-clipboard-target'));
    const owner = target.closest('[data-copy]');
    return owner ? owner.getAttribute('data-copy') : target.innerText;
})"""

# What a reader of the article would call a layout defect, as a list of sentences.
LAYOUT_JS = """() => {
  const problems = [];
  const art = document.querySelector("article");
  const cs = getComputedStyle(art);
  const left = art.getBoundingClientRect().left + parseFloat(cs.paddingLeft);
  const content = art.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
  // Material lets code blocks and tables reach into the article's margins on phones.
  const right = Math.max(left + content, art.parentElement.getBoundingClientRect().right);
  const shown = e => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== "hidden";
  const all = sel => [...art.querySelectorAll(sel)].filter(shown);
  const label = e => (e.className || e.tagName).toString().slice(0, 40) + ": "
    + e.textContent.replace(/Copied!/g, "").replace(/\\s+/g, " ").trim().slice(0, 40);
  if (document.documentElement.scrollWidth > innerWidth + 1)
    problems.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} > ${innerWidth} px`);
  // Code, outputs and the title use the whole content width (code blocks in lists and boxes are
  // indented; the blocks that stand on their own are measured).
  const full = "h1, .jp-InputArea-editor, .jp-OutputArea-output, .md-content__inner > .highlight";
  for (const e of all(full)) {
    const w = e.getBoundingClientRect().width;
    if (w < 0.95 * content) problems.push(`${Math.round(w)} of ${Math.round(content)} px wide: ${label(e)}`);
  }
  // No word of the title, of the headings or of a code or output line split across two lines.
  for (const e of all("h1, h2, h3, pre")) {
    const ws = getComputedStyle(e).whiteSpace;  // (a pre that does not wrap needs no word check)
    if (e.tagName === "PRE" && (ws === "pre" || ws === "nowrap")) continue;
    const walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      for (const m of n.data.matchAll(/\\S+/g)) {
        const r = document.createRange();
        r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
        const tops = new Set([...r.getClientRects()].filter(q => q.width > 0).map(q => Math.round(q.top)));
        if (tops.size > 1) problems.push(`word split across lines: ${JSON.stringify(m[0])} in ${label(e)}`);
      }
    }
  }
  // Tables fit, or scroll inside the content: every column can be reached.
  for (const t of all("table")) {
    if (t.getBoundingClientRect().right <= right + 1) continue;
    let e = t, scrolls = false;
    for (; e && e !== art; e = e.parentElement) {
      const ox = getComputedStyle(e).overflowX;
      if ((ox === "auto" || ox === "scroll") && e.getBoundingClientRect().right <= right + 1
          && e.scrollWidth >= t.getBoundingClientRect().width - 1) { scrolls = true; break; }
    }
    if (!scrolls) problems.push(`table clipped at ${Math.round(right)} px: ${label(t)}`);
  }
  // Cell-tag chips (names like 'pitfall-batch') mean nothing to a reader.
  for (const e of all(".cell-tag, .celltoolbar")) problems.push(`cell tag shown: ${label(e)}`);
  // The download link is a line of its own above the title, not a column beside the notebook.
  const dl = document.querySelector("a.jp-DownloadNB"), h1 = art.querySelector("h1");
  if (dl && h1 && dl.getBoundingClientRect().bottom > h1.getBoundingClientRect().top + 1)
    problems.push("the download link sits beside the title instead of above it");
  return problems;
}"""


def assert_reads_well(page, name, width):
    problems = page.evaluate(LAYOUT_JS)
    assert not problems, f"{name} at {width} px: {len(problems)} problems, e.g. {problems[:8]}"


def test_layout_check_finds_what_issue_16_found(page):
    """The measurement can fail: a notebook page as it was (a floating download link beside the
    cells, a tag chip, an output wrapped inside a word, a table clipped by its box)."""
    page.set_viewport_size({"width": 390, "height": 844})
    page.set_content("""<div class="md-content"><article style="padding: 0 16px">
      <a class="jp-DownloadNB" style="float: right; width: 150px">Download notebook</a>
      <div style="display: flow-root"><h1>Step 2 notebook: a title</h1>
        <div class="jp-InputArea-editor"><span class="cell-tag">pitfall-batch</span></div>
        <div class="jp-OutputArea-output"><pre style="white-space: pre-wrap; word-break: break-all">
    $ python code/01_single.py --save runs/01-single.pt --epochs 5 --batch-size 96</pre></div>
        <div style="overflow: hidden"><table><tr><td>case</td><td>what it does, in a long cell that
          does not wrap</td><td>max |dparam|</td></tr></table></div></div></article></div>""")
    page.add_style_tag(content="td { white-space: nowrap }")
    problems = " | ".join(page.evaluate(LAYOUT_JS))
    for kind in ["px wide: H1", "px wide: jp-InputArea-editor", "word split across lines", "table clipped",
                 "cell tag shown", "download link sits beside"]:
        assert kind in problems, (kind, problems)


READING_WIDTH_PAGES = ["01-ddp", "09-reliability", "11-debugging", "12-fsdp2", "troubleshooting",
                       "notebooks/02-equivalence", "notebooks/clusters"]


@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("name", READING_WIDTH_PAGES)
def test_reading_width_and_screenshot(visited, name, width):
    """A step page and a notebook page (outputs, a wide table) on a laptop and on a phone.
    The screenshots in runs/screenshots/ are for a person to look at; the test measures."""
    visited(width, name).result(reading_width_and_screenshot)


def reading_width_and_screenshot(visit):
    page, name, width = visit.page, visit.name, visit.width
    assert_reads_well(page, name, width)
    shot = ROOT / "runs" / "screenshots" / f"{name.replace('/', '-')}-{width}.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=False, animations="disabled")
    assert shot.stat().st_size > 10_000


def test_copy_button_copies_the_command_without_prompt(browser, base_url):
    """A real click on the copy button of an output block, read back from the clipboard."""
    ctx = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    try:
        page = ctx.new_page()
        page.goto(base_url + "01-ddp/")
        page.wait_for_selector('article button[data-md-type="copy"]', state="attached", timeout=10_000)
        block = page.locator("article .highlight", has_text="$ torchrun").first
        shown = block.locator("code").inner_text()
        command = next(l for l in shown.splitlines() if l.startswith("$ "))
        block.hover()
        block.locator('button[data-md-type="copy"]').click()
        copied = page.evaluate("navigator.clipboard.readText()")
        assert copied == command[2:], (copied, command)
    finally:
        ctx.close()


# --- Nothing important off screen: measured on every page ---------------------------------

# Per page: code blocks and tables that scroll sideways, by kind (an output: what a command
# printed, including error messages, which wraps; source: python, bash, batch scripts, diffs,
# which keep their lines and scroll), source lines wider than their block, text clipped by a
# box or the window, copy buttons covering a character of their block, and tokens (a flag, a
# file name) split across two lines in a heading, a table cell or a wrapped output.
READING_JS = r"""() => {
  const art = document.querySelector("article");
  const cs = getComputedStyle(art);
  const left = art.getBoundingClientRect().left + parseFloat(cs.paddingLeft);
  const content = art.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
  const right = Math.max(left + content, art.parentElement.getBoundingClientRect().right);
  const shown = e => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== "hidden";
  const all = sel => [...art.querySelectorAll(sel)].filter(shown);
  const label = e => e.textContent.replace(/Copied!/g, "").replace(/\s+/g, " ").trim().slice(0, 50);
  const scrolls = e => e.scrollWidth > e.clientWidth + 1 && ["auto", "scroll"].includes(getComputedStyle(e).overflowX);
  const kind = pre => {
    if (pre.closest(".jp-OutputArea-output")) return "output";
    if (pre.closest(".jp-InputArea, .highlight-ipynb")) return "source";
    const hl = pre.closest(".highlight");
    const lang = hl && [...hl.classList].find(c => c.startsWith("language-"));
    return (!lang || lang === "language-text" || lang === "language-console") ? "output" : "source";
  };
  const out = {output: [0, []], source: [0, []], table: [0, []], overlap: [], clipped: [], split: [], lines: [0, 0], codebreak: [], columns: [0, []], colscroll: 0};
  const wide = pre => [pre, pre.parentElement, ...pre.querySelectorAll(":scope > code")].some(scrolls) || pre.getBoundingClientRect().right > right + 1;
  for (const pre of all("pre")) {
    const k = kind(pre);
    out[k][0]++;
    if (wide(pre)) {  // (an output whose table rows alone are wider scrolls on purpose)
      const cols = [...pre.querySelectorAll(".columns")];
      cols.forEach(c => c.style.display = "none");
      const still = wide(pre);
      cols.forEach(c => c.style.display = "");
      if (k === "source" || still) out[k][1].push(label(pre)); else out.colscroll++;
    }
    if (k === "source") {  // how many of its lines are wider than the block shows
      const code = pre.querySelector(":scope > code") || pre;
      const box = [code, pre, pre.parentElement].find(e => ["auto", "scroll"].includes(getComputedStyle(e).overflowX)) || code;
      const probe = document.createElement("span"); probe.textContent = "0".repeat(40); code.appendChild(probe);
      const cw = probe.getBoundingClientRect().width / 40; probe.remove();
      const cs = getComputedStyle(code);
      const room = Math.floor((box.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight)) / cw);
      const lines = code.textContent.replace(/\n$/, "").split("\n");
      out.lines[0] += lines.length; out.lines[1] += lines.filter(l => l.length > room).length;
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
  for (const e of all("h1, h2, h3, td, th, pre")) {
    const ws = getComputedStyle(e).whiteSpace;
    if (e.tagName === "PRE" && (ws === "pre" || ws === "nowrap") && !e.querySelector("code[style], code")) continue;
    const walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (["pre", "nowrap"].includes(getComputedStyle(n.parentElement).whiteSpace)) continue;
      for (const m of n.data.matchAll(/\S+/g)) {
        const r = document.createRange(); r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
        const tops = new Set([...r.getClientRects()].filter(q => q.width > 0).map(q => Math.round(q.top)));
        if (tops.size > 1) out.split.push(`${JSON.stringify(m[0])} in ${e.tagName} ${label(e)}`);
      }
    }
  }
  // Output lines that are table rows (next to another row; a gap of two or more spaces inside,
  // a short last field: squeue, sacct, a sweep) stay on one line each.
  const row = l => l !== undefined && !l.startsWith("$ ") && /\S {2,}\S/.test(l) && l.trim().split(/ {2,}/).pop().split(/\s+/).length <= 6;
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
    let start = 0;
    lines.forEach((l, i) => {
      const s0 = start; start += l.length + 1;
      if (!row(l) || !(row(lines[i - 1]) || row(lines[i + 1]))) return;
      const r = document.createRange(), [a, ao] = at(s0), [b, bo] = at(s0 + l.trimEnd().length);
      r.setStart(a, ao); r.setEnd(b, bo);
      out.columns[0]++;
      if (new Set([...r.getClientRects()].filter(q => q.width > 0).map(q => Math.round(q.top))).size > 1)
        out.columns[1].push(l.trim().slice(0, 60));
    });
  }
  // Inline code (prose, lists, tables) that breaks across lines inside a token: where (the two
  // characters before the break and the one after), judged per width by the test.
  for (const c of all("code")) {
    if (c.closest("pre, .search-only, h1, h2, h3, h4, h5, h6")) continue;
    if (new Set([...c.getClientRects()].filter(q => q.width > 0).map(q => Math.round(q.top))).size < 2) continue;
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
}"""


FLAG_OR_FILE = re.compile(r"-.*|[\w.~$/<>-]*\w\.[A-Za-z]\w{0,7}|[^(=]*/[^(=]*")


def bad_code_break(width, token, before, after):
    """Inline code breaks between words; inside a token only after a '-' that follows a letter or
    digit (never inside '--'), after '/', ',', '(', '[' or '=', or before a '.'; and inside a flag
    or a file name at 1280 px only after a folder's '/', on a phone only there."""
    if width >= 1280 and FLAG_OR_FILE.fullmatch(token):
        return not (before[-1:] == "/" and "/" in token and not token.startswith("-"))
    return not ((before[-1:] == "-" and before[-2:-1].isalnum()) or before[-1:] in "/,([=" or after == ".")


# Bounds: at 1280 px nothing an output or a table shows is off screen; on a phone
# a few long tokens (a 70-character sacct --format flag) scroll, and so do tables of four or
# more columns (each column stays reachable: the scroll is inside the table's box). Source code
# is counted apart: its lines are not wrapped (a wrapped line of a batch script reads as two
# lines); lines of about 80 characters fit the 1280 px column, and the share of longer ones is
# bounded just above what was measured once every batch script fitted 80 characters (1,261 of
# 6,002 lines, 21.0 %; 24 % before): what is left is Python source, lines up to ~100 characters.
# The site before these bounds, at 1280 px: 294 of 541 page code blocks and notebook outputs
# scrolled (the pages' blocks carried no language then), 16 of 46 tables, and copy buttons
# covered text in 232 blocks (155 on pages, 77 notebook code cells).
BOUNDS = {  # width: {kind: largest share that may scroll}
    1280: {"output": 0.02, "table": 0.05, "lines": 0.22},
    390: {"output": 0.05, "table": 0.75, "lines": 0.75},
}
ALL_PAGES = PAGES + [f"notebooks/{nb}" for nb in NOTEBOOKS]


def reading(visit):
    """READING_JS on the page, once Material's JavaScript has added the copy buttons."""
    if visit.page.locator("article pre > code").count():
        visit.page.wait_for_selector('article button[data-md-type="copy"]', state="attached", timeout=10_000)
    return visit.page.evaluate(READING_JS)


def page_type(url):
    return "notebook" if url.startswith("notebooks/") else "step" if url[:2].isdigit() else "other"


@pytest.mark.parametrize("width", [1280, 390])
def test_nothing_important_off_screen(visited, width):
    found, totals, problems = {}, {}, []
    for name in ALL_PAGES:
        url = url_of(name)
        r = found[url or "index"] = visited(width, name).result(reading)
        for kind in ("output", "source", "table"):
            t = totals.setdefault((page_type(url), kind), [0, 0])
            t[0] += len(r[kind][1]); t[1] += r[kind][0]
        t = totals.setdefault((page_type(url), "lines"), [0, 0])
        t[0] += r["lines"][1]; t[1] += r["lines"][0]
        problems += [f"{url}: {what}: {x}" for what in ("clipped", "overlap", "split") for x in r[what]]
        problems += [f"{url}: table row wrapped: {x!r}" for x in r["columns"][1]]
        t = totals.setdefault(("all", "rows"), [0, 0])
        t[0] += r["colscroll"]; t[1] += r["columns"][0]
        problems += [f"{url}: inline code broken after {b!r} before {a!r}: {token!r} ({where})"
                     for token, b, a, where in r["codebreak"] if bad_code_break(width, token, b, a)]
    report = ROOT / "runs" / "screenshots" / f"reading-{width}.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps({"totals": {f"{t} {k}": v for (t, k), v in sorted(totals.items())},
                                  "pages": found}, indent=1))
    summary = {f"{t} {k}": f"{a}/{b}" for (t, k), (a, b) in sorted(totals.items())}
    assert totals[("all", "rows")][1] > 100, f"no table rows found in the outputs: {summary}"  # (the check ran)
    for kind, bound in BOUNDS[width].items():
        a = sum(v[0] for (t, k), v in totals.items() if k == kind)
        b = sum(v[1] for (t, k), v in totals.items() if k == kind)
        assert a <= bound * b, f"{width} px: {a} of {b} {kind} scroll sideways (bound {bound:.0%}): {summary}"
    assert not problems, f"{width} px: {len(problems)} problems, e.g. {problems[:10]}"


def test_reading_check_finds_what_issue_24_found(page):
    """The measurement can fail: an output that does not wrap, a table of max-content width,
    a flag split inside a table cell, a copy button on the text, a heading cut off by its box."""
    page.set_viewport_size({"width": 390, "height": 844})
    page.set_content("""<div class="md-content"><article style="padding: 0 16px">
      <div style="overflow: hidden; width: 200px"><h2 style="white-space: nowrap">3. TORCH_DISTRIBUTED_DEBUG=DETAIL: the mismatch</h2></div>
      <div class="language-text highlight"><pre style="position: relative"><button data-md-type="copy"
        style="position: absolute; right: 0; top: 0; width: 24px; height: 24px"></button><code
        style="display: block; overflow: auto; white-space: pre">error: RendezvousTimeoutError: the rendezvous timed out after 600 s</code></pre></div>
      <table style="display: block; width: max-content; max-width: 100%; overflow-x: auto; white-space: nowrap"><tr><td>a cell</td>
        <td>a long line that would wrap if the table let it wrap like a table of a step page</td></tr></table>
      <table><tr><td style="width: 60px; word-break: break-all">--gres=gpu:gh200:1</td></tr></table>
      <p style="width: 40px">Use <code style="word-break: break-all">--ntasks-per-node=1</code></p>
      <div class="language-text highlight" style="width: 200px"><pre><code style="white-space: pre-wrap">   JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)
      12   gputest  01-ddp     user  R       0:01      1 node1</code></pre></div>
      </article></div>""")
    r = page.evaluate(READING_JS)
    assert r["output"][1] and r["table"][1], r
    assert any("--gres" in s for s in r["split"]), r["split"]
    assert r["overlap"] and r["clipped"], r
    assert r["columns"] == [2, ["JOBID PARTITION     NAME     USER ST       TIME  NODES NODEL", "12   gputest  01-ddp     user  R       0:01      1 node1"]], r["columns"]
    breaks = [(b, a) for token, b, a, where in r["codebreak"] if token == "--ntasks-per-node=1"]
    assert len(breaks) >= 3 and all(bad_code_break(1280, "--ntasks-per-node=1", b, a) for b, a in breaks), r
    cases = [("s-", "p"), ("--", "n"), ("-n", "t"), ("d/", "0"), ("01", "."), ("ab", "c")]
    assert [bad_code_break(390, "--x-y", b, a) for b, a in cases] == [False, True, True, False, False, True]
    assert not bad_code_break(1280, "slurm/05-x.sbatch", "m/", "0") and bad_code_break(1280, "--a=b/c", "b/", "c")
    assert [bad_code_break(1280, t, "rm", ".") for t in ["slurm/05-x.sbatch", "code/01_ddp.py", "--account",
                                                           "nn.SyncBatchNorm.convert_sync_batchnorm(model)"]] == [True] * 3 + [False]


DIAGRAM_JS = r"""() => [...document.querySelectorAll("article figure.diagram")].map(f => {
  const img = f.querySelector("a > img");
  return {src: img.getAttribute("src"), href: img.parentElement.getAttribute("href"), width: img.getBoundingClientRect().width,
          natural: img.naturalWidth, box: f.clientWidth, scroll: f.scrollWidth, overflow: getComputedStyle(f).overflowX,
          hint: getComputedStyle(f.querySelector("figcaption")).display};
})"""


DIAGRAM_PAGES = ["05-multinode"]  # (every diagram is in such a figure: tests/test_diagrams.py)


def test_diagrams_keep_their_size_on_a_phone(visited):
    """An idea diagram is shown at its natural size: in the 1280 px column it fits; on a phone it
    scrolls sideways in its own box, with a hint, and a tap opens the SVG on its own (a figure
    shrunk to the phone's width had text of 7 px)."""
    for width in (390, 1280):
        for name in DIAGRAM_PAGES:
            figures = visited(width, name).result(diagrams)
            assert figures, f"{name}: no figure.diagram"
            for f in figures:
                assert f["href"] == f["src"] and f["src"].endswith(".svg"), (name, f)
                assert f["natural"] > 0 and abs(f["width"] - f["natural"]) < 1, (name, width, f)
                if width == 1280:
                    assert f["scroll"] <= f["box"] and f["hint"] == "none", (name, f)
                else:
                    assert f["scroll"] > f["box"] and f["overflow"] == "auto" and f["hint"] == "block", (name, f)


def diagrams(visit):
    """Each figure.diagram of the page, measured (DIAGRAM_JS) once its images have loaded."""
    visit.page.wait_for_function("() => [...document.querySelectorAll('figure.diagram img')].every(i => i.complete)")
    return visit.page.evaluate(DIAGRAM_JS)


# --- Navigation ------------------------------------------------------------------------------

def test_header_links_to_the_repository(tab, base_url):
    tab.set_viewport_size({"width": 1280, "height": 900})
    tab.goto(base_url)
    link = tab.locator("header a[data-repository-link]")
    assert link.is_visible()
    link.click()
    tab.wait_for_load_state()
    assert tab.url == base_url + "repository/"
    archive = tab.locator("article a[download][href$='.zip']")
    with urllib.request.urlopen(urljoin(tab.url, archive.get_attribute("href"))) as r:
        names = set(zipfile.ZipFile(io.BytesIO(r.read())).namelist())
    listed = tab.locator("article li code").all_inner_texts()
    assert "mkdocs.yml" in listed and "code/01_ddp.py" in listed
    assert {f"ddp-tutorial/{n}" for n in listed} == names
    # On a phone the header has no room for it: the navigation drawer lists the page.
    tab.set_viewport_size({"width": 390, "height": 844})
    tab.goto(base_url)
    tab.locator("label.md-header__button[for=__drawer]").click()
    assert tab.locator("nav.md-nav--primary a[href$='repository/']").first.is_visible()


def type_search(page, base_url, query):
    """Type `query` into the search box until results show; return the box and the first result."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(base_url)
    box = page.locator(".md-search__input")
    box.click()
    first = page.locator(".md-search-result__item").first
    for _ in range(10):  # typed (Material reads keystrokes); before the search index is ready: again
        box.press_sequentially(query)
        try:
            first.wait_for(timeout=2_000)
            break
        except PlaywrightTimeout:
            box.fill("")
    return box, first


def search(page, base_url, query):
    """The pages of the search results for `query`, typed into the search box, in their order."""
    type_search(page, base_url, query)
    page.wait_for_timeout(300)  # (results for the whole query, not for its first letters)
    hrefs = page.locator(".md-search-result__item a").evaluate_all("els => els.map(e => e.getAttribute('href'))")
    return list(dict.fromkeys(urlparse(h).path.removeprefix(urlparse(base_url).path) for h in hrefs))


# Real error messages the pages show (each in an executed output), and the step that teaches it.
ERRORS = [("RendezvousTimeoutError", "05-multinode/"), ("DistNetworkError", "05-multinode/"),
          ("SIGUSR1", "09-reliability/"), ("LOCAL_RANK is not set", "01-ddp/"),
          ("Detected mismatch between collectives", "11-debugging/"),
          # what jobs print: sacct's line and slurmd's message of a job that
          # could not open its output; a PROBLEM line of the drop-in check, printed by a notebook
          ("FAILED 0:53", "troubleshooting/"), ("Could not open stdout", "troubleshooting/"),
          ("PROBLEM global batch 192", "your-own-script/"), ("CUDA out of memory", "troubleshooting/")]


@pytest.mark.parametrize("query, step", ERRORS)
def test_search_finds_a_pasted_error(tab, base_url, query, step):
    """A pasted error message lands on the step that shows and explains it (code blocks are in
    the index, and with them every reproduced error)."""
    pages = search(tab, base_url, query)
    assert step in pages[:3], f"{query!r}: results {pages[:5]}"


@pytest.mark.parametrize("query, step", [("DeepSpeed", "06-deepspeed"), ("SyncBatchNorm", "02-equivalence")])
def test_search_enter_opens_the_step_page(tab, base_url, query, step):
    """Enter opens the first result: the step's page, not its notebook, nor a code dump."""
    box, first = type_search(tab, base_url, query)
    assert "Copied!" not in first.inner_text()
    box.press("Enter")
    tab.wait_for_url(re.compile(re.escape(base_url) + step + "/"), timeout=10_000)



# Charts drawn without tools/charts.py: none left.
CHARTS_PENDING = set()


def test_chart_text_at_least_11_px(visited, site_dir):
    """Every chart's smallest text is at least 11 px as a 1280 px window shows it (no digits of 3-6 px,
    no title cut). tools/charts.py records in each PNG the smallest font size the
    figure draws and its dpi; the browser gives the width the page shows it at."""
    pages = sorted(p.parent.relative_to(site_dir).as_posix() for p in site_dir.rglob("index.html")
                   if re.search(r'<img\b[^>]*\bsrc="(data:image/png|[^"]+\.png")', p.read_text()))
    assert len(pages) >= 7, pages  # steps 1, 3, 6, 13, 14: page and notebook, where it shows them
    bad, seen = [], 0
    for name in pages:
        if name in CHARTS_PENDING:
            continue
        measured, problems = visited(1280, "index" if name == "." else name).result(chart_text)
        seen += measured
        bad += problems
    assert seen >= 12 and not bad, f"{seen} charts measured; {bad}"


def chart_text(visit):
    """The PNGs of the page's article: how many were measured, and the problems found."""
    import base64
    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))
    import charts
    name, site_dir, bad, seen = visit.name, visit.site_dir, [], 0
    for src, shown, natural in visit.page.locator("article img").evaluate_all("""els => els
        .filter(e => /^data:image\\/png|\\.png$/.test(e.getAttribute("src")))
        .map(e => [e.src, e.getBoundingClientRect().width, e.naturalWidth])"""):
        data = base64.b64decode(src.split(",", 1)[1]) if src.startswith("data:") else \
            (site_dir / urlparse(src).path.lstrip("/")).read_bytes()
        what = f"{name}: {src[:40] if src.startswith('data:') else urlparse(src).path}"
        meta = charts.read(io.BytesIO(data))
        if meta is None:
            bad.append(f"{what}: not saved by tools/charts.py (no chart-smallest-pt)")
        elif not shown:
            bad.append(f"{what}: not shown (width 0)")
        else:
            seen += 1
            px = charts.text_px(meta["smallest_pt"], meta["dpi"], natural, shown)
            if px < 11:
                bad.append(f"{what}: smallest text {px:.1f} px ({meta['smallest_pt']:g} pt, shown {shown:.0f} of {natural} px)")
    return seen, bad

# --- Dark mode -------------------------------------------------------------------------------

CONTRAST_JS = """sel => {
  const rgb = c => (c.match(/[\\d.]+/g) || []).slice(0, 3).map(Number);
  const lum = c => { const [r, g, b] = rgb(c).map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
                     return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const opaque = c => c.startsWith("rgb(") || (c.startsWith("rgba(") && rgb(c).length && Number(c.split(",")[3]) >= 0.5);
  const bg = e => { for (; e; e = e.parentElement) { const c = getComputedStyle(e).backgroundColor;
                    if (opaque(c)) return c; } return "rgb(255, 255, 255)"; };
  return [...document.querySelectorAll(sel)].filter(e => e.getClientRects().length).slice(0, 40).map(e => {
    const a = lum(getComputedStyle(e).color), b = lum(bg(e));
    return [(Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05), e.tagName + " " + e.textContent.trim().slice(0, 30)];
  });
}"""


@pytest.mark.parametrize("name", ["01-ddp", "notebooks/01-ddp"])
def test_dark_mode_toggle_and_contrast(page, base_url, name):
    """The header's toggle switches to the dark scheme; prose, code and outputs stay readable
    (contrast at least 4.5:1, WCAG AA) on a step page and a notebook page. Screenshots for a person."""
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(base_url + f"{name}/")
    assert page.evaluate("document.body.dataset.mdColorScheme") == "default"
    page.locator("form[data-md-component=palette] label:visible").first.click()
    page.wait_for_function("document.body.dataset.mdColorScheme === 'slate'")
    low = [(round(c, 1), what) for c, what in page.evaluate(CONTRAST_JS, "article p, article li, article pre code, "
           "article td, .jp-OutputArea-output pre, .jp-InputArea-editor pre") if c < 4.5]
    assert not low, f"{name} in dark mode: text with too little contrast: {low[:8]}"
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        shot = ROOT / "runs" / "screenshots" / f"dark-{name.replace('/', '-')}-{width}.png"
        page.screenshot(path=str(shot), full_page=False, animations="disabled")


CHART_LIGHTNESS = """img => new Promise(done => {
  const c = document.createElement("canvas"), w = c.width = 64, h = c.height = 64, g = c.getContext("2d");
  g.filter = getComputedStyle(img).filter;  // the image as the page draws it
  g.drawImage(img, 0, 0, w, h);
  const d = g.getImageData(0, 0, w, h).data;
  let sum = 0;
  for (let i = 0; i < d.length; i += 4) sum += (0.2126 * d[i] + 0.7152 * d[i + 1] + 0.0722 * d[i + 2]) / 255;
  done([sum / (w * h), getComputedStyle(img).filter]);
})"""


@pytest.mark.parametrize("name, chart", [("03-lr-scaling", "a.chart img"),
                                         ("notebooks/03-lr-scaling", ".jp-RenderedImage img")])
def test_charts_turn_dark_in_dark_mode(page, base_url, name, chart):
    """A chart (a white PNG) is drawn dark in the dark scheme and as it is in the light one (issue
    41, item 4: charts stayed white in dark mode). Measured: the mean lightness of the image's
    pixels with the filter the page gives it."""
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(base_url + f"{name}/")
    img = page.locator(chart).first
    light, how = img.evaluate(CHART_LIGHTNESS)
    assert light > 0.7 and how == "none", f"{name} in light mode: lightness {light:.2f}, filter {how}"
    page.locator("form[data-md-component=palette] label:visible").first.click()
    page.wait_for_function("document.body.dataset.mdColorScheme === 'slate'")
    dark, how = img.evaluate(CHART_LIGHTNESS)
    assert dark < 0.3, f"{name} in dark mode: lightness {dark:.2f} (filter {how})"


# --- The memory calculator of step 16 --------------------------------------------------------

CALCULATOR_PAGE = "16-memory"
# What a reader types: billions of parameters, layout, devices, precision, optimizer, device,
# activations (GiB, "" for none), and for fsdp2-tp the TP degree and the share it does not split.
# 1B to 70B, every layout, both precisions, optimizers and devices, 1, 4 and 8 devices.
CALCULATOR_CASES = [
    ("1", "ddp", "1", "fp32", "sgd", "GH200 (Roihu)", "", None),
    ("7", "ddp", "4", "bf16-mixed", "adam", "GH200 (Roihu)", "", None),
    ("7", "zero1", "4", "bf16-mixed", "adam", "GH200 (Roihu)", "", None),
    ("7", "zero2", "8", "bf16-mixed", "adam", "MI250X GCD (LUMI)", "", None),
    ("7", "fsdp2", "4", "bf16-mixed", "adam", "GH200 (Roihu)", "20", None),
    ("13", "fsdp2", "8", "fp32", "adam", "MI250X GCD (LUMI)", "", None),
    ("13", "zero1", "1", "fp32", "sgd", "MI250X GCD (LUMI)", "", None),
    ("13", "ddp", "8", "bf16-mixed", "sgd", "MI250X GCD (LUMI)", "3.5", None),
    ("1", "zero2", "4", "fp32", "adam", "GH200 (Roihu)", "0.125", None),  # (a tie: Python prints 0.12)
    ("70", "fsdp2", "8", "bf16-mixed", "adam", "GH200 (Roihu)", "", None),
    ("70", "fsdp2-tp", "8", "bf16-mixed", "adam", "GH200 (Roihu)", "", ("4", "0")),
    ("70", "fsdp2-tp", "8", "bf16-mixed", "sgd", "MI250X GCD (LUMI)", "12", ("2", "0.01")),
    ("7", "fsdp2-tp", "4", "fp32", "adam", "GH200 (Roihu)", "", ("4", "")),
    # the rows step 16's notebook measures: 3,159,050 parameters (6 blocks of width 256), 4
    # processes, fp32; under fsdp2-tp the norms, the head and the down biases (7,178) are not split
    ("0.00315905", "zero2", "4", "fp32", "sgd", "MI250X GCD (LUMI)", "", None),
    ("0.00315905", "fsdp2-tp", "4", "fp32", "adam", "GH200 (Roihu)", "", ("2", str(7178 / 3159050))),
]


def fill_calculator(calc, params, layout, devices, precision, optimizer, device, activations, tp):
    """Type a case into the calculator's form as a reader would; return what it shows."""
    calc.locator("select[name=layout]").select_option(layout)  # (first: it shows the TP fields)
    calc.locator("input[name=params]").fill(params)
    calc.locator("input[name=devices]").fill(devices)
    calc.locator("select[name=precision]").select_option(precision)
    calc.locator("select[name=optimizer]").select_option(optimizer)
    calc.locator("select[name=device]").select_option(device)
    calc.locator("input[name=activations]").fill(activations)
    if tp:
        calc.locator("input[name=tp]").fill(tp[0])
        calc.locator("input[name=replicated]").fill(tp[1])
    return calc.locator(".mc-result").evaluate("""r => ({
      rows: [...r.querySelectorAll("tr[data-term]")].map(t => [t.dataset.term, t.dataset.bytes ?? t.dataset.gib,
                                                               t.querySelector("td").textContent]),
      verdict: r.querySelector(".mc-verdict")?.textContent.replace(/\\s+/g, " ").trim(),
      error: r.querySelector(".mc-error")?.textContent})""")


def test_memory_calculator_prints_what_the_formula_computes(tab, base_url):
    """The calculator on step 16's page (docs/javascripts/memory-calculator.js) prints, for each
    case a reader types, the bytes of code/memory_formula.py: each term's bytes exactly (its
    data-bytes), in GiB with 2 decimals, the total with the activations, fits or does not fit; and
    a layout that cannot be built, or a field that is not a number, in one line."""
    if str(ROOT / "code") not in sys.path:
        sys.path.insert(0, str(ROOT / "code"))
    import memory_formula as mf
    tab.goto(base_url + url_of(CALCULATOR_PAGE))
    calc = tab.locator("article div.memory-calculator")
    assert calc.count() == 1, f"{CALCULATOR_PAGE}: {calc.count()} calculators"
    calc.locator("form").wait_for()
    verdicts = set()
    for case in CALCULATOR_CASES:
        params, layout, devices, precision, optimizer, device, activations, tp = case
        shown = fill_calculator(calc, *case)
        kw = dict(precision=precision, optimizer=optimizer)
        if tp:
            kw.update(tp=int(tp[0]), replicated=float(tp[1] or 0))
        terms = mf.bytes_per_device(float(params) * 1e9, layout, int(devices), **kw)
        gib, ok = mf.fits(float(params) * 1e9, layout, int(devices), device, float(activations or 0), **kw)
        act = float(activations or 0)
        expected = [[t, terms[t], f"{terms[t] / mf.GIB:.2f} GiB"] for t in ("weights", "gradients", "optimizer")]
        expected += [["activations", act, f"{act:.2f} GiB"], ["total", gib, f"{gib:.2f} GiB"]]
        rows = [[t, float(v), text] for t, v, text in shown["rows"]]  # (JavaScript writes 4e9 as 4000000000)
        assert shown["error"] is None and rows == expected, (case, shown)
        words = "fits" if ok else "does not fit"
        assert shown["verdict"].startswith(f"{words} ") and f"{mf.DEVICES[device]} GiB of one {device}" in shown["verdict"], (case, shown)
        verdicts.add(ok)
    assert verdicts == {True, False}, "the cases should include a model that fits and one that does not"
    # Impossible input: one line, the formula's own message where the formula refuses.
    errors = [
        (("7", "fsdp2-tp", "4", "bf16-mixed", "adam", "GH200 (Roihu)", "", ("3", "0")),
         lambda: mf.bytes_per_device(7e9, "fsdp2-tp", 4, tp=3)),
        (("7", "fsdp2", "0", "bf16-mixed", "adam", "GH200 (Roihu)", "", None),
         lambda: mf.bytes_per_device(7e9, "fsdp2", 0)),
        (("7", "zero1", "2.5", "fp32", "adam", "GH200 (Roihu)", "", None),
         lambda: mf.bytes_per_device(7e9, "zero1", 2.5)),
    ]
    for case, python in errors:
        with pytest.raises(ValueError) as e:
            python()
        shown = fill_calculator(calc, *case)
        assert shown["error"] == str(e.value) and not shown["rows"], (case, shown)
    for field, value, message in [("params", "seven", 'parameters: "seven" is not a number'),
                                  ("devices", "", 'devices: "" is not a number'),
                                  ("activations", "-1", "activations -1: at least 0 GiB")]:
        fill_calculator(calc, *CALCULATOR_CASES[1])
        calc.locator(f"input[name={field}]").fill(value)
        assert calc.locator(".mc-error").text_content() == message, (field, value)
        assert calc.locator(".mc-error").evaluate(LINES_JS) == 1, (field, value)


LINES_JS = """e => { const r = document.createRange(); r.selectNodeContents(e);
  return new Set([...r.getClientRects()].filter(q => q.width > 0).map(q => Math.round(q.top))).size; }"""


def test_memory_calculator_on_a_phone_and_in_dark_mode(page, base_url):
    """At 390 px the form's fields stand one under the other and neither they nor the result make
    the page scroll sideways; in the dark scheme its labels, fields and numbers stay readable."""
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(base_url + url_of(CALCULATOR_PAGE))
    calc = page.locator("article div.memory-calculator")
    calc.locator("form").wait_for()
    fill_calculator(calc, *CALCULATOR_CASES[10])  # every field shown
    m = calc.evaluate("""c => {
      const form = c.querySelector("form").getBoundingClientRect(), art = c.closest("article").getBoundingClientRect();
      const labels = [...c.querySelectorAll("label")].filter(l => l.getClientRects().length);
      return {page: document.documentElement.scrollWidth, window: innerWidth, calc: [c.scrollWidth, c.clientWidth],
              right: Math.max(...[...c.querySelectorAll("*")].map(e => e.getBoundingClientRect().right)), article: art.right,
              lefts: new Set(labels.map(l => Math.round(l.getBoundingClientRect().left))).size, labels: labels.length,
              table: c.querySelector(".mc-terms").getBoundingClientRect().right};
    }""")
    assert m["page"] <= m["window"] and m["calc"][0] <= m["calc"][1] + 1, m
    assert m["right"] <= m["article"] + 1 and m["table"] <= m["article"] + 1, m
    assert m["labels"] == 9 and m["lefts"] == 1, f"the fields do not stand one under the other: {m}"
    page.set_viewport_size({"width": 1280, "height": 900})
    page.locator("form[data-md-component=palette] label:visible").first.click()
    page.wait_for_function("document.body.dataset.mdColorScheme === 'slate'")
    contrast = page.evaluate(CONTRAST_JS, ".memory-calculator label > span, .memory-calculator input, "
                             ".memory-calculator select, .memory-calculator th, .memory-calculator td, .mc-verdict")
    low = [(round(c, 1), what) for c, what in contrast if c < 4.5]
    assert len(contrast) >= 10 and not low, f"the calculator in dark mode: {low or contrast}"
