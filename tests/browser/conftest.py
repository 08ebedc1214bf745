"""The built site as a reader sees it, in headless Chromium (Debian's, driven by Playwright).

Loading a page is what costs (about 0.6 s of Chromium's CPU), so `loaded(width, name)` loads each
page once per window width and measures it then (js/reading.js, js/layout.js, js/page.js); every
test of that page and width asserts on those measurements (a test that needs the page itself,
for a screenshot, takes its `.tab`). The tests that open pages and only read them share one tab
(`tab`); a test that changes what the site remembers (dark mode, a content tab chosen) or writes
a page of its own gets a browser context of its own (`page`).
"""
import functools
import http.server
import json
import os
import shutil
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JS = Path(__file__).resolve().parent / "js"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

PAGES = sorted(p.relative_to(ROOT / "docs").with_suffix("").as_posix() for p in (ROOT / "docs").glob("*.md"))
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
ALL_PAGES = PAGES + [f"notebooks/{nb}" for nb in NOTEBOOKS]


def url_of(name):
    return "" if name == "index" else f"{name}/"


@functools.cache
def js(*names):
    """The function of js/<last name>.js, for page.evaluate; the files named before it (helpers)
    are declarations it uses."""
    *helpers, main = [(JS / f"{name}.js").read_text() for name in names]
    if not helpers:
        return main
    return "(() => {\n" + "\n".join(helpers) + "\nreturn (\n" + main + "\n);\n})()"


def to_dark(page):
    """Click the header's toggle to the dark colour scheme."""
    page.locator("form[data-md-component=palette] label:visible").first.click()
    page.wait_for_function("document.body.dataset.mdColorScheme === 'slate'")


def pytest_runtest_setup(item):
    """(A hook of this folder's conftest: it runs for this folder's tests only.)"""
    if not CHROMIUM:
        pytest.skip("chromium missing: apt-get install chromium")


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


@pytest.fixture(scope="session")
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


@pytest.fixture(scope="session")
def screenshots():
    """runs/screenshots/: pictures of pages for a person to look at (the tests measure)."""
    folder = ROOT / "runs" / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def measure(tab, url):
    """Load `url` in `tab`; what js/reading.js, js/layout.js and js/page.js measure on it then."""
    tab.goto(url)
    # Material adds the copy buttons with its JavaScript; the diagrams' size is their image's.
    if tab.locator("article pre > code").count():
        tab.wait_for_selector('article button[data-md-type="copy"]', state="attached", timeout=10_000)
    tab.wait_for_function("() => [...document.querySelectorAll('figure.diagram img')].every(i => i.complete)")
    return {"reading": tab.evaluate(js("helpers", "reading")), "layout": tab.evaluate(js("helpers", "layout")),
            **tab.evaluate(js("helpers", "page"))}


class Loaded:
    """Page `name` as a `width` px wide, 900 px tall window showed it when it loaded: the fields
    of measure() (reading, layout, and js/page.js's navigation, navigation_lines, code_blocks,
    copy_buttons, copied, text, links, pngs, diagrams, outputs, output_text, downloads)."""

    def __init__(self, tab, url, name, width, measured):
        self.name, self.width, self.url, self._tab = name, width, url, tab
        vars(self).update(measured)

    @property
    def tab(self):
        """The width's tab, showing this page: loaded again if another page has replaced it."""
        if self._tab.url != self.url:
            self._tab.goto(self.url)
        return self._tab


@pytest.fixture(scope="session")
def loaded(browser, base_url, tmp_path_factory):
    """loaded(width, name): the Loaded page `name` at `width` (one tab per width). It is measured
    the first time a test asks for it; under xdist (make test) the workers share the
    measurements, a file each, as they share site_dir's build."""
    import filelock
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    shared = tmp_path_factory.getbasetemp()
    shared = (shared.parent if run else shared) / f"pages-{run or 'main'}"
    shared.mkdir(exist_ok=True)
    tabs, pages = {}, {}

    def loaded(width, name):
        if (width, name) not in pages:
            if width not in tabs:
                tabs[width] = browser.new_page(viewport={"width": width, "height": 900})
            url, file = base_url + url_of(name), shared / f"{width}-{name.replace('/', '-')}.json"
            with filelock.FileLock(f"{file}.lock"):
                if not file.exists():
                    file.write_text(json.dumps(measure(tabs[width], url)))
                measured = json.loads(file.read_text())
            pages[width, name] = Loaded(tabs[width], url, name, width, measured)
        return pages[width, name]

    yield loaded
    for t in tabs.values():
        t.close()
