"""The idea diagrams (docs/images/*.svg) are exactly what tools/diagrams.py draws, are valid SVG
with a title, fit the content column, and each is shown on a page with alt text."""
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
SVG_NS = "{http://www.w3.org/2000/svg}"
import diagrams  # noqa: E402

NAMES = sorted(diagrams.DIAGRAMS)


def test_generator_reproduces_the_committed_svgs(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "tools" / "diagrams.py"), "--out", str(tmp_path)],
                   check=True, capture_output=True)
    drawn = sorted(p.name for p in tmp_path.glob("*.svg"))
    assert drawn == [f"{n}.svg" for n in NAMES]
    for name in drawn:
        assert (IMAGES / name).exists(), f"docs/images/{name} missing: run python tools/diagrams.py"
        assert (tmp_path / name).read_bytes() == (IMAGES / name).read_bytes(), (
            f"docs/images/{name} differs from what tools/diagrams.py draws: rerun it and commit both")


@pytest.mark.parametrize("name", NAMES)
def test_svg_parses_has_a_title_and_fits(name):
    root = ET.parse(IMAGES / f"{name}.svg").getroot()
    assert root.tag == f"{SVG_NS}svg"
    title = root.find(f"{SVG_NS}title")
    assert title is not None and title.text.strip()
    assert int(root.get("width")) <= 688  # the content column at 1280 px
    sizes = [float(t.get("font-size", 14)) for t in root.iter(f"{SVG_NS}text")]
    assert sizes and min(sizes) >= 13
    style = root.find(f"{SVG_NS}style").text
    assert "prefers-color-scheme: dark" in style  # a dark card for dark readers


def test_every_svg_is_shown_on_a_page_with_alt_text():
    shown = {}
    for page in sorted((ROOT / "docs").glob("*.md")):
        for alt, src in re.findall(r"!\[([^\]]*)\]\((images/[^)\s]+\.svg)\)", page.read_text()):
            assert len(alt.split()) >= 5, f"{page.name}: {src} needs alt text that says what it shows"
            shown.setdefault(Path(src).stem, []).append(page.name)
    assert sorted(shown) == NAMES, f"pages show {sorted(shown)}, drawn: {NAMES}"
    for src in {s for s in shown}:
        assert (IMAGES / f"{src}.svg").exists()


def test_every_diagram_is_a_figure_that_opens_on_its_own(site_dir):
    """On the built pages each diagram sits in a figure.diagram (natural size, scrolling sideways
    on a phone: tests/browser/test_layout.py::test_diagrams_keep_their_size_on_a_phone), as a link to the SVG."""
    for page in sorted((ROOT / "docs").glob("*.md")):
        srcs = re.findall(r"!\[[^\]]*\]\((images/[^)\s]+\.svg)\)", page.read_text())
        if not srcs:
            continue
        home = page.stem == "index"  # Home is the site's root page, not index/
        html = (site_dir / ("" if home else page.stem) / "index.html").read_text()
        for src in srcs:
            href = src if home else f"../{src}"
            assert f'<figure class="diagram"><a href="{href}"' in html, f"{page.name}: {src} is not in a figure.diagram"


# --- Figures A: the pictures drawn from a model stay those of the runs they stand beside ---

def stored_text(notebook, tag):
    """The text the executed notebook's cell tagged `tag` printed."""
    cell, = [c for c in json.loads((ROOT / notebook).read_text())["cells"]
             if tag in c["metadata"].get("tags", [])]
    return "".join("".join(o.get("text", "")) for o in cell["outputs"])


def test_step_14_ideal_timelines_have_the_traced_counts():
    """Each GPU timeline draws as many all-reduces and micro-batches per optimizer step as the
    traces of its variant hold."""
    out = stored_text("notebooks/14-profiling.ipynb", "structure")
    for variant, (calls, micro) in diagrams.STEP14_CALLS.items():
        line = re.search(rf"^{variant}: .*$", out, re.M).group(0)
        assert f"all-reduces per step [{calls}]" in line and f"'backward': {micro}," in line, line


def test_pipeline_picture_is_the_recorded_schedule():
    """pipeline_order gives the orders code/15_pipeline.py recorded, for every schedule and m it
    ran; the picture's p, m and bubble are the printed ones."""
    out = stored_text("notebooks/15-two-dimensions.ipynb", "pipeline")
    runs = re.findall(r"^(\S+), m=(\d+): stage 0: (.*)\n\s+stage 1: (.*)$", out, re.M)
    assert len(runs) == 4 and f"{diagrams.PIPE_P} stages of" in out
    for schedule, m, *recorded in runs:
        drawn = [" ".join(f"{k}{i}" for k, i in diagrams.pipeline_order(schedule, s, 2, int(m))) for s in (0, 1)]
        assert drawn == recorded, (schedule, m)
    bubble = re.search(rf"^GPipe, m={diagrams.PIPE_M}:(?:.*\n)*?  bubble \(p-1\)/\(m\+p-1\) = (0\.\d\d);", out, re.M)
    assert f"= {bubble.group(1)} of the total time" in (IMAGES / "pipeline-schedules.svg").read_text()


def test_mesh_picture_is_the_jobs_mesh():
    """The 2-D mesh drawn is the one the batch script's job printed on two nodes."""
    dp, tp = diagrams.MESH_DP, diagrams.MESH_TP
    assert f"{dp * tp} processes, mesh (dp {dp}, tp {tp})" in stored_text("notebooks/15-two-dimensions.ipynb", "job")
