"""The benchmark's code paths run (smoke mode on CPU); its numbers are not tested, only measured."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ddp_scaling_mode_smoke(tmp_path):
    out = tmp_path / "ddp.json"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        "code/10_benchmark.py", "--smoke", "--batch-sizes", "64", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(out.read_text())["results"]
    assert [(row["variant"], row["gpus"], row["batch"]) for row in rows] == [
        ("DDP, 2 processes, data resident", 2, 64), ("DDP, 2 processes, data resident, weak scaling", 2, 128)]
    assert all(row["images_per_s"] > 0 for row in rows)


def test_committed_results_are_complete():
    for f in ROOT.glob("benchmarks/*.json"):
        rep = json.loads(f.read_text())
        if "experiment" in rep:  # step 9's counted trials (code/09_trials.py)
            assert rep["torch"] and rep["counts"], f
            for condition, counts in rep["counts"].items():
                assert sum(counts.values()) >= 10, f"{f}: {condition}: fewer than 10 trials"
            continue
        assert not rep["smoke"], f"{f}: smoke results are not measurements"
        assert rep["device"] and rep["torch"] and rep["results"], f
