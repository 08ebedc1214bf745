"""Pages read well from 1280 px down to 390 px, measured in the browser: content width, no word
split across lines, tables that scroll instead of being clipped, nothing important off screen,
diagrams at their natural size. Each measurement is also shown to find what it looks for."""
import json
import re

import pytest

from .conftest import ALL_PAGES, js, url_of

READING_WIDTH_PAGES = ["01-ddp", "09-reliability", "11-debugging", "12-fsdp2", "troubleshooting",
                       "notebooks/02-equivalence", "notebooks/clusters"]


@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("name", READING_WIDTH_PAGES)
def test_reading_width_and_screenshot(loaded, screenshots, name, width):
    """A step page and a notebook page (outputs, a wide table) on a laptop and on a phone.
    The screenshots in runs/screenshots/ are for a person to look at; the test measures."""
    p = loaded(width, name)
    assert not p.layout, f"{name} at {width} px: {len(p.layout)} problems, e.g. {p.layout[:8]}"
    shot = screenshots / f"{name.replace('/', '-')}-{width}.png"
    p.tab.screenshot(path=str(shot), full_page=False, animations="disabled")
    assert shot.stat().st_size > 10_000


def test_layout_measure_finds_its_defects(page):
    """js/layout.js can fail: a notebook page with a floating download link beside the cells, a tag
    chip, an output wrapped inside a word, a table clipped by its box."""
    page.set_viewport_size({"width": 390, "height": 844})
    page.set_content("""<div class="md-content"><article style="padding: 0 16px">
      <a class="jp-DownloadNB" style="float: right; width: 150px">Download notebook</a>
      <div style="display: flow-root"><h1>Step 2 notebook: a title</h1>
        <div class="jp-InputArea-editor"><span class="cell-tag">pitfall-batch</span></div>
        <div class="jp-OutputArea-output"><pre style="white-space: pre-wrap; word-break: break-all">
    $ python code/01_single.py --save runs/01-single.pt --epochs 5 --batch-size 96</pre></div>
        <div style="overflow: hidden"><table><tr><td>case</td><td>what it does, in a long cell that
          does not wrap</td><td>max |dparam|</td></tr></table></div></div></article></div>""")
    page.add_style_tag(content="td { white-space: nowrap }")
    problems = " | ".join(page.evaluate(js("helpers", "layout")))
    for kind in ["px wide: H1", "px wide: jp-InputArea-editor", "word split across lines", "table clipped",
                 "cell tag shown", "download link sits beside"]:
        assert kind in problems, (kind, problems)


# --- Nothing important off screen: measured on every page -----------------------------------

FLAG_OR_FILE = re.compile(r"-.*|[\w.~$/<>-]*\w\.[A-Za-z]\w{0,7}|[^(=]*/[^(=]*")


def bad_code_break(width, token, before, after, where="prose"):
    """Inline code breaks between words; inside a token at 1280 px only after a folder's '/' (a
    flag, a file or a code name in prose stays whole: `nn.SyncBatchNorm.convert_sync_batchnorm(model)`),
    on a phone, or in a table a name that is not a flag or a file's, also after a '-' that follows
    a letter or digit (never inside '--'), after '/', ',', '(', '[' or '=', or before a '.'."""
    if width >= 1280 and (where != "table" or FLAG_OR_FILE.fullmatch(token)):
        return not (before[-1:] == "/" and "/" in token and not token.startswith("-"))
    return not ((before[-1:] == "-" and before[-2:-1].isalnum()) or before[-1:] in "/,([=" or after == ".")


# Bounds: at 1280 px nothing an output or a table shows is off screen; on a phone a few long
# tokens (a 70-character sacct --format flag) scroll, and so do tables of four or more columns
# (each column stays reachable: the scroll is inside the table's box). Source code is counted
# apart: its lines are not wrapped (a wrapped line of a batch script reads as two lines). The
# 1280 px column holds about 80 characters of code, as code/*.py keeps to (79, and a diff adds
# one): at least 90 % of code blocks show every line whole there. On a phone code may scroll.
BOUNDS = {  # width: {kind: largest share that may scroll}
    1280: {"output": 0.02, "table": 0.05, "lines": 0.02, "code blocks": 0.10},
    390: {"output": 0.05, "table": 0.75, "lines": 0.75, "code blocks": 1.0},
}


