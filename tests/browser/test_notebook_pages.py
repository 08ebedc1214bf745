"""Notebook pages: the stored outputs shown, the notebook offered for download as it is, the
page reading well on a phone (390 px: the hardest width)."""
import json
import urllib.request
from urllib.parse import urljoin

import pytest

from .conftest import NOTEBOOKS, ROOT


@pytest.mark.parametrize("nb", NOTEBOOKS)
def test_notebook_page_has_outputs_and_download(loaded, nb):
    p = loaded(390, f"notebooks/{nb}")
    assert not p.layout, f"{p.name} at 390 px: {len(p.layout)} problems, e.g. {p.layout[:8]}"
    cells = json.loads((ROOT / "notebooks" / f"{nb}.ipynb").read_text())["cells"]
    stream = next("".join(o["text"]) for c in cells for o in c.get("outputs", []) if o.get("output_type") == "stream")
    first_line = next(l for l in stream.splitlines() if l.strip())
    assert p.outputs > 0
    assert first_line.strip() in p.output_text
    assert len(p.downloads) == 1
    with urllib.request.urlopen(urljoin(p.url, p.downloads[0])) as r:
        assert json.loads(r.read())["cells"] == cells
