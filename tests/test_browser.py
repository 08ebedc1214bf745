"""The built site as a reader sees it, in headless Chromium (Debian's, driven by Playwright).

Checks: the steps appear in order in the navigation, content tabs switch, code blocks have
copy buttons, every snippet include is rendered, internal links resolve, notebook pages show
their stored outputs and offer the .ipynb for download.
"""
import functools
import http.server
import json
import re
import shutil
import threading
import urllib.request
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

    handler = functools.partial(Quiet, directory=str(site_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
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
    ctx = browser.new_context()
    pg = ctx.new_page()
    yield pg
    ctx.close()


def test_steps_in_order_in_navigation(page, base_url):
    page.goto(base_url)
    labels = [t.strip() for t in page.locator("nav.md-nav--primary > ul > li > :is(a, label, div)").all_inner_texts()]
    steps = [int(m.group(1)) for t in labels if (m := re.match(r"(\d+)\.", t))]
    assert steps and steps == sorted(steps) and steps[0] == 1, labels
    on_disk = sorted({int(p.name[:2]) for p in (ROOT / "docs").glob("[0-9][0-9]-*.md")})
    assert steps == on_disk, f"navigation {steps} vs pages {on_disk}"


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
def test_page_code_blocks_snippets_and_links(page, base_url, name):
    page.goto(base_url + url_of(name))
    article = page.locator("article")
    # Material adds a copy button to every code block (its JavaScript, so wait for it).
    copy = 'button[data-md-type="copy"]'
    blocks = article.locator("pre > code").count()
    if blocks:
        page.wait_for_selector(f"article {copy}", state="attached", timeout=10_000)
    assert article.locator(copy).count() == blocks
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
        with urllib.request.urlopen(target) as r:
            assert r.status == 200, href
            if anchor:
                assert f'id="{anchor}"' in r.read().decode(), f"{name}: broken anchor {href}"


@pytest.mark.parametrize("nb", NOTEBOOKS)
def test_notebook_page_has_outputs_and_download(page, base_url, nb):
    page.goto(base_url + f"notebooks/{nb}/")
    cells = json.loads((ROOT / "notebooks" / f"{nb}.ipynb").read_text())["cells"]
    stream = next("".join(o["text"]) for c in cells for o in c.get("outputs", []) if o.get("output_type") == "stream")
    first_line = next(l for l in stream.splitlines() if l.strip())
    assert page.locator(".jp-OutputArea-output").count() > 0
    assert first_line.strip() in page.locator("body").inner_text()
    link = page.locator("a.jp-DownloadNB[download]")
    assert link.count() == 1
    with urllib.request.urlopen(urljoin(page.url, link.get_attribute("href"))) as r:
        assert json.loads(r.read())["cells"] == cells


def test_screenshot_of_step_1(page, base_url, tmp_path):
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(base_url + "01-ddp/")
    shot = ROOT / "runs" / "screenshot-01-ddp.png"
    shot.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(shot), full_page=False, animations="disabled")
    assert shot.stat().st_size > 10_000
