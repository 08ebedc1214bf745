"""Navigation: the numbered steps in order, short labels, a sidebar that fits a laptop's screen,
content tabs that switch, and the header's link to the repository."""
import io
import re
import urllib.request
import zipfile
from urllib.parse import urljoin

import pytest

from .conftest import PAGES, ROOT, url_of


def test_steps_in_order_in_navigation(loaded):
    """The navigation's pages, across its collapsible parts, hold the numbered steps in order."""
    labels = loaded(1280, "index").navigation
    steps = [int(m.group(1)) for t in labels if (m := re.match(r"(\d+)\. ", t))]
    assert steps and steps == sorted(steps) and steps[0] == 1, labels
    on_disk = sorted({int(p.name[:2]) for p in (ROOT / "docs").glob("[0-9][0-9]-*.md")  # numbered
                      if re.match(r"# \d+\. ", p.read_text())})
    assert steps == on_disk, f"navigation {steps} vs pages {on_disk}"


@pytest.mark.parametrize("name", ["01-ddp", "09-reliability", "12-fsdp2", "notebooks/your-own-script"])
def test_navigation_reads_in_order_with_short_labels(loaded, name):
    """The quick start, then step 1, come right after Home, and no label of the navigation wraps to
    more than two lines at 1280 px (Next from Home leads into the path, not into a reference page)."""
    p = loaded(1280, name)
    labels = p.navigation
    assert labels[:2] == ["Home", "Quick start: your script on two nodes"] and labels[2].startswith("1. "), labels[:3]
    long = [(t, n) for t, n in p.navigation_lines if n > 2]
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
    # Material sizes the sidebar from the content's height once its images have laid out (a
    # short page's sidebar ends at the footer): measured when two looks 100 ms apart agree.
    tab.wait_for_function("[...document.images].every(i => i.complete)")
    looks = [wrap.evaluate("e => [e.clientHeight, e.scrollHeight]")]
    for _ in range(30):
        tab.wait_for_timeout(100)
        looks.append(wrap.evaluate("e => [e.clientHeight, e.scrollHeight]"))
        if looks[-1] == looks[-2]:
            break
    height, scroll = looks[-1]
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
