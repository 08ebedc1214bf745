"""Save a matplotlib chart for the site, readable where it is read.

    import charts
    png = charts.save(fig, "../docs/01-ddp-losses.png")   # the PNG's bytes, also written there

save() is code/chart_file.py's (the scripts that draw a chart, which a reader copies without
tools/, use that file directly): it refuses a chart whose smallest text would be under 11 px in
the page's content column and records in the PNG the fields read() returns to the site's tests.
"""
import sys
from pathlib import Path

CODE = str(Path(__file__).resolve().parent.parent / "code")
if CODE not in sys.path:
    sys.path.append(CODE)  # last: every module found before stays the one found

from chart_file import COLUMN_PX, DPI, MIN_PX, read, save, smallest_text_pt, text_px  # noqa: E402,F401

