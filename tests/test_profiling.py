"""Step 14: the trace reader's numbers on traces whose answer is known (a CPU one, and one in the
shape the profiler writes with the CUDA activity), the sweep's report from rows whose efficiencies
are known and from NCCL logs of the three networks, the benchmark's timed window, the one-line
errors for bad input, and the committed figures being the ones the executed notebook drew. The
real traces and the real chain run in notebooks/14-profiling.ipynb."""
import base64
import importlib
import json
import math
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data-14"  # a GPU trace and NCCL logs, in the shapes the real ones have
timeline = importlib.import_module("14_timeline")


def run(*args, env=None):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=env or dict(os.environ))


def one_error_line(r, start):
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith(start), (r.returncode, r.stdout, r.stderr)


def x(name, tid, ts, dur, cat="user_annotation"):
    return {"ph": "X", "name": name, "tid": tid, "pid": 1, "ts": ts, "dur": dur, "cat": cat}


# One step of 100 us on thread 1: forward 0-20, backward 20-80 (operators 0-20 and 20-60: the
# thread then waits), optimizer 80-100; the all-reduce on gloo's thread 2 from 50 to 90.
STEP = [x("ProfilerStep#2", 1, 0, 100), x("data", 1, 0, 1), x("forward", 1, 1, 19), x("backward", 1, 20, 60),
        x("optimizer", 1, 80, 20), x("aten::conv2d", 1, 0, 20, "cpu_op"), x("aten::mm", 1, 20, 40, "cpu_op"),
        x("aten::add_", 1, 80, 20, "cpu_op"), x("gloo:all_reduce", 2, 50, 40)]


def test_the_table_of_a_known_trace():
    (row,) = timeline.steps(STEP)
    assert (row["step_ms"], row["compute_ms"], row["comm_ms"]) == (0.1, 0.08, 0.04)
    assert (row["overlapped_ms"], row["exposed_ms"]) == (0.02, 0.02)  # 50-60 and 80-90 overlap; 60-80 waits
    assert row["all_reduces"] == 1 and row["ranges"] == {"data": 1, "forward": 1, "backward": 1, "optimizer": 1}
    assert [label for _, label, _ in timeline.lanes({0: STEP})] == ["rank 0 main thread", "rank 0 all-reduce"]


def test_the_table_of_a_gpu_trace():
    """With the CUDA activity every range has a GPU copy (gpu_user_annotation) on each stream its
    kernels ran on, ProfilerStep#2 too: one row, each range once, the kernels within the GPU's span
    of the step (100-1100 us; the CPU's is 0-950). Kernels 110-200, 210-600, 650-800, 900-1100;
    NCCL's all-reduce 550-750 overlaps 550-600 and 650-750, and 600-650 is exposed."""
    (events,) = timeline.load(DATA / "gpu-trace").values()
    (row,) = timeline.steps(events)
    assert row["step"] == 2 and row["step_ms"] == pytest.approx(1.0)
    assert (row["compute_ms"], row["comm_ms"]) == (pytest.approx(0.83), pytest.approx(0.2))
    assert (row["overlapped_ms"], row["exposed_ms"]) == (pytest.approx(0.15), pytest.approx(0.05))
    assert row["all_reduces"] == 1 and row["ranges"] == {"data": 1, "forward": 1, "backward": 1, "optimizer": 1}
    lanes = timeline.lanes({0: events})
    assert [label for _, label, _ in lanes] == ["rank 0 main thread", "rank 0 all-reduce"]
    assert sorted(k for _, k in lanes[0][2] if k != "operators") == ["backward", "data", "forward", "optimizer"]
    assert len(timeline.table({0: events})) == 2  # the header and one step


