"""Each page's code blocks, snippet includes and links, at 1280 px."""
import functools
import re
import urllib.request
from urllib.parse import urljoin, urlparse

import pytest

from .conftest import PAGES, ROOT


@functools.cache
def fetch(url):
    """The status and body of a file of the site, fetched once (many pages link to the same few)."""
    with urllib.request.urlopen(url) as r:
        return r.status, r.read()


@pytest.mark.parametrize("name", PAGES)
def test_page_code_blocks_snippets_and_links(loaded, base_url, name):
    """Copy buttons on the code blocks, copying no prompt; every snippet include rendered; internal
    links and anchors resolve."""
    p = loaded(1280, name)
    # Material adds a copy button to every code block, except in .no-copy.
    assert p.copy_buttons == p.code_blocks
    # Commands are copied without the `$ ` prompt a shell would not accept.
    for copied in p.copied:
        prompts = [l for l in copied.splitlines() if l.startswith("$ ")]
        assert not prompts, f"{name}: a copy button copies prompts: {prompts[:3]}"
    assert "--8<--" not in p.text
    # Each snippet include shows the first line of what it includes.
    md = (ROOT / "docs" / f"{name}.md").read_text()
    for target in re.findall(r'--8<-- "([^"]+)"', md):
        path, _, section = target.partition(":")
        lines = (ROOT / path).read_text().splitlines()
        if section:
            start = next(i for i, l in enumerate(lines) if f"[start:{section}]" in l)
            lines = lines[start + 1:]
        first = next(l.strip() for l in lines if l.strip())
        assert first in p.text, f"{name}: include {target} not rendered (looked for {first!r})"
    # Internal links resolve; in-page anchors exist.
    for href in p.links:
        absolute = urljoin(p.url, href)
        if urlparse(absolute).netloc != urlparse(base_url).netloc:
            continue
        target, _, anchor = absolute.partition("#")
        status, body = fetch(target)
        assert status == 200, href
        if anchor:
            assert f'id="{anchor}"' in body.decode(), f"{name}: broken anchor {href}"
