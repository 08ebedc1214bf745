"""Charts in the built pages, for a reader on a phone. An embedded figure (`data:image/...;base64`,
as mkdocs-jupyter and the output markers write them) weighs a third more than its file and no
browser caches it apart from its page: each becomes a file, the chart file of the same pixels
where the site has one (a notebook shows the PNG its cell wrote to docs/: the step page and the
notebook page then share one file), else a file in site/figures/ named by a hash of its pixels.
Every chart (a PNG: matplotlib's, drawn on white) is stored with a palette of at most 256
colours, about a third of the bytes, exact for a chart of 256 colours or fewer and within a few
levels of 255 for the others; it opens at full size on a tap (a link to its file) unless it is in
a link already, and carries the class `chart`, which the dark scheme inverts (reading.css). The
repository's own copies under site/files/ stay as they are."""
import base64
import hashlib
import io
import math
import os
import re

import sys
from pathlib import Path

from PIL import Image, PngImagePlugin

CODE = str(Path(__file__).resolve().parents[2] / "code")
if CODE not in sys.path:
    sys.path.append(CODE)  # last: every module found before stays the one found
import chart_file  # noqa: E402  (the one reader of the fields save() records)

FIGURES = "figures"  # the site's folder of figures that were embedded
EMBEDDED = re.compile(r'\bsrc="data:image/([\w.+-]+);base64,([^"]*)"')
IMG = re.compile(r'(<a\b[^>]*>\s*)?<img\b([^>]*?)\s*/?>')
CHART_SRC = re.compile(r'\bsrc="([^"]+\.png)"')


def compact_png(im, data):
    """The PNG with a palette of at most 256 colours (exact when it has no more), its text fields
    (tools/charts.py's) and resolution kept; the original when that is not smaller."""
    opaque = im.mode == "RGB" or (im.mode == "RGBA" and im.getextrema()[3][0] == 255)
    if not opaque:  # (a transparent figure keeps its colours as they are)
        return data
    info = PngImagePlugin.PngInfo()
    for k, v in getattr(im, "text", {}).items():
        info.add_text(k, v)
    small = im.convert("RGB").quantize(256, method=Image.Quantize.MAXCOVERAGE, dither=Image.Dither.NONE)
    out = io.BytesIO()
    small.save(out, "PNG", pnginfo=info, compress_level=9, **({"dpi": im.info["dpi"]} if "dpi" in im.info else {}))
    return out.getvalue() if len(out.getvalue()) < len(data) else data


PHONE_MIN_PX = 9  # the smallest text of a chart on a phone, in CSS pixels


def phone_width(png):
    """The width, in CSS pixels, at which the chart's smallest text is PHONE_MIN_PX tall (from the
    fields code/chart_file.py's save() records in the PNG); None for a PNG without them."""
    fields = chart_file.read(png)
    if fields is None:
        return None
    px_at_natural = fields["smallest_pt"] * fields["dpi"] / 72
    return min(fields["natural_px"], math.ceil(fields["natural_px"] * PHONE_MIN_PX / px_at_natural))


def _chart(m, src, file=None):
    """The <img> with the class `chart`, inside a link to its file unless it is in a link already;
    on a phone at least as wide as its text needs (--phone-width: reading.css scrolls it then)."""
    link, attrs = m.groups()
    if file is not None and (w := phone_width(file)) and "--phone-width" not in attrs:
        if re.search(r'\bstyle="', attrs):
            attrs = re.sub(r'\bstyle="', f'style="--phone-width: {w}px; ', attrs, count=1)
        else:
            attrs += f' style="--phone-width: {w}px"'
    if re.search(r'\bclass="', attrs):
        attrs = re.sub(r'\bclass="([^"]*)"', lambda c: f'class="{(c.group(1) + " chart").strip()}"', attrs, count=1)
    else:
        attrs += ' class="chart"'
    img = f"<img{attrs}>"
    if link:
        return link + img
    return f'<a class="chart" href="{src}" title="Open the chart at full size">{img}</a>'


def pages(site_dir):
    """The built pages: every .html file but the repository's copies (site/files/)."""
    return [p for p in sorted(site_dir.rglob("*.html")) if p.relative_to(site_dir).parts[0] != "files"]


def _pixels(data):
    """The decoded image and a short hash of its pixels: a notebook's figure and the PNG file the
    same cell wrote are one image in two encodings."""
    im = Image.open(io.BytesIO(data))
    im.load()
    return im, hashlib.sha256(repr((im.size, im.mode)).encode() + im.tobytes()).hexdigest()[:16]


def figures(site_dir):
    """Every PNG of the site's pages compacted; every page's embedded figures moved to files (the
    chart file of the same pixels where there is one); every chart linked and classed."""
    known = {}  # pixel hash: the file that holds those pixels
    for path in sorted(site_dir.rglob("*.png")):
        if path.relative_to(site_dir).parts[0] not in ("files", "assets"):
            im, key = _pixels(data := path.read_bytes())
            path.write_bytes(compact_png(im, data))
            known.setdefault(key, path)

    def store(kind, data):
        """The file of an embedded figure."""
        if kind != "png":  # (not a chart: stored as it is)
            path = site_dir / FIGURES / (hashlib.sha256(data).hexdigest()[:16] + "." + kind.split("+")[0])
        else:
            im, key = _pixels(data)
            if key in known:
                return known[key]
            path = known[key] = site_dir / FIGURES / (key + ".png")
            data = compact_png(im, data)
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        return path

    for page in pages(site_dir):
        text = page.read_text()
        if "<img" not in text:
            continue

        def img(m):
            tag = m.group(0)
            if e := EMBEDDED.search(tag):
                path = store(e.group(1), base64.b64decode(e.group(2)))
                src = os.path.relpath(path, page.parent).replace(os.sep, "/")
                tag = tag[:e.start()] + f'src="{src}"' + tag[e.end():]
                m = IMG.match(tag)
            if not (c := CHART_SRC.search(m.group(2))) or "://" in c.group(1):
                return tag
            file = (page.parent / c.group(1).split("?")[0]).resolve()
            return _chart(m, c.group(1), file if file.is_file() else None)

        page.write_text(IMG.sub(img, text))