def steps_of(lengths, t0):
    """A rank's trace of steps of the given lengths (us) from t0, each as small buckets make it:
    data, forward, backward, optimizer on thread 1 (operators in forward and the first half of
    backward), and 4 all-reduces during backward on gloo's threads 2 and 3: two back to back on
    thread 2, the third in flight beside them on thread 3, the fourth later."""
    events, ts = [], t0
    for n, length in enumerate(lengths, start=2):
        q = length // 10
        events += [x(f"ProfilerStep#{n}", 1, ts, length), x("data", 1, ts, q), x("forward", 1, ts + q, 2 * q),
                   x("backward", 1, ts + 3 * q, 6 * q), x("optimizer", 1, ts + 9 * q, q),
                   x("aten::mm", 1, ts + q, 5 * q, "cpu_op"),
                   x("gloo:all_reduce", 2, ts + 4 * q, q), x("gloo:all_reduce", 2, ts + 5 * q, q),
                   x("gloo:all_reduce", 3, ts + 4 * q + q // 2, 2 * q), x("gloo:all_reduce", 3, ts + 7 * q, q)]
        ts += length
    return events


# Rank 1 starts 50 us later, and its first step ends at 700 us of its own, rank 0's at 1000.
TWO_RANKS = {0: steps_of([1000, 1000], 0), 1: steps_of([700, 1300], 50)}


def drawn(traces):
    """What timeline.draw puts on the axes: the all-reduce bars as (rank, lane's y, start, end) in
    ms, each rank's step ends as {rank: (xs, lowest y, highest y)}, and {lane's y: rank}."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    timeline.draw(traces, "title", ax)
    rank_at = {y: int(t.get_text().split()[1]) for y, t in zip(ax.get_yticks(), ax.get_yticklabels())}
    bars, ends = [], {}
    for c in ax.collections:
        if c.get_gid() == "all-reduce":
            for p in c.get_paths():
                (x0, y0), (x1, y1) = p.vertices.min(0), p.vertices.max(0)
                y = min(rank_at, key=lambda t: abs(t - (y0 + y1) / 2))
                bars.append((rank_at[y], y, x0, x1))
        elif str(c.get_gid()).startswith("step ends, rank "):
            segs = c.get_segments()
            ends[int(c.get_gid().split()[-1])] = ([s[0][0] for s in segs], min(s[:, 1].min() for s in segs),
                                                  max(s[:, 1].max() for s in segs))
    plt.close(fig)
    return bars, ends, rank_at


def test_every_all_reduce_is_drawn_apart():
    """Each all-reduce is a bar of its own: as many per rank and step as the table counts, and
    none touching another on its lane (two calls back to back on one gloo thread, drawn on that
    thread's lane, read as one long call)."""
    bars, _, _ = drawn(TWO_RANKS)
    for rank, events in TWO_RANKS.items():
        t0 = timeline.profiler_steps(events)[0]["ts"]
        for (_, s, f), row in zip(timeline.spans(events), timeline.steps(events)):
            inside = [b for b in bars if b[0] == rank and (s - t0) / 1e3 <= b[2] < (f - t0) / 1e3]
            assert len(inside) == row["all_reduces"] == 4, (rank, row["step"], inside)
    assert len(bars) == sum(timeline.is_comm(e, False) for events in TWO_RANKS.values() for e in events)
    for lane in {b[1] for b in bars}:
        spans = sorted((x0, x1) for _, y, x0, x1 in bars if y == lane)
        assert all(a[1] < b[0] for a, b in zip(spans, spans[1:])), (lane, spans)


def test_each_rank_ends_its_own_steps_on_its_own_lanes():
    """The dotted step ends of a rank are its own steps' ends, in ms from its own first step, and
    they cross its lanes only."""
    _, ends, rank_at = drawn(TWO_RANKS)
    assert sorted(ends) == [0, 1]
    for rank, (xs, low, high) in ends.items():
        own = timeline.profiler_steps(TWO_RANKS[rank])
        assert sorted(xs) == pytest.approx([(e["ts"] + e["dur"] - own[0]["ts"]) / 1e3 for e in own])
        assert all((low < y < high) == (r == rank) for y, r in rank_at.items()), (rank, low, high, rank_at)
    assert sorted(ends[0][0]) != sorted(ends[1][0])  # (the two ranks' steps end at different times)


def test_the_page_describes_the_timelines_as_drawn():
    """Words that hold in both colour schemes (the dark one inverts charts: a dark strip turns
    light), the all-reduce where the picture shows it (inside backward's range, not after it),
    and every "below" or "above" on the side where its table or picture stands."""
    assert "invert(" in (ROOT / "docs/stylesheets/reading.css").read_text()
    page = (ROOT / "docs/14-profiling.md").read_text()
    nb = json.loads((ROOT / "notebooks/14-profiling.ipynb").read_text())
    timelines = re.findall(r"!\[([^\]]*)\]\(14-timeline-", page)
    words = page + json.dumps([(c["source"], c["metadata"].get("alt")) for c in nb["cells"]])
    assert len(timelines) == 3 and "dark strip" not in words
    titles = "".join(next(c["source"] for c in nb["cells"] if "TITLES = " in "".join(c["source"])))
    titles = re.sub(r'"\s*\n\s*"', "", titles)  # (a title in pieces: one string)
    assert not re.search(r"after (the fourth )?backward", json.dumps(timelines) + titles)
    assert "one all-reduce per step, at the end of backward" in titles
    assert "inside the backward range" in timelines[0] and "inside its range" in timelines[2]
    steps = page.index("<!-- output notebooks/14-profiling.ipynb steps -->")
    assert page.index("the table below counts communication") < steps
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page)
    again = page.index("(the picture at the top of this page, again)")
    assert re.search(r"!\[[^\]]*\]\(([^)]+)\)", page[again:]).group(1) == images[0]


def test_the_page_shows_the_step_table_as_a_table():
    """The per-step table is text: the stored output of the notebook's cell "steps", a Markdown
    table with the predicted all-reduce on the line above it, a row per variant, rank and traced
    step, and the all-reduces per step the traces hold. Its numbers change from run to run: only
    that cell keeps its output out of nbval's comparison."""
    from site_build.outputs import output
    text = output(ROOT, "notebooks/14-profiling.ipynb", "steps")
    assert "<img" not in text, "the cell 'steps' shows a picture, not a table: execute the notebook"
    line, blank, header, rule, *rows = text.strip().splitlines()
    assert re.fullmatch(r"Times in ms\. The predicted all-reduce of 58,152 bytes: \d+\.\d{3} ms; the traces' "
                        r"communication per all-reduce: \d+\.\d\d ms on average \(transfer, and waiting for the "
                        r"other rank\)\.", line), line
    assert blank == "" and rule == "|---|" + "---:|" * 8
    assert header == "| variant | rank | step | step ms | compute | comm | overlap | exposed | all-reduces |"
    cells = [r.strip("| ").split(" | ") for r in rows]
    assert [c[:3] for c in cells] == [[v, str(r), str(s)] for v in ("default", "small-buckets", "no-sync")
                                      for r in (0, 1) for s in (2, 3, 4)]
    for v, _, _, step, compute, comm, overlap, exposed, calls in cells:
        step, compute, comm, overlap, exposed = map(float, (step, compute, comm, overlap, exposed))
        assert 0 <= exposed <= comm <= step and abs(overlap + exposed - comm) <= 0.011, (v, comm)
        assert (int(calls) > 1) == (v == "small-buckets"), (v, calls)
    page = (ROOT / "docs/14-profiling.md").read_text()
    assert "<!-- output notebooks/14-profiling.ipynb steps -->" in page and "14-steps.png" not in page
    ignored = [c["metadata"].get("tags", []) for c in nb_cells() if "nbval-ignore-output" in c["metadata"].get("tags", [])]
    assert ignored == [["steps", "nbval-ignore-output"]], ignored


def nb_cells():
    return json.loads((ROOT / "notebooks/14-profiling.ipynb").read_text())["cells"]


def test_a_trace_too_large_to_draw(tmp_path):
    (tmp_path / "rank0.json").write_text(json.dumps({"traceEvents": STEP * 300}))  # about 0.25 MB
    assert timeline.load(tmp_path, max_mb=1)[0][:1] == STEP[:1]
    r = run("code/14_timeline.py", str(tmp_path), "--max-mb", "0.1")
    one_error_line(r, f"error: {tmp_path}/rank0.json is over 0.1 MB, too large to draw here")


def test_a_trace_folder_that_cannot_be_written(tmp_path):
    (tmp_path / "file").write_text("")
    r = run("code/14_profiling.py", "--trace-dir", str(tmp_path / "file" / "traces"))
    one_error_line(r, f"error: cannot write traces to --trace-dir {tmp_path}/file/traces (Not a directory)")


def one_process():
    """The environment torchrun gives a world of one process."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize("active", ["14", "0"])
def test_more_traced_steps_than_an_epoch_has(tmp_path, active):
    """1,440 images in steps of 96: 15 steps, 1 skipped, 1 warm-up, at most 13 traced; one line, before
    the process group (the loop would otherwise run out of batches: StopIteration)."""
    r = run("code/14_profiling.py", "--active", active, "--trace-dir", str(tmp_path), env=one_process())
    one_error_line(r, f"error: --active {active}: must be from 1 to 13 (an epoch of 1,440 images has 15 steps "
                      "of --batch-size 96; the profiler skips 1 and warms up 1)")
    assert not list(tmp_path.iterdir())  # stopped before it made the trace folders


def test_the_benchmark_times_its_window(tmp_path):
    """--seconds: each mode runs as many steps as a 10-step probe says fill that long after its
    warm-up, and the row says when (the sweep keeps the GPU-use samples of these windows) and how
    long (the step times come from it). The seconds themselves are not asserted: a noisy host can
    make the probe slower than the run it sizes."""
    r = run("code/14_scaling.py", "--image-size", "8", "--batch", "16", "--seconds", "1",
            "--out", str(tmp_path / "row.json"), env=one_process())
    assert r.returncode == 0, r.stderr
    assert re.search(r"^1 processes on 1 node\(s\), backend gloo, device cpu: strong \(global batch 16\) and "
                     r"weak \(16 per process\), \d+ and \d+ steps, about 1 s each$", r.stdout, re.M), r.stdout
    row = json.loads((tmp_path / "row.json").read_text())
    (s0, s1), (w0, w1) = row["strong"]["window"], row["weak"]["window"]
    assert s0 < s1 <= w0 < w1
    for m in ("strong", "weak"):
        m = row[m]
        assert m["steps"] == max(10, math.ceil(1 / (m["probe_s"] / 10)))
        assert 0 < m["seconds"] <= m["window"][1] - m["window"][0] + 0.01
        assert m["step_s"] == pytest.approx(m["seconds"] / m["steps"])
        assert m["images_per_s"] == pytest.approx(16 * m["steps"] / m["seconds"])


T0 = 1_764_000_000  # the jobs' clock (epoch seconds)


def fake_chain(out, sizes, log=None):
    """A sweep's folder as its jobs leave it: per GPU, 100 images/s strong and weak at every size
    times `scale` (1 = perfect), 100 timed steps each; each job's log (IB unless `log`); and GPU
    use sampled before (start-up: 0 %), during (97 %, 99 %) and after (5 %) the timed steps."""
    jobs = []
    for i, (nodes, gpn, scale) in enumerate(sizes):
        job, gpus = str(1000 + i), nodes * gpn
        thr = 100.0 * gpus * scale
        strong, weak = 100 * 1024 / thr, 100 * 1024 * gpus / thr  # seconds of 100 steps
        row = dict(nodes=nodes, gpus=gpus, backend="nccl", device="cuda", torch="2.10", cuda="12.8", hip=None,
                   nccl="2.27.3", python="3.12", image_size=28,
                   strong=dict(global_batch=1024, steps=100, seconds=strong, window=[T0 + 60, T0 + 60 + strong],
                               step_s=strong / 100, images_per_s=thr),
                   weak=dict(global_batch=1024 * gpus, steps=100, seconds=weak,
                             window=[T0 + 61 + strong, T0 + 61 + strong + weak], step_s=weak / 100, images_per_s=thr))
        (out / f"{job}.json").write_text(json.dumps(row))
        (out / f"job-{job}.out").write_text(log or (DATA / "nccl-ib.log").read_text())
        (out / f"util-{job}.txt").write_text(f"{T0 + 10},0\n{T0 + 70},97\n{T0 + 62 + strong},99\n"
                                             f"{T0 + 90 + strong + weak},5\n")
        jobs.append(dict(job=job, nodes=nodes, gpus_per_node=gpn))
    (out / "jobs.json").write_text(json.dumps(dict(sbatch="slurm/14-scaling.sbatch", bench=[], jobs=jobs)))


def collect(out):
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}  # no cluster: wall times "?"
    r = run("code/14_sweep.py", "--collect", "--out", str(out), env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout, (out / "report.md").read_text()


def test_the_report_passes_three_node_counts_at_75_percent(tmp_path):
    fake_chain(tmp_path, [(1, 1, 1.0), (1, 4, 0.95), (2, 4, 0.9), (4, 4, 0.8)])
    out, report = collect(tmp_path)
    assert out.splitlines()[-1] == "verdict: PASS"
    # steps, timed s, step ms, images/s, efficiency, for strong then weak; GPU use of the timed steps only
    assert ("| 1003 | 4 | 16 | ? | ? | 100 | 80.00 | 800.00 | 1280 | 80% | 100 | 1280.00 | 12800.00 | 1280 | 80% "
            "| 98 % | NCCL network IB |") in report
    assert "Baseline: job 1000, 1 node(s) x 1 GPU(s). Efficiency = images/s per GPU against the baseline's" in report
    assert "Verdict (CSC's gpularge test): PASS" in report and "#SBATCH --partition=gputest" in report
    assert (tmp_path / "scaling.png").stat().st_size > 10000


def test_the_report_fails_with_two_node_counts_below_75_percent_or_over_sockets(tmp_path):
    fake_chain(tmp_path, [(1, 4, 1.0), (2, 4, 1.0)])
    assert collect(tmp_path)[0].splitlines()[-1] == "verdict: FAIL: 2 node count(s) (1, 2), CSC asks for at least 3"
    fake_chain(tmp_path, [(1, 4, 1.0), (2, 4, 0.9), (4, 4, 0.7)])
    assert collect(tmp_path)[0].splitlines()[-1] == ("verdict: FAIL: strong scaling below 75% of the baseline's "
                                                     "images/s per GPU at 4 node(s) (70%)")
    fake_chain(tmp_path, [(1, 4, 1.0), (2, 4, 0.9), (4, 4, 0.9)], log=(DATA / "nccl-socket-fallback.log").read_text())
    out, report = collect(tmp_path)
    assert out.splitlines()[-1] == ("verdict: FAIL: multi-node rows ran over TCP sockets, not the fast network: "
                                    "not to be trusted")
    assert "| NCCL network Socket (not to be trusted) |" in report


def test_one_baseline_for_the_table_and_the_verdict(tmp_path):
    """Whole nodes scale perfectly against 1 node, but each of their GPUs does 70 % of the work of
    the sweep's single GPU: the table says 70 %, and so must the verdict."""
    fake_chain(tmp_path, [(1, 1, 1.0), (1, 4, 0.7), (2, 4, 0.7), (4, 4, 0.7)])
    out, report = collect(tmp_path)
    assert out.splitlines()[-1] == ("verdict: FAIL: strong scaling below 75% of the baseline's images/s per GPU "
                                    "at 1 node(s) (70%), 2 node(s) (70%), 4 node(s) (70%)")
    assert "Baseline: job 1000, 1 node(s) x 1 GPU(s)." in report
    assert "| 1002 | 2 | 8 | ? | ? | 100 | 182.86 | 1828.57 | 560 | 70% |" in report


@pytest.mark.parametrize("log, transport, verdict", [
    ("nccl-ib.log", "NCCL network IB", "PASS"),
    ("rccl-ofi-lumi.log", "NCCL network AWS Libfabric", "PASS"),
    ("nccl-socket-fallback.log", "NCCL network Socket",
     "FAIL: multi-node rows ran over TCP sockets, not the fast network: not to be trusted"),
    (None, "NCCL (no 'Using network' line: set NCCL_DEBUG=INFO)",
     "FAIL: multi-node rows name no network (their logs lack NCCL's INFO lines): not to be trusted")])
def test_the_transport_is_the_network_nccl_chose(tmp_path, log, transport, verdict):
    """NCCL's `Using network <name>` line, not the first NET/ word: NET/Plugin comes first, and
    "NET/IB : No device found." before the fallback to sockets. Within one node any network will
    do; across nodes only a named one that is not TCP."""
    text = (DATA / log).read_text() if log else "8 processes on 2 node(s), backend nccl, device cuda: ...\n"
    fake_chain(tmp_path, [(1, 4, 1.0), (2, 4, 0.9), (4, 4, 0.9)], log=text)
    out, report = collect(tmp_path)
    assert out.splitlines()[-1] == f"verdict: {verdict}"
    untrusted = 0 if verdict == "PASS" else 2
    assert report.count(f"| {transport} |") == 3 - untrusted
    assert report.count(f"| {transport} (not to be trusted) |") == untrusted
    assert "| 1002 | 4 | 16 | ? | ? | 100 | 71.11 | 711.11 | 1440 | 90% |" in report


def test_a_sweep_larger_than_the_partition(cluster, tmp_path):
    r = run("code/14_sweep.py", "--sizes", "3x4", "--out", str(tmp_path), env={**os.environ, **cluster})
    one_error_line(r, "error: sbatch refused 3 node(s) x 4 GPU(s): Batch job submission failed: ")


@pytest.mark.parametrize("name", ["14-timeline-default.png", "14-timeline-small-buckets.png", "14-timeline-no-sync.png",
                                  "14-scaling.png", "14-reference.png"])
def test_the_committed_figures_are_the_notebooks(name):
    """docs/14-*.png are the images the executed notebook shows, byte for byte: each image output is
    followed by the line that names its file."""
    nb = json.loads((ROOT / "notebooks" / "14-profiling.ipynb").read_text())
    shown = {}
    for cell in (c for c in nb["cells"] if c["cell_type"] == "code"):
        outs = cell.get("outputs", [])
        for image, after in zip(outs, outs[1:]):
            if "image/png" in image.get("data", {}):
                for named in re.findall(r"docs/(14-[\w-]+\.png)", "".join(after.get("text", ""))):
                    shown[named] = base64.b64decode(image["data"]["image/png"])
    assert name in shown, f"the notebook shows no image followed by docs/{name}"
    assert (ROOT / "docs" / name).read_bytes() == shown[name], f"docs/{name} is not the image the notebook shows"


def test_the_envelope_formula():
    """code/scaling_formula.py: the all-reduce of a known case, and at the critical tokens per
    device a step's compute takes exactly as long as its all-reduce, for any model size."""
    sf = importlib.import_module("scaling_formula")
    assert sf.ring_factor(2) == 1 and sf.ring_factor(4) == 1.5
    assert sf.allreduce_seconds(58152, 2, 0.5e9, 500e-6) == pytest.approx(500e-6 + 58152 / 0.5e9)
    for n, flops, busbw, _ in sf.SYSTEMS.values():
        t = sf.critical_tokens(n, flops, busbw)
        for p in (1e9, 7e9):
            assert sf.compute_seconds(p, t, flops) == pytest.approx(sf.allreduce_seconds(sf.GRAD_BYTES * p, n, busbw))
            assert sf.compute_seconds(p, 2 * t, flops) > sf.allreduce_seconds(sf.GRAD_BYTES * p, n, busbw)


def test_the_envelope_refuses_a_bandwidth_of_zero():
    one_error_line(run("code/14_envelope.py", "--busbw-gbs", "0"), "error: --busbw-gbs 0 (must be > 0)")