def page_type(url):
    return "notebook" if url.startswith("notebooks/") else "step" if url[:2].isdigit() else "other"


@pytest.mark.parametrize("width", [1280, 390])
def test_nothing_important_off_screen(loaded, screenshots, width):
    found, totals, problems = {}, {}, []
    for name in ALL_PAGES:
        url = url_of(name)
        r = found[url or "index"] = loaded(width, name).reading
        for kind in ("output", "source", "table"):
            t = totals.setdefault((page_type(url), kind), [0, 0])
            t[0] += len(r[kind][1]); t[1] += r[kind][0]
        t = totals.setdefault((page_type(url), "lines"), [0, 0])
        t[0] += r["lines"][1]; t[1] += r["lines"][0]
        problems += [f"{url}: {what}: {x}" for what in ("clipped", "overlap", "split") for x in r[what]]
        problems += [f"{url}: table row wrapped: {x!r}" for x in r["columns"][1]]
        if width >= 1280:  # on a laptop every column of a result is in view: no row wraps or scrolls
            problems += [f"{url}: row of numbers wrapped: {x!r}" for x in r["numrows"][1]]
            problems += [f"{url}: output scrolls to show its columns: {x!r}" for x in r["colwide"]]
        t = totals.setdefault(("all", "rows"), [0, 0])
        t[0] += r["colscroll"]; t[1] += r["columns"][0]
        problems += [f"{url}: inline code broken after {b!r} before {a!r}: {token!r} ({where})"
                     for token, b, a, where in r["codebreak"] if bad_code_break(width, token, b, a, where)]
        t = totals.setdefault(("all", "code blocks"), [0, 0])
        t[0] += len(r["srcblocks"][1]); t[1] += r["srcblocks"][0]
    (screenshots / f"reading-{width}.json").write_text(json.dumps(
        {"totals": {f"{t} {k}": v for (t, k), v in sorted(totals.items())}, "pages": found}, indent=1))
    summary = {f"{t} {k}": f"{a}/{b}" for (t, k), (a, b) in sorted(totals.items())}
    assert totals[("all", "rows")][1] > 100, f"no table rows found in the outputs: {summary}"  # (the check ran)
    for kind, bound in BOUNDS[width].items():
        a = sum(v[0] for (t, k), v in totals.items() if k == kind)
        b = sum(v[1] for (t, k), v in totals.items() if k == kind)
        assert a <= bound * b, f"{width} px: {a} of {b} {kind} scroll sideways (bound {bound:.0%}): {summary}"
    assert not problems, f"{width} px: {len(problems)} problems, e.g. {problems[:10]}"


