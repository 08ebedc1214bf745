"""Step 9: the training stops cleanly on SIGTERM and resumes with every rank's own random
numbers; the helpers' world-size check.

The notebook shows the USR1 path (a signal to one rank under torchrun, and Slurm's signal to a
running job on the practice cluster, requeued); this file covers SIGTERM, which Slurm sends at
preemption and at the time limit, with 2 processes started as srun starts them (no torchrun),
and the requeue templates on the practice cluster: scancel ends a job, a failure ends it, only
Slurm's warning requeues it.
"""
import importlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import ddp_helpers as h
import stop_signals
from practice_cluster import daemons

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
        children = stop_signals.children(procs[1].pid)
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

    assert "(SIGTERM without a warning: no requeue)" in out, outs
    assert not Path(ckpt + ".requeue").exists()  # SIGTERM alone (scancel): the job is not requeued
    state = torch.load(ckpt)
    assert (state["epoch"], state["step"]) == tuple(map(int, stop.groups()))
    assert [r["loss_sum"] > 0 for r in state["ranks"]] == [state["step"] > 0] * 2
    # one random state per rank, and they differ (step 2: seed + rank)
    assert not torch.equal(state["ranks"][0]["torch_rng"], state["ranks"][1]["torch_rng"])

    codes, resumed, _ = _finish(_start_as_srun(["--checkpoint", ckpt]))
    assert codes == [0, 0], resumed
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
    assert line.startswith(f"spawn  SIG{sig:5} workers: {hear:8}-> {result}"), out
    assert srun.returncode == 0, out




class _SlowData(torch.utils.data.Dataset):
    """A second a sample: the loader's queue is empty when the worker dies."""
    def __len__(self):
        return 100

    def __getitem__(self, i):
        time.sleep(1)
        return torch.tensor(float(i))


def test_a_worker_killed_while_the_loader_waits_is_named_by_its_signal():
    """Which error the main process gets is a race: a SIGCHLD that arrives while the loader waits
    on its queue raises "is killed by signal" inside the loader's own check, which re-raises it
    as "exited unexpectedly". Here the main process is sure to be waiting; the row still names
    the signal."""
    workers = importlib.import_module("09_workers")
    batches = iter(torch.utils.data.DataLoader(_SlowData(), num_workers=1,
                                               multiprocessing_context="fork"))
    next(batches)
    pid = batches._workers[0].pid
    # from another process, as Slurm sends it (a worker its parent signals just exits)
    threading.Timer(0.3, subprocess.run, (["kill", "-TERM", str(pid)],)).start()
    with pytest.raises(RuntimeError) as died:
        next(batches)
    assert "exited unexpectedly" in str(died.value)
    assert workers.why_worker_died(died.value) == (
        "DataLoader worker is killed by signal: Terminated.")


def test_torchrun_passes_slurms_warning_on_with_signals_to_handle(cluster):
    """Slurm signals every process of a step: under torchrun the agent and its workers. The agent
    dies of USR1 by default; with --signals-to-handle=...,SIGUSR1 it passes the signal on and
    waits (30 s in PyTorch 2.10) while the workers checkpoint, write the marker and exit."""
    ckpt = ROOT / "runs" / f"09-signals-to-handle-{os.getpid()}.pt"
    name = ckpt.stem
    srun = subprocess.Popen(
        ["srun", "--quiet", f"--job-name={name}", "--account=project_2001234", "--partition=gputest",
         "--time=5", "--nodes=1", "--ntasks=1", "--cpus-per-task=4", "--gres=gpu:gh200:2",
         "torchrun", "--standalone", "--nproc_per_node=2", "--signals-to-handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1",
         "code/09_reliability.py", "--checkpoint", str(ckpt), "--workers", "0", "--epochs", "100"],
        cwd=ROOT, env={**os.environ, **cluster, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    STARTED.append(srun)
    try:
        deadline = time.monotonic() + 180
        while not ckpt.exists():  # the end of epoch 0: the training runs
            assert srun.poll() is None and time.monotonic() < deadline, srun.communicate()[0]
            time.sleep(0.2)
        job = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], env={**os.environ, **cluster},
                             capture_output=True, text=True).stdout.split()
        assert len(job) == 1, job
        subprocess.run(["scancel", "--signal=USR1", job[0]], env={**os.environ, **cluster}, check=True)
        out, _ = srun.communicate(timeout=120)
        # the agent heard it, lived, and passed it on to both workers
        assert re.search(r"Received (10|Signals.SIGUSR1) death signal, shutting down workers", out), out
        assert out.count("closing signal SIGUSR1") == 2, out
        assert re.search(r"stopped in epoch \d+ after batch \d+ of \d+ on a signal", out), out
        assert Path(f"{ckpt}.requeue").exists(), out  # the warning's marker: the job would requeue
        assert srun.returncode == 1, out  # torchrun's own code, whatever the workers returned
    finally:
        for f in ckpt.parent.glob(f"{ckpt.name}*"):
            f.unlink()


