"""Step 14: the trace reader's numbers on a trace whose answer is known, the sweep's report from
rows whose efficiencies are known, the one-line errors for bad input, and the committed figures
being the ones the executed notebook drew. The real traces and the real chain run in
notebooks/14-profiling.ipynb."""
import base64
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "code"))
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
    assert [label for label, _, _ in timeline.lanes({0: STEP})] == ["rank 0 main thread", "rank 0 gloo thread 1"]


def test_a_trace_too_large_to_draw(tmp_path):
    (tmp_path / "rank0.json").write_text(json.dumps({"traceEvents": STEP * 300}))  # about 0.25 MB
    assert timeline.load(tmp_path, max_mb=1)[0][:1] == STEP[:1]
    r = run("code/14_timeline.py", str(tmp_path), "--max-mb", "0.1")
    one_error_line(r, f"error: {tmp_path}/rank0.json is over 0.1 MB, too large to draw here")


def test_a_trace_folder_that_cannot_be_written(tmp_path):
    (tmp_path / "file").write_text("")
    r = run("code/14_profiling.py", "--trace-dir", str(tmp_path / "file" / "traces"))
    one_error_line(r, f"error: cannot write traces to --trace-dir {tmp_path}/file/traces (Not a directory)")


def fake_chain(out, sizes, transport=""):
    """A sweep's folder as its jobs leave it: per GPU, 100 images/s strong and weak at every size
    times `scale` (1 = perfect), and each job's log."""
    jobs = []
    for i, (nodes, gpn, scale) in enumerate(sizes):
        job, gpus = str(1000 + i), nodes * gpn
        thr = 100.0 * gpus * scale
        row = dict(nodes=nodes, gpus=gpus, backend="nccl", device="cuda", torch="2.10", cuda="12.8", hip=None,
                   nccl="2.27.3", python="3.12", image_size=28, steps=50,
                   strong=dict(global_batch=1024, step_s=1024 / thr, images_per_s=thr),
                   weak=dict(global_batch=1024 * gpus, step_s=1024 * gpus / thr, images_per_s=thr))
        (out / f"{job}.json").write_text(json.dumps(row))
        (out / f"job-{job}.out").write_text(f"r01g01:1:1 [0] NCCL INFO NET/{transport or 'IB'} : Using ...\n")
        (out / f"util-{job}.txt").write_text("97\n99\n")
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
    assert "| 1003 | 4 | 16 | ? | ? | 800.00 | 1280 | 80% | 12800.00 | 1280 | 80% | 98 % | NCCL NET/IB |" in report
    assert "Verdict (CSC's gpularge test): PASS" in report and "#SBATCH --partition=gputest" in report
    assert (tmp_path / "scaling.png").stat().st_size > 10000


def test_the_report_fails_with_two_node_counts_below_75_percent_or_over_sockets(tmp_path):
    fake_chain(tmp_path, [(1, 4, 1.0), (2, 4, 1.0)])
    assert collect(tmp_path)[0].splitlines()[-1] == "verdict: FAIL: 2 node count(s) (1, 2), CSC asks for at least 3"
    fake_chain(tmp_path, [(1, 4, 1.0), (2, 4, 0.9), (4, 4, 0.7)])
    assert collect(tmp_path)[0].splitlines()[-1] == "verdict: FAIL: strong scaling below 75% at 4 nodes"
    fake_chain(tmp_path, [(1, 4, 1.0), (2, 4, 0.9), (4, 4, 0.9)], transport="Socket")
    out, report = collect(tmp_path)
    assert out.splitlines()[-1] == ("verdict: FAIL: multi-node rows ran over TCP sockets, not the fast network: "
                                    "not to be trusted")
    assert "NCCL NET/Socket (not to be trusted) |" in report


def test_a_sweep_larger_than_the_partition(cluster, tmp_path):
    r = run("code/14_sweep.py", "--sizes", "3x4", "--out", str(tmp_path), env={**os.environ, **cluster})
    one_error_line(r, "error: sbatch refused 3 node(s) x 4 GPU(s): Batch job submission failed: ")


@pytest.mark.parametrize("name", ["14-timeline-default.png", "14-timeline-small-buckets.png", "14-timeline-no-sync.png",
                                  "14-steps.png", "14-scaling.png", "14-reference.png"])
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
