"""Save a matplotlib chart readable where it is read: on a page, at most 688 px
wide.

    import chart_file
    png = chart_file.save(fig, "scaling.png")
    # the PNG's bytes, also written there

A chart wider than the page's content column (688 px at a 1280 px window) is
scaled down, and with it its text. save() draws the figure once to find the
smallest text it holds (every title, label, tick, legend and table cell drawn,
in points), refuses a chart whose smallest text would be under 11 px in that
column, and writes the PNG with the whole drawing (bbox_inches="tight": no
title cut) and three text fields that the site's tests read back
(tools/charts.py's read()): chart-width-in, chart-dpi, chart-smallest-pt.
"""
import io
from unittest import mock

# Material's content column at 1280 px: a wider chart is scaled down to it
COLUMN_PX = 688
# the smallest text a reader should meet on the page, in CSS pixels
MIN_PX = 11
# sharp on a high-density screen; the full-size view (one tap) shows it larger
DPI = 150


def smallest_text_pt(fig):
    """The font size, in points, of the smallest non-empty text the figure
    draws."""
    from matplotlib.text import Text
    sizes, draw = [], Text.draw

    def recording(self, renderer):
        if self.get_visible() and self.get_text().strip():
            sizes.append(self.get_fontsize())
        return draw(self, renderer)

    with mock.patch.object(Text, "draw", recording):
        # (any renderer draws every artist)
        fig.savefig(io.BytesIO(), format="png", dpi=20)
    return min(sizes)


def text_px(pt, dpi, natural_px, shown_px):
    """CSS pixels of text `pt` points tall in an image drawn at `dpi`,
    `natural_px` wide, shown `shown_px` wide."""
    return pt * dpi / 72 * shown_px / natural_px


def save(fig, path=None, dpi=DPI):
    """Write the figure to `path` (when given) as a page shows it; return the
    PNG's bytes."""
    from PIL import Image
    smallest = smallest_text_pt(fig)
    kw = dict(format="png", dpi=dpi, bbox_inches="tight", pad_inches=0.1)
    buf = io.BytesIO()
    fig.savefig(buf, **kw)
    width = Image.open(io.BytesIO(buf.getvalue())).size[0]
    px = text_px(smallest, dpi, width, min(width, COLUMN_PX))
    if px < MIN_PX:
        raise ValueError(f"{path or 'chart'}: its smallest text "
                         f"({smallest:g} pt) would be {px:.1f} px on the "
                         f"page ({width / dpi:.1f} in wide, "
                         f"shown {min(width, COLUMN_PX)} px): "
                         f"larger fonts or a narrower figure")
    buf = io.BytesIO()
    fig.savefig(buf, **kw, metadata={"Software": None,
                                     "chart-width-in": f"{width / dpi:.3f}",
                                     "chart-dpi": str(dpi),
                                     "chart-smallest-pt": f"{smallest:g}"})
    png = buf.getvalue()
    if path is not None:
        with open(path, "wb") as f:
            f.write(png)
    return png


def read(png_path):
    """The fields save() wrote, as numbers: {"width_in", "dpi",
    "smallest_pt", "natural_px"}; None for a PNG without them."""
    from PIL import Image
    with Image.open(png_path) as im:
        text = getattr(im, "text", {})
        if "chart-smallest-pt" not in text:
            return None
        return {"width_in": float(text["chart-width-in"]),
                "dpi": float(text["chart-dpi"]),
                "smallest_pt": float(text["chart-smallest-pt"]),
                "natural_px": im.size[0]}
