"""Step 9: the training stops cleanly on SIGTERM and resumes with every rank's own random
numbers; the helpers' world-size check.

The notebook shows the USR1 path (a signal to one rank under torchrun, and Slurm's signal to a
running job on the practice cluster, requeued); this file covers SIGTERM, which Slurm sends at
preemption and at the time limit, with 2 processes started as srun starts them (no torchrun).
"""
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import ddp_helpers as h

ROOT = Path(__file__).resolve().parent.parent


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


STARTED = []  # every process a test starts; a failing test leaves none behind


@pytest.fixture(autouse=True)
def _kill_leftovers():
    yield
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _start_as_srun(args, ntasks=2):
    """`ntasks` processes of code/09_reliability.py with Slurm's variables, as srun starts them."""
    drop = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "TORCHELASTIC_RUN_ID")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("SLURM_")}
    env.update(OMP_NUM_THREADS="1", SLURM_STEP_ID="0", SLURM_NTASKS=str(ntasks),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    procs = [subprocess.Popen([sys.executable, "code/09_reliability.py", *args], cwd=ROOT,
                              env={**env, "SLURM_PROCID": str(t), "SLURM_LOCALID": str(t)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for t in range(ntasks)]
    STARTED.extend(procs)
    return procs


def _finish(procs, timeout=300):
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    return [p.returncode for p in procs], outs[0], outs


def test_sigterm_stops_mid_epoch_and_every_rank_resumes_its_own_random_numbers(tmp_path):
    ckpt, ref = str(tmp_path / "ckpt.pt"), str(tmp_path / "ref.pt")
    codes, reference, _ = _finish(_start_as_srun(["--checkpoint", ref]))
    assert codes == [0, 0], reference

    procs = _start_as_srun(["--checkpoint", ckpt])
    first = procs[0].stdout.readline()  # rank 0 prints once every rank has installed its handler
    while first.startswith("[Gloo]"):  # torch 2.10's gloo announces its connections first
        first = procs[0].stdout.readline()
    assert first.startswith("2 processes, backend"), first
    # As Slurm signals a step: rank 1 and its loader workers (--workers 2) at once, from outside
    # (a worker signalled by its parent would just exit). The workers ignore it (ignore_stop_signals).
    for _ in range(600):  # the workers start with the first batch
        children = h.children(procs[1].pid)
        if len(children) == 2:
            break
        time.sleep(0.05)
    assert len(children) == 2, children
    subprocess.run(["kill", "-TERM", str(procs[1].pid), *map(str, children)], check=True)
    codes, out, outs = _finish(procs)
    # Both ranks stopped together after writing the checkpoint: rank 1 handled SIGTERM (it
    # would end with -15 otherwise), rank 0 learned it from the all_reduce.
    assert codes == [3, 3], outs
    stop = re.search(r"stopped in epoch (\d+) after batch (\d+) of 15 on a signal \(from another rank\)", out)
    assert stop, outs

    assert Path(ckpt + ".requeue").exists()  # the batch script requeues on this marker
    state = torch.load(ckpt)
    assert (state["epoch"], state["step"]) == tuple(map(int, stop.groups()))
    assert [r["loss_sum"] > 0 for r in state["ranks"]] == [state["step"] > 0] * 2
    # one random state per rank, and they differ (step 2: seed + rank)
    assert not torch.equal(state["ranks"][0]["torch_rng"], state["ranks"][1]["torch_rng"])

    codes, resumed, _ = _finish(_start_as_srun(["--checkpoint", ckpt]))
    assert codes == [0, 0], resumed
    assert not Path(ckpt + ".requeue").exists()  # a run that finishes leaves no marker
    assert f"epoch {stop.group(1)}, {stop.group(2)} of 15 batches done" in resumed
    pick = lambda text: re.findall(r"^(?:epoch \d+ loss|last dropout masks|weights sha256).*$", text, re.M)
    assert pick(resumed) == pick(reference) and len(pick(reference)) == 12, (resumed, reference)


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


@pytest.mark.parametrize("sig,hear,result", [
    ("USR1", "default", "failed after batch"),   # spawn: a new Python with USR1's default action
    ("USR1", "ignore", "all 100 batches"),       # step 9's fix
    ("TERM", "ignore", "all 100 batches")])
def test_slurm_signals_spawn_workers_in_a_job_step(cluster, sig, hear, result):
    """Slurm itself signals every process of a step (scancel --signal), loader workers started
    with `spawn` included (notebook 9 shows every start method with the signal sent as Slurm
    does; its jobs use fork)."""
    name = f"09-spawn-{sig}-{hear}-{os.getpid()}"
    srun = subprocess.Popen(
        ["srun", "--quiet", f"--job-name={name}", "--account=project_2001234", "--partition=gputest",
         "--time=2", "--nodes=1", "--ntasks=1", "--cpus-per-task=4", "--gres=gpu:gh200:1",
         "python", "code/09_workers.py", "--start-method", "spawn", "--send", "slurm",
         "--workers-hear", hear], cwd=ROOT, env={**os.environ, **cluster, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    STARTED.append(srun)
    assert srun.stdout.readline().strip() == "waiting for Slurm's signal"
    job = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], env={**os.environ, **cluster},
                         capture_output=True, text=True).stdout.split()
    assert len(job) == 1, job
    subprocess.run(["scancel", f"--signal={sig}", job[0]], env={**os.environ, **cluster}, check=True)
    out, _ = srun.communicate(timeout=120)
    line = next(l for l in out.splitlines() if " -> " in l)
    assert line.startswith(f"spawn      SIG{sig:5} workers: {hear:8} -> {result}"), out
    assert srun.returncode == 0, out



# Each helper module's worker_init_fn that makes loader workers ignore Slurm's signals
IGNORE_IN_WORKERS = {"ddp_helpers": "ignore_stop_signals", "take_home": "workers_ignore_signals"}

FAILING_RANK = """
import sys, torch
sys.path.insert(0, "code")
{helpers}
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(64.0)), batch_size=4,
                                     num_workers=2, persistent_workers=True, worker_init_fn={ignore},
                                     multiprocessing_context="{start}")
for i, batch in enumerate(loader):
    if i == 3:
        raise RuntimeError("a collective timed out")  # any error of a rank, mid-epoch
"""


@pytest.mark.parametrize("script", ["ddp_helpers", "take_home"])
def test_a_failing_rank_with_workers_that_ignore_signals_still_exits(script):
    """Loader workers that ignore SIGTERM (step 9) must not keep a failed rank alive:
    multiprocessing's exit handler stops them with SIGTERM and then waits for them forever,
    so the job would hold its nodes until its time limit (found as the cluster user: a 16-rank
    job whose collective timed out hung on). The scripts end them with SIGKILL at exit."""
    if script == "ddp_helpers":  # its import registers end_workers_at_exit; steps 4 and 9 fork
        code = FAILING_RANK.format(helpers=f"from ddp_helpers import {IGNORE_IN_WORKERS[script]}",
                                   ignore=IGNORE_IN_WORKERS[script], start="fork")
    else:  # the file trains only as __main__; main() registers end_workers as this does
        assert "    atexit.register(end_workers)" in (ROOT / "code" / "take_home.py").read_text()
        code = FAILING_RANK.format(helpers="import atexit\nfrom take_home import end_workers, "
                                           "workers_ignore_signals\natexit.register(end_workers)",
                                   ignore=IGNORE_IN_WORKERS[script], start="spawn")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr[-2000:]
    assert r.stderr.rstrip().endswith("RuntimeError: a collective timed out"), r.stderr[-2000:]


WORKERS_FIRST_MASK = """
import signal, sys, torch
sys.path.insert(0, {code!r})
import {module}


def first_mask(worker_id):  # what a worker started with, before it ignores the signals
    names = sorted(s.name for s in signal.pthread_sigmask(signal.SIG_BLOCK, []) if s in {module}.STOP_SIGNALS)
    print("worker", worker_id, "blocked", names, flush=True)
    {module}.{ignore}(worker_id)


if __name__ == "__main__":
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(8.0)), batch_size=2,
                                         num_workers=2, worker_init_fn=first_mask, multiprocessing_context="spawn")
    {start}
    assert len(list(batches)) == 4
"""


@pytest.mark.parametrize("module", ["ddp_helpers", "take_home"])
def test_spawned_workers_start_with_both_signals_blocked(module, tmp_path):
    """A spawned worker is a new Python: until worker_init_fn ignores Slurm's signals, SIGTERM
    kills it. The workers must start with USR1 and TERM blocked, but multiprocessing's resource
    tracker, which spawn starts on first use, unblocks SIGTERM as it starts: the helpers start
    it before they block again (without that, the workers start with only USR1 blocked)."""
    start = ("with ddp_helpers.stop_signals_blocked(start_method=\"spawn\"):\n        batches = iter(loader)"
             if module == "ddp_helpers" else "batches = take_home.start_workers(loader)")
    script = tmp_path / "first_mask.py"
    script.write_text(WORKERS_FIRST_MASK.format(code=str(ROOT / "code"), module=module,
                                                ignore=IGNORE_IN_WORKERS[module], start=start))
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = sorted(l for l in r.stdout.splitlines() if l.startswith("worker"))
    assert lines == [f"worker {i} blocked ['SIGTERM', 'SIGUSR1']" for i in (0, 1)], r.stdout
