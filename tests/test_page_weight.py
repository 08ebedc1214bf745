"""What a reader on a phone downloads, on the built site: no page is heavy (benchmarks/reading_load.py
measures a cold visit as a browser makes it), no figure is embedded in its page, and every chart
opens at full size on a tap and turns dark in the dark scheme (tools/site_build/figures.py)."""
import os
import re

import reading_load

# Uncompressed, as a server that does not compress sends it (gzipped it is about a quarter). Every
# page fetches Material's files and the search worker, about 0.3 MB; the search index (0.46 MB)
# only when the reader first searches (overrides/main.html).
PAGE_LIMIT, HOME_LIMIT = 1_000_000, 400_000
CHART = re.compile(r'(<a\b[^>]*>\s*)?<img\b([^>]*\bsrc="([^"]+\.png)"[^>]*)>')


def pages(site_dir):
    """The built pages (not the repository's copies under files/), by their path in the site."""
    return {p.relative_to(site_dir).as_posix(): p for p in sorted(site_dir.rglob("*.html"))
            if p.relative_to(site_dir).parts[0] != "files"}


def test_no_page_over_a_megabyte(site_dir):
    """Over: see the page's row in benchmarks/reading-load.md; a figure too big, or code shown
    whole where a link to its file would do."""
    heavy = {}
    for name, page in pages(site_dir).items():
        raw, sent = reading_load.cold_weight(site_dir, page)
        if raw > PAGE_LIMIT:
            heavy[name] = f"{raw / 1000:,.0f} KB uncompressed ({sent / 1000:,.0f} KB sent gzipped)"
    assert not heavy, heavy


def test_home_under_400_kb(site_dir):
    raw, sent = reading_load.cold_weight(site_dir, site_dir / "index.html")
    assert raw < HOME_LIMIT, f"Home: {raw / 1000:,.0f} KB uncompressed ({sent / 1000:,.0f} KB sent gzipped)"


def test_no_figure_embedded_in_its_page(site_dir):
    """An embedded figure weighs a third more and is fetched again on every visit."""
    embedded = {name: len(found) for name, page in pages(site_dir).items()
                if (found := re.findall(r"data:image/[\w.+-]+;base64,", page.read_text()))}
    assert not embedded, f"pages with figures embedded: {embedded}"


def charts(site_dir):
    """(page, its link's <a> tag or None, the <img> attributes, src) of every chart (a PNG)."""
    return [(name, m.group(1), m.group(2), m.group(3)) for name, page in pages(site_dir).items()
            for m in CHART.finditer(page.read_text())]


def test_every_chart_opens_its_file(site_dir):
    found, bad = charts(site_dir), []
    for name, link, _, src in found:
        href = re.search(r'\bhref="([^"]*)"', link or "")
        where = (site_dir / name).parent
        if not href or os.path.normpath(where / href.group(1)) != os.path.normpath(where / src):
            bad.append(f"{name}: {src} not in a link to its file ({link})")
        elif not (where / src).is_file():
            bad.append(f"{name}: {src} missing")
    # 13 on the pages of steps 1, 3, 6, 10, 13, 14 and 16, 10 on their notebook pages (step 14's
    # per-step results are an HTML table, not a chart)
    assert len(found) >= 23 and not bad, (len(found), bad)


def test_every_chart_turns_dark(site_dir):
    """Each chart carries the class that reading.css inverts in the dark scheme (the browser test
    measures the pixels)."""
    found = charts(site_dir)
    plain = [f"{name}: {src}" for name, _, attrs, src in found
             if "chart" not in (re.findall(r'\bclass="([^"]*)"', attrs) or [""])[0].split()]
    assert found and not plain, f"charts without the class `chart`: {plain}"
    css = (site_dir / "stylesheets" / "reading.css").read_text()
    assert re.search(r'\[data-md-color-scheme="slate"\] img\.chart\s*\{\s*(/\*.*?\*/\s*)?filter: invert', css, re.S), \
        "reading.css: no rule inverting img.chart in the dark scheme"