def test_reading_measure_finds_its_defects(page):
    """js/reading.js can fail: an output that does not wrap, a table of max-content width, a flag
    split inside a table cell, a copy button on the text, a heading cut off by its box, output
    table rows that wrap, inline code broken inside a flag; and bad_code_break judges the breaks."""
    page.set_viewport_size({"width": 390, "height": 844})
    page.set_content("""<div class="md-content"><article style="padding: 0 16px">
      <div style="overflow: hidden; width: 200px"><h2 style="white-space: nowrap">3. TORCH_DISTRIBUTED_DEBUG=DETAIL: the mismatch</h2></div>
      <div class="language-text highlight"><pre style="position: relative"><button data-md-type="copy"
        style="position: absolute; right: 0; top: 0; width: 24px; height: 24px"></button><code
        style="display: block; overflow: auto; white-space: pre">error: RendezvousTimeoutError: the rendezvous timed out after 600 s</code></pre></div>
      <table style="display: block; width: max-content; max-width: 100%; overflow-x: auto; white-space: nowrap"><tr><td>a cell</td>
        <td>a long line that would wrap if the table let it wrap like a table of a step page</td></tr></table>
      <table><tr><td style="width: 60px; word-break: break-all">--gres=gpu:gh200:1</td></tr></table>
      <p style="width: 40px">Use <code style="word-break: break-all">--ntasks-per-node=1</code></p>
      <div class="language-text highlight" style="width: 200px"><pre><code style="white-space: pre-wrap">   JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)
      12   gputest  01-ddp     user  R       0:01      1 node1</code></pre></div>
      </article></div>""")
    r = page.evaluate(js("helpers", "reading"))
    assert r["output"][1] and r["table"][1], r
    assert any("--gres" in s for s in r["split"]), r["split"]
    assert r["overlap"] and r["clipped"], r
    assert r["columns"] == [2, ["JOBID PARTITION     NAME     USER ST       TIME  NODES NODEL", "12   gputest  01-ddp     user  R       0:01      1 node1"]], r["columns"]
    assert r["numrows"] == [0, []], r["numrows"]  # (squeue's rows end in a node's name)
    breaks = [(b, a) for token, b, a, where in r["codebreak"] if token == "--ntasks-per-node=1"]
    assert len(breaks) >= 3 and all(bad_code_break(1280, "--ntasks-per-node=1", b, a) for b, a in breaks), r
    cases = [("s-", "p"), ("--", "n"), ("-n", "t"), ("d/", "0"), ("01", "."), ("ab", "c")]
    assert [bad_code_break(390, "--x-y", b, a) for b, a in cases] == [False, True, True, False, False, True]
    assert not bad_code_break(1280, "slurm/05-x.sbatch", "m/", "0") and bad_code_break(1280, "--a=b/c", "b/", "c")
    assert [bad_code_break(1280, t, "rm", ".") for t in ["slurm/05-x.sbatch", "code/01_ddp.py", "--account",
                                                           "nn.SyncBatchNorm.convert_sync_batchnorm(model)"]] == [True] * 4
    assert not bad_code_break(390, "nn.SyncBatchNorm.convert_sync_batchnorm(model)", "rm", ".")
    assert not bad_code_break(1280, "nn.SyncBatchNorm.convert_sync_batchnorm(model)", "rm", ".", "table")
    assert bad_code_break(1280, "--ntasks-per-node=1", "s-", "p", "table")



def test_reading_measure_finds_wrapped_rows_of_numbers(page):
    """Rows whose last field is long but which are a table of numbers (ZeRO's bytes per rank) are
    found when they wrap; check lines that end in words (ddp_check's messages) are not."""
    page.set_viewport_size({"width": 390, "height": 844})
    page.set_content("""<div class="md-content"><article style="padding: 0 16px">
      <div class="language-text highlight" style="width: 300px"><pre><code style="white-space: pre-wrap">ZeRO 0 (= DDP), 2 ranks    per rank 58,152 bytes = 1/1 of 58,152; all ranks 116,304
ZeRO 1, 2 ranks            per rank 29,080 bytes = 1/2 of 58,152; all ranks 58,160
ddp_check: world    ok      2 processes on 1 node (torchrun); Slurm: 1 task on 1 node, 2 GPUs per node
ddp_check: threads  ok      1 thread per process (OMP_NUM_THREADS=1), 1 core each (2 shared by 2)</code></pre></div>
      </article></div>""")
    r = page.evaluate(js("helpers", "reading"))
    assert r["numrows"][0] == 2 and len(r["numrows"][1]) == 2, r["numrows"]
    assert all(x.startswith("ZeRO") for x in r["numrows"][1]), r["numrows"]

# --- Diagrams ---------------------------------------------------------------------------------

DIAGRAM_PAGES = ["05-multinode"]  # (every diagram is in such a figure: tests/test_diagrams.py)


@pytest.mark.parametrize("width", [390, 1280])
def test_diagrams_keep_their_size_on_a_phone(loaded, width):
    """An idea diagram is shown at its natural size: in the 1280 px column it fits; on a phone it
    scrolls sideways in its own box, with a hint, and a tap opens the SVG on its own (shrunk to
    the phone's width, its text would be 7 px)."""
    for name in DIAGRAM_PAGES:
        figures = loaded(width, name).diagrams
        assert figures, f"{name}: no figure.diagram"
        for f in figures:
            assert f["href"] == f["src"] and f["src"].endswith(".svg"), (name, f)
            assert f["natural"] > 0 and abs(f["width"] - f["natural"]) < 1, (name, width, f)
            if width == 1280:
                assert f["scroll"] <= f["box"] and f["hint"] == "none", (name, f)
            else:
                assert f["scroll"] > f["box"] and f["overflow"] == "auto" and f["hint"] == "block", (name, f)