# Each helper module's worker_init_fn that makes loader workers ignore Slurm's signals
IGNORE_IN_WORKERS = {"stop_signals": "ignore_stop_signals", "take_home": "workers_ignore_signals"}

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


@pytest.mark.parametrize("script", ["stop_signals", "take_home"])
def test_a_failing_rank_with_workers_that_ignore_signals_still_exits(script):
    """Loader workers that ignore SIGTERM (step 9) must not keep a failed rank alive:
    multiprocessing's exit handler stops them with SIGTERM and then waits for them forever,
    so the job would hold its nodes until its time limit (found as the cluster user: a 16-rank
    job whose collective timed out hung on). The scripts end them with SIGKILL at exit."""
    if script == "stop_signals":  # its import registers end_workers_at_exit; steps 4 and 9 fork
        code = FAILING_RANK.format(helpers=f"from stop_signals import {IGNORE_IN_WORKERS[script]}",
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


@pytest.mark.parametrize("module", ["stop_signals", "take_home"])
def test_spawned_workers_start_with_both_signals_blocked(module, tmp_path):
    """A spawned worker is a new Python: until worker_init_fn ignores Slurm's signals, SIGTERM
    kills it. The workers must start with USR1 and TERM blocked, but multiprocessing's resource
    tracker, which spawn starts on first use, unblocks SIGTERM as it starts: the helpers start
    it before they block again (without that, the workers start with only USR1 blocked)."""
    start = ("with stop_signals.stop_signals_blocked(start_method=\"spawn\"):\n        batches = iter(loader)"
             if module == "stop_signals" else "batches = take_home.start_workers(loader)")
    script = tmp_path / "first_mask.py"
    script.write_text(WORKERS_FIRST_MASK.format(code=str(ROOT / "code"), module=module,
                                                ignore=IGNORE_IN_WORKERS[module], start=start))
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = sorted(l for l in r.stdout.splitlines() if l.startswith("worker"))
    assert lines == [f"worker {i} blocked ['SIGTERM', 'SIGUSR1']" for i in (0, 1)], r.stdout


# The requeue templates: Slurm's warning (USR1 to the job's steps) checkpoints and
# requeues; SIGTERM to the job (scancel, preemption, the time limit) ends it; a run that fails
# ends it, whatever marker an earlier run left. Each file's job is submitted unchanged.
# file: (its checkpoint, sbatch's options, the script's arguments)
TEMPLATES = {"slurm/09-requeue.sbatch": ("runs/09-job-{}.pt", [], []),
             # 2 ranks on one node, not 8 on two, no loader workers, and more epochs than the test
             # waits for (only scancel ends it): the same lines, at a quarter of the cost
             "slurm/take-home.sbatch": ("runs/take-home-{}.pt", ["--nodes=1", "--gres=gpu:gh200:2",
                                        "--ntasks-per-node=2"], ["--workers", "0", "--epochs", "100"])}


def _slurm(cluster, *cmd, check=True):
    env = {**os.environ, **cluster, "OMP_NUM_THREADS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=check).stdout


@pytest.fixture
def template_job(cluster):
    """submit(path): the job id; every job is cancelled and its checkpoints removed afterwards."""
    jobs = []

    def submit(path):
        (ROOT / "logs").mkdir(exist_ok=True)
        _, options, args = TEMPLATES[path]
        job = _slurm(cluster, "sbatch", "--parsable", f"--output={ROOT}/logs/job-%j.out", *options, path,
                     *args).strip()
        jobs.append((job, path))
        return job
    yield submit
    for job, path in jobs:
        _slurm(cluster, "scancel", job, check=False)
        for f in ROOT.glob(TEMPLATES[path][0].format(job) + "*"):
            f.unlink()


def _output(job):
    log = ROOT / "logs" / f"job-{job}.out"
    return log.read_text() if log.exists() else ""


def _wait(cluster, job, text=None, timeout=240):
    """Until the job's output has `text` (None: until the job has left the queue); its output."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text is not None and text in _output(job):
            return _output(job)
        if not _slurm(cluster, "squeue", "-h", "-j", job, "-o", "%T", check=False).strip():
            assert text is None, f"job {job} ended before printing {text!r}:\n{_output(job)}"
            return _output(job)
        time.sleep(0.1)
    raise AssertionError(f"job {job}: no {text!r} after {timeout} s:\n{_output(job)}")


@pytest.mark.parametrize("path", sorted(TEMPLATES))
def test_scancel_ends_a_running_requeue_job(cluster, template_job, path):
    """A plain scancel while the training runs: the job ends (it used to checkpoint on the
    SIGTERM, write the marker and requeue itself, once per scancel)."""
    job = template_job(path)
    _wait(cluster, job, "processes, backend")
    _slurm(cluster, "scancel", job)
    out = _wait(cluster, job, timeout=90)
    assert "run 0 of job" in out and "run 1 of job" not in out and "requeueing" not in out, out


@pytest.mark.parametrize("path", sorted(TEMPLATES))
def test_a_start_up_failure_after_a_requeue_ends_the_job(cluster, template_job, path):
    """Slurm's warning (scancel --signal=USR1, to the steps) checkpoints and requeues; the
    requeued run's training is killed while it starts (the OOM killer, a failing node): the job
    ends, instead of being requeued again by the marker that the first run left."""
    job = template_job(path)
    _wait(cluster, job, "processes, backend")
    _slurm(cluster, "scancel", "--signal=USR1", job)
    _wait(cluster, job, "run 1 of job")
    # Kill the requeued run's training processes (both ranks) as soon as they exist, while they
    # import torch. (Not with scancel --signal: a signal to a step that is still being launched
    # makes Slurm cancel the whole job.)
    checkpoint = f"--checkpoint\0{TEMPLATES[path][0].format(job)}\0".encode()
    for _ in range(1200):
        pids = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                cmdline = (proc / "cmdline").read_bytes()
                # the ranks only: srun's own command line holds the same arguments
                if checkpoint in cmdline and not cmdline.split(b"\0")[0].endswith(b"srun"):
                    pids.append(int(proc.name))
            except OSError:
                continue
        if len(pids) == 2:
            break
        time.sleep(0.05)
    assert len(pids) == 2, pids
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    out = _wait(cluster, job, timeout=90)
    assert "checkpoint written, exit" in out and out.count("requeueing job") == 1, out
    assert "run 2 of job" not in out and "resumed from" not in out, out


def test_take_home_batch_files_requeue_alike():
    """take-home-lumi.sbatch (16 ranks: too big to run twice more here) has the lines that the
    Roihu file's requeue and lost-node tests run; step 9's file the requeue lines."""
    requeue = ['ended=""', 'if [ -e "$ckpt.requeue" ] && [ -z "$ended" ]; then']
    lost = ["rm -f \"$ckpt.requeue\" \"$ckpt.lost\"", 'elif [ -e "$ckpt.lost" ] && [ -z "$ended" ]; then',
            "watch_nodes() {", 'watch_nodes "$training" &', "srun --kill-on-bad-exit=1 "]
    for path, want in (("slurm/take-home.sbatch", requeue + lost), ("slurm/take-home-lumi.sbatch", requeue + lost),
                       ("slurm/09-requeue.sbatch", requeue + ["rm -f \"$ckpt.requeue\""])):
        text = (ROOT / path).read_text().splitlines()
        assert all(any(l.startswith(w) for l in text) for w in want), path
        assert any(l.startswith("trap 'ended=1;") and l.endswith("' TERM") for l in text), path
    roihu, lumi = ((ROOT / f"slurm/{n}.sbatch").read_text() for n in ("take-home", "take-home-lumi"))
    watch = roihu[roihu.index("kill_wait="):roihu.index("# A failed rank")]
    assert watch in lumi  # the watch itself, word for word


def test_take_home_refuses_a_resume_with_another_batch_size(tmp_path):
    """The checkpoint's data position counts batches of the size it was written
    with; a resume with another --batch-size is refused, as step 9 refuses it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC"))}
    env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", OMP_NUM_THREADS="1")
    ckpt = str(tmp_path / "take-home.pt")

    def take_home(*args):
        return subprocess.run([sys.executable, "code/take_home.py", "--checkpoint", ckpt, "--workers", "0", *args],
                              cwd=ROOT, env={**env, "MASTER_PORT": str(_free_port())}, capture_output=True,
                              text=True, timeout=120)
    first = take_home("--epochs", "1")
    assert first.returncode == 0 and torch.load(ckpt)["batch_size"] == 96, first.stdout + first.stderr
    again = take_home("--epochs", "2", "--batch-size", "48")
    assert again.returncode == 1, again.stdout + again.stderr
    assert again.stderr.strip().endswith(f"error: {ckpt} was written by 1 processes with batch size 96: "
                                         "resume with the same, or start afresh with another --checkpoint")


def test_a_lost_node_requeues_the_job_within_60_s(cluster):
    """A node lost mid-job (every process in its namespace killed: slurmd, slurmstepd, ranks),
    as a crash looks to the other node: its ranks fail at once, and srun would wait for the lost
    node's tasks until slurmctld declares it dead (SlurmdTimeout, 300 s; 394 s measured). The
    batch file stops waiting KillWait + 10 s after its own node's tasks have ended and requeues
    the job, which resumes from the last checkpoint once the node is back."""
    (ROOT / "logs").mkdir(exist_ok=True)
    # Both nodes whole (no other test's job shares them), one rank each: the file's lines, at a
    # quarter of the cost
    job = _slurm(cluster, "sbatch", "--parsable", f"--output={ROOT}/logs/job-%j.out", "--exclusive",
                 "--ntasks-per-node=1", "--gres=gpu:gh200:1", "slurm/take-home.sbatch",
                 "--workers", "0", "--epochs", "100").strip()
    lost = None
    try:
        _wait(cluster, job, "epoch 0 loss")  # the checkpoint of epoch 1 is written
        lost = _slurm(cluster, "scontrol", "show", "hostnames",
                      _slurm(cluster, "squeue", "-h", "-j", job, "-o", "%N").strip()).split()[1]
        pids = _slurm(cluster, "ip", "netns", "pids", f"ddp-{lost}").split()
        assert pids, lost
        start = time.monotonic()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        while _slurm(cluster, "squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING":
            assert time.monotonic() - start < 60, f"job {job} still RUNNING 60 s after {lost} was lost:\n{_output(job)}"
            time.sleep(0.2)
        out = _output(job)
        assert "a node is lost: srun still waits" in out and "a node was lost: requeueing job" in out, out
        runs = _slurm(cluster, "sacct", "-D", "-X", "-n", "-j", job, "-o", "State").split()
        assert runs[:1] == ["REQUEUED"], runs  # what the page says sacct shows
        daemons.start_node(lost)  # the node comes back (ReturnToService=2)
        out = _wait(cluster, job, "resumed from")
        assert re.search(r"run 1 of job \d+\n.*resumed from runs/take-home-\d+\.pt: epoch [1-9]", out, re.S), out
    finally:
        _slurm(cluster, "scancel", job, check=False)
        _wait(cluster, job, timeout=90)
        for f in ROOT.glob(f"runs/take-home-{job}.pt*"):
            f.unlink()
        if lost and not daemons.pid_alive(daemons.STATE / f"slurmd-{lost}.pid"):
            daemons.start_node(lost)
