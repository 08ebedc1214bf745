"""The benchmark's code paths run (smoke mode on CPU); its numbers are not tested, only measured."""
import json
import os
import re
import signal
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
        if "device" not in rep:  # not a GPU run (cpu-paths.json: the pinned CPU path, checked by its own test)
            continue
        assert not rep["smoke"], f"{f}: smoke results are not measurements"
        assert rep["device"] and rep["torch"] and rep["results"], f


# Step 10 can hang on two GPUs: a sampler thread runs nvidia-smi (subprocess.run) while the main
# thread forks loader workers. subprocess.run opens a pipe of its own and reads it to its end; a worker
# forked meanwhile holds the write end open, so the thread waits for the persistent workers to exit,
# and the main thread waits for the thread. The same pattern on CPU, with `true` for nvidia-smi.
RACE = r'''
import subprocess, sys, tempfile, threading, warnings
import torch
from torch.utils.data import DataLoader, TensorDataset
warnings.filterwarnings("ignore")
pattern, trials = sys.argv[1], int(sys.argv[2])
data = TensorDataset(torch.zeros(64, 1))


def read_utilisation(f):  # the old sampler's call (nvidia-smi), with a command every machine has
    subprocess.run(["true"], stdout=f, stderr=subprocess.DEVNULL)


for trial in range(trials):
    with tempfile.TemporaryFile("w+") as f:
        stop = threading.Event()
        if pattern == "thread":  # the old benchmark: a thread starts processes while the main thread forks
            t = threading.Thread(target=lambda: [read_utilisation(f) for _ in iter(stop.is_set, True)])
            t.start()
        loader = DataLoader(data, batch_size=8, num_workers=2, persistent_workers=True,
                            multiprocessing_context="fork")
        for x in loader:
            if pattern == "main":  # the new: read between steps, from the main thread, after the fork
                read_utilisation(f)
        stop.set()
        if pattern == "thread":
            t.join()  # the old benchmark's end of a rung
        del loader
    print(f"trial {trial} ended", flush=True)
'''


def run_race(pattern, timeout):
    """(trials that ended, timed out?): the race script in a session of its own, killed whole on timeout."""
    proc = subprocess.Popen([sys.executable, "-c", RACE, pattern, "3"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        out, _ = proc.communicate(timeout=timeout)
        return out.count("ended"), False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return out.count("ended"), True


def test_sampling_beside_forked_workers_cannot_hang():
    ended, timed_out = run_race("thread", timeout=12)  # measured: stuck in its first trial, 6 of 6 runs
    assert timed_out and ended < 3, "the old pattern no longer hangs: the reproduction lost its race"
    assert run_race("main", timeout=120) == (3, False)  # about 3 s a trial on 2 loaded cores
    # and the benchmark itself starts neither a thread nor a process: it reads NVML from the main thread
    src = (ROOT / "code/10_benchmark.py").read_text()
    assert not re.search(r"^import (threading|subprocess)|^from (threading|subprocess) ", src, re.M)
    assert "busy()" in src and "torch.cuda.utilization" in src


def test_each_rung_is_written_at_once_and_a_stall_dumps_the_stacks(tmp_path):
    """A job killed at its time limit keeps the rungs it measured; a rung slower than --stall-after
    (here 0.1 s, so every rung) prints every thread's stack."""
    out = tmp_path / "b.json"
    proc = subprocess.Popen([sys.executable, "code/10_benchmark.py", "--smoke", "--batch-sizes", "16", "--stall-after",
                             "0.1", "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    first = rep = None
    try:
        first = proc.stdout.readline()  # the first rung's line: its row is in the file already
        rep = json.loads(out.read_text()) if first.startswith("batch    16  DataLoader") else None
    finally:
        proc.kill()
        _, err = proc.communicate()
    assert rep, f"first line {first!r}, exit code {proc.returncode}, stderr:\n{err[-3000:]}"
    assert rep["complete"] is False and rep["results"][0]["variant"] == "DataLoader (tutorial baseline)"
    assert "most recent call first" in err and "in measure" in err, err[-2000:]
