"""The search box: a pasted error message finds the step that explains it, and Enter opens a
step's page."""
import re
from urllib.parse import urlparse

import pytest


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


def test_the_index_comes_with_the_first_search(page, base_url):
    """A first visit does not download the search index (half of Home's weight); focusing the
    search box does, once, and the search then finds a page."""
    asked = []
    page.on("request", lambda r: asked.append(r.url) if r.url.endswith("/search/search_index.json") else None)
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(base_url, wait_until="networkidle")
    page.wait_for_timeout(500)
    assert asked == [], "the index was requested before any search"
    box, first = type_search(page, base_url, "SyncBatchNorm")
    assert len(asked) == 1 and "02-equivalence" in first.locator("a").first.get_attribute("href"), asked
