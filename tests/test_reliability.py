"""Step 9: a Slurm job requeued by USR1 resumes from its checkpoint; clear errors at start.

The notebook shows checkpoint/resume, elastic restarts and the error messages; this file
does what needs precise control of a running job: it sends USR1 to the batch shell of a
running job on the local cluster and checks that the job is requeued and resumes.
"""
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import ddp_helpers as h
from jobs import submit

ROOT = Path(__file__).resolve().parent.parent


def _squeue_running(name, env):
    r = subprocess.run(["squeue", "-h", "-n", name, "-t", "RUNNING", "-o", "%i"],
                       capture_output=True, text=True, env=env, timeout=30)
    return r.stdout.split()


def _signal_after_first_checkpoint(env, sent, deadline=240):
    """Wait until the job runs and its first checkpoint exists, then send USR1 to its batch shell."""
    end = time.time() + deadline
    while time.time() < end:
        for job in _squeue_running("09-requeue", env):
            if (ROOT / "runs" / f"09-job-{job}.pt").exists():
                subprocess.run(["scancel", "--signal=USR1", "--batch", job], env=env, check=True, timeout=30)
                sent.append(job)
                return
        time.sleep(0.1)


def test_usr1_requeues_and_the_job_resumes(cluster, tmp_path):
    env = {**os.environ, **cluster}
    sent = []
    watcher = threading.Thread(target=_signal_after_first_checkpoint, args=(env, sent), daemon=True)
    watcher.start()
    out = submit("slurm/09-requeue.sbatch")  # sbatch --wait: returns after the final run
    watcher.join(timeout=5)
    assert sent, "the job never wrote its first checkpoint while running"
    job = sent[0]
    (ROOT / "runs" / f"09-job-{job}.pt").unlink(missing_ok=True)
    assert f"run 0 of job {job}" in out and "USR1 received: requeueing" in out
    assert f"run 1 of job {job}" in out, "the job was not started again after the requeue"
    done = re.search(r"resumed from runs/09-job-\d+\.pt: (\d) of 4 epochs done", out)
    assert done and int(done.group(1)) >= 1, out  # resumed from a checkpoint, not from scratch
    assert "4 processes" in out.split(f"run 0 of job {job}")[-1], out  # a full node: --gres=gpu:v100:4
    weights = ROOT / "runs" / f"09-job-{job}-weights.pt"
    resumed = torch.load(weights)
    weights.unlink()
    # The uninterrupted reference: the same 4 processes without a signal.
    ref = subprocess.run(f"{sys.executable} -m torch.distributed.run --standalone --nproc_per_node=4 "
                         f"code/09_reliability.py --epochs 4 --checkpoint {tmp_path}/ref.pt "
                         f"--save {tmp_path}/ref-weights.pt",
                         shell=True, cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert ref.returncode == 0, ref.stderr
    # With 4 processes the resumed run's first all-reduce sums the gradients in another order
    # than the uninterrupted run's (docs/09-reliability.md): equal up to float rounding, not bitwise.
    reference = torch.load(tmp_path / "ref-weights.pt")
    diff = max((resumed[k] - reference[k]).abs().max().item() for k in reference)
    assert diff < 1e-6, (diff, out, ref.stdout)


def test_world_size_must_match_slurm_tasks(monkeypatch):
    for k in ("TORCHELASTIC_RUN_ID", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    monkeypatch.setenv("SLURM_NTASKS", "8")
    monkeypatch.setenv("WORLD_SIZE", "8")
    h.check_world_size()  # srun started the 8 ranks itself
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(SystemExit, match=r"error: WORLD_SIZE=4, but Slurm started 8 task\(s\) x 1 process\(es\) = 8"):
        h.check_world_size()
    # torchrun in each of 2 tasks, 4 processes each: 8 in all
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setenv("WORLD_SIZE", "8")
    h.check_world_size()
    monkeypatch.delenv("SLURM_STEP_ID")  # the batch script's own shell is not checked
    monkeypatch.setenv("WORLD_SIZE", "3")
    h.check_world_size()
