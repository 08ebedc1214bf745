"""Charts readable as shown (text at least 11 px), and the dark scheme: readable text, and
charts drawn dark."""
import base64
import io
import re
from urllib.parse import urlparse

import charts
import pytest

from .conftest import js, to_dark


@pytest.mark.parametrize("width, least", [(1280, 11), (390, 9)])
def test_chart_text_readable(loaded, site_dir, width, least):
    """Every chart's smallest text is at least 11 px as a 1280 px window shows it (no digits of 3-6 px,
    no title cut), and 9 px on a phone (the chart then scrolls sideways, reading.css).
    tools/charts.py records in each PNG the smallest font size the figure draws and its dpi; the
    browser gives the width the page shows it at."""
    pages = sorted(p.parent.relative_to(site_dir).as_posix() for p in site_dir.rglob("index.html")
                   if re.search(r'<img\b[^>]*\bsrc="(data:image/png|[^"]+\.png")', p.read_text()))
    assert len(pages) >= 7, pages  # steps 1, 3, 6, 13, 14: page and notebook, where it shows them
    bad, seen = [], 0
    for name in pages:
        name = "index" if name == "." else name
        for src, shown, natural in loaded(width, name).pngs:
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
                if px < least:
                    bad.append(f"{what}: smallest text {px:.1f} px ({meta['smallest_pt']:g} pt, shown {shown:.0f} of {natural} px)")
    assert seen >= 12 and not bad, f"{seen} charts measured; {bad}"


@pytest.mark.parametrize("name", ["01-ddp", "notebooks/01-ddp"])
def test_dark_mode_toggle_and_contrast(page, base_url, screenshots, name):
    """The header's toggle switches to the dark scheme; prose, code and outputs stay readable
    (contrast at least 4.5:1, WCAG AA) on a step page and a notebook page. Screenshots for a person."""
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(base_url + f"{name}/")
    assert page.evaluate("document.body.dataset.mdColorScheme") == "default"
    to_dark(page)
    low = [(round(c, 1), what) for c, what in page.evaluate(js("contrast"), "article p, article li, article pre code, "
           "article td, .jp-OutputArea-output pre, .jp-InputArea-editor pre") if c < 4.5]
    assert not low, f"{name} in dark mode: text with too little contrast: {low[:8]}"
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        shot = screenshots / f"dark-{name.replace('/', '-')}-{width}.png"
        page.screenshot(path=str(shot), full_page=False, animations="disabled")


@pytest.mark.parametrize("name, chart", [("03-lr-scaling", "a.chart img"),
                                         ("notebooks/03-lr-scaling", ".jp-RenderedImage img"),
                                         ("10-performance", "img.chart"),
                                         ("notebooks/14-profiling", "img.chart")])
def test_charts_turn_dark_in_dark_mode(page, base_url, name, chart):
    """A chart (a white PNG) is drawn dark in the dark scheme and as it is in the light one: the
    mean lightness of the image's pixels with the filter the page gives it."""
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(base_url + f"{name}/")
    img = page.locator(chart).first
    light, how = img.evaluate(js("chart_lightness"))
    assert light > 0.7 and how == "none", f"{name} in light mode: lightness {light:.2f}, filter {how}"
    to_dark(page)
    dark, how = img.evaluate(js("chart_lightness"))
    assert dark < 0.3, f"{name} in dark mode: lightness {dark:.2f} (filter {how})"
