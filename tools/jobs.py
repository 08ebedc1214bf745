"""Run the tutorial's real scripts and sbatch files from a notebook, and show what they print.

    import sys; sys.path.insert(0, "../tools")
    from jobs import run, submit
    out = run("torchrun --standalone --nproc_per_node=2 code/01_ddp.py")
    job = submit("slurm/01-ddp.sbatch")

Commands run from the repository root, so paths read the same as in the README. A failing
command or job raises, so a notebook (and the test suite that executes it) stops right there.

A job's end prints the same on the practice cluster and on a real one, from its record
(sacct's and scontrol's State and ExitCode, which is "code:signal"): "job N ended with exit code
C" when its batch script exited with C, "job N was killed by signal S (SIGKILL)" when a signal
ended the script (where `sbatch --wait` would say 1 and a shell 128 + S, neither of them the
signal), and "job N ended with Slurm state TIMEOUT" (CANCELLED, NODE_FAIL, ...) when Slurm ended
the job, whose ExitCode then depends on whether slurmctld or the accounting database is asked.
"""
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for folder in ("runs", "logs"):  # weights; jobs' output, also where a cell's own sbatch puts it
    (ROOT / folder).mkdir(exist_ok=True)  # (git ignores both)


# --8<-- [start:pinned]
# The CPU's numeric path, the same on every x86-64 machine with AVX2,
# Intel or AMD: PyTorch's kernels as compiled for AVX2 (not
# AVX-512 where the CPU has it), oneDNN's convolutions capped at AVX2,
# MKL's matrix products on its reproducible branch, one thread per
# process (a sum split over threads changes its last bits). Local runs
# and practice-cluster jobs use it, so a login node prints the pages'
# digits. It cannot reach aarch64 (Roihu's GH200 nodes) or GPUs.
PINNED_CPU_PATH = {"ATEN_CPU_CAPABILITY": "avx2",
                   "ONEDNN_MAX_CPU_ISA": "AVX2",
                   "MKL_CBWR": "COMPATIBLE",
                   "OMP_NUM_THREADS": "1"}
# Local runs use the CPU even where the session has a GPU (Roihu's web
# Jupyter on gputest): two processes on one GPU would pick nccl and stop.
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "",
            "ROCR_VISIBLE_DEVICES": ""}


def pinned_cpu_path():
    """PINNED_CPU_PATH on x86-64; nothing elsewhere (meaningless there)."""
    x86 = platform.machine() in ("x86_64", "AMD64")
    return dict(PINNED_CPU_PATH) if x86 else {}
# --8<-- [end:pinned]


def _env(local=False, pinned=False):
    """The environment of a command: the notebook's own Python (the project's virtualenv) first
    on PATH (python, torchrun, ...). local: a run on this machine, on its CPU, with the pinned
    numeric path; pinned: the pinned path alone (a practice-cluster job: its nodes are this
    machine; a real cluster's jobs get neither)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("OMP_NUM_THREADS", "1")  # what torchrun would set; 2 processes share few cores
    if local or pinned:
        env.update(pinned_cpu_path())
    if local:
        env.update(CPU_ONLY)
    return env


def where_local_runs_go():
    """One line: where run() runs its commands (printed by a notebook's first cell)."""
    where = "local runs: this machine's CPU (gloo), whatever GPUs it has; "
    if pinned_cpu_path():
        return where + "numeric path pinned: any x86-64 CPU prints the pages' digits"
    return where + f"{platform.machine()}: the last digits may differ from the pages'"


# torch 2.10's gloo announces every connection on stdout, "[Gloo] Rank 0 is connected to 1 peer
# ranks. Expected number of connected peer ranks is : 1", in several writes that the ranks'
# copies interleave at random (pytorch/gloo issue 462; gone in later releases). The notebooks
# leave these lines out, so that what they show is the same every run.
_GLOO = ("[Gloo] Rank ", " is connected to ", " peer ranks. ", "Expected number of connected peer ranks is : ")


def without_gloo_lines(text):
    if _GLOO[0] not in text:
        return text
    for piece in _GLOO:
        text = text.replace(piece, "")
    # What is left of them: their numbers, after the labels srun --label and torchrun --tee add.
    # (Pieces of two ranks' lines can also leave a bare newline: drop the empty lines as well.)
    return re.sub(r"^(?:\d+: )?(?:\[default\d+\]:)?\d*\n", "", text, flags=re.M)


def _show(text, grep):
    if callable(grep):  # a function of the whole output: it returns what to show
        shown = grep(text)
        print(shown + ("\n" if shown and not shown.endswith("\n") else ""), end="")
        return
    lines = text.splitlines(keepends=True)
    print("".join(lines if grep is None else sorted({l for l in lines if grep in l})), end="")


_told = False


def run(cmd, check=True, timeout=300, grep=None):
    """Run a shell command from the repository root; print and return its output.

    grep: print only the distinct lines containing this text, sorted (e.g. "error:" to show why
    a run failed without the launcher's tracebacks; ranks print in any order, so sorting keeps
    the shown output stable); or, a function, what it returns for the whole output. Then "(exit code N)" if it failed, after
    what it describes. The whole output is still returned.
    """
    global _told
    if not _told:  # once per notebook: where its local runs go
        print(f"({where_local_runs_go()})")
        _told = True
    print(f"$ {cmd}")
    r = subprocess.run(cmd, shell=True, cwd=ROOT, env=_env(local=True), timeout=timeout,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    r.stdout = without_gloo_lines(r.stdout)
    _show(r.stdout, grep)
    if r.returncode:
        print(f"(exit code {r.returncode})")
    if check and r.returncode != 0:
        if grep is not None:  # the filter may have hidden why: show the end of the whole output
            print("".join(r.stdout.splitlines(keepends=True)[-40:]), end="")
        raise RuntimeError(f"command failed with exit code {r.returncode}: {cmd}")
    return r.stdout


def job_output(job_id):
    return without_gloo_lines((ROOT / "logs" / f"job-{job_id}.out").read_text())


def submit(sbatch_file, *options, check=True, grep=None):
    """Submit an sbatch file unchanged, wait for the job, print and return its output.

    On a login node this is your real cluster: set SBATCH_ACCOUNT=project_... first (sbatch
    reads it). There it says where the job goes, shows its place in the queue while it waits,
    and stops waiting after JOBS_WAIT_LIMIT seconds (job_result(id) reads it later). In the
    tests it is the practice cluster, and the cells print what they always printed.
    grep: as in run(), print only the distinct lines containing this text, sorted.
    """
    if not _practice():
        return _submit_and_watch(sbatch_file, options, check, grep)
    job_id, _ = _sbatch([*options, sbatch_file])
    for _ in _poll(job_id):  # until it has ended, through requeues
        pass
    return _result(job_id, check, grep)


def _sbatch(args):
    """sbatch ARGS (options, the file, the script's arguments) from the repository root, the
    job's output in logs/; prints the command as a reader types it. Returns (job id, sbatch's
    exit code)."""
    (ROOT / "logs").mkdir(exist_ok=True)
    cmd = ["sbatch", "--parsable", f"--output={ROOT}/logs/job-%j.out", *args]
    print(f"$ sbatch {' '.join(args)}")
    r = subprocess.run(cmd, cwd=ROOT, env=_env(pinned=_practice()), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    m = re.match(r"(\d+)", r.stdout)
    if not m:
        raise RuntimeError(f"sbatch refused the job: {r.stderr.strip()}")
    return m.group(1), r.returncode


def numbers(pattern, text):
    """All floats captured by `pattern` in `text`: to compare printed results."""
    return [float(x) for x in re.findall(pattern, text)]


def start(sbatch_file, *args, options=()):
    """Submit an sbatch file without waiting; return the job id (step 11: a job to inspect while
    it runs). `args` come after the file: sbatch passes them to the batch script ("$@");
    `options` before it, to sbatch itself (step 5: ["--begin=now+25"])."""
    job_id, _ = _sbatch([*options, sbatch_file, *args])
    print(f"job {job_id} submitted")
    return job_id


def queue_state(job_id, until=None, timeout=60):
    """squeue's state and reason, "PENDING (Dependency)", once the scheduler has looked at the
    job (just submitted, it shows PENDING without a reason for a moment); with `until`, once
    the reason is that one. The final state if the job ends first."""
    for state, reason, waited in _poll(job_id):
        done = reason == until if until else (state != "PENDING" or reason not in ("", "None"))
        if done or waited > timeout:
            return _queued(state, reason)
    return _exit_status(job_id)[0] or ""


def wait_job(job_id, until=None, timeout=300):
    """Wait until the job has ended or, with `until`, until its output contains that text;
    return its output so far. Raises if the time runs out, or the job ends first."""
    for _, _, waited in _poll(job_id):
        out = _output_so_far(job_id)
        if until is not None and until in out:
            return out
        if waited > timeout:
            raise RuntimeError(f"job {job_id}: still waiting after {timeout} s")
    out = _output_so_far(job_id)
    if until is None or until in out:
        return out
    state = _exit_status(job_id)[0]
    raise RuntimeError(f"job {job_id} ended ({state or 'left the queue'}) before printing {until!r}:\n{out}")


def _output_so_far(job_id):
    path = ROOT / "logs" / f"job-{job_id}.out"
    return without_gloo_lines(path.read_text()) if path.exists() else ""


# --8<-- [start:queue]
# On a real cluster (not the tests' practice cluster, whose stored outputs stay as they are):
# say where a job goes, refuse the batch scripts' placeholder projects before submitting, show
# squeue's state and reason while the job waits, and stop waiting after JOBS_WAIT_LIMIT seconds.
# On both: one wait for a job (_poll) and one way to say how it ended (_how_it_ended).
PLACEHOLDER_ACCOUNTS = ("project_2001234", "project_462000000")  # in slurm/*.sbatch
# Every state that ends a job (sacct's JOB STATE CODES); the others (PENDING, RUNNING, REQUEUED,
# COMPLETING, SUSPENDED, ...) come before an end.
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "BOOT_FAIL", "DEADLINE", "PREEMPTED")


def _practice():
    """True on the tests' practice cluster (tools/practice_cluster/, ClusterName=practice), unless
    JOBS_AS_REAL_CLUSTER=1 (the tests of the real-cluster path)."""
    if os.environ.get("JOBS_AS_REAL_CLUSTER") == "1":
        return False
    try:
        return "ClusterName=practice" in Path(os.environ["SLURM_CONF"]).read_text()
    except (KeyError, OSError):
        return False


def _sbatch_setting(name, short, options, sbatch_file):
    """Where sbatch takes --account / --partition from: options, then SBATCH_*, then the file."""
    for i, opt in enumerate(options):
        if opt.startswith(f"--{name}="):
            return opt.split("=", 1)[1], "option"
        if opt in (f"--{name}", short) and i + 1 < len(options):
            return options[i + 1], "option"
    if os.environ.get(f"SBATCH_{name.upper()}"):
        return os.environ[f"SBATCH_{name.upper()}"], f"SBATCH_{name.upper()}"
    text = (ROOT / sbatch_file).read_text() if (ROOT / sbatch_file).exists() else ""
    m = re.search(rf"^#SBATCH\s+(?:--{name}=|{short}\s+)(\S+)", text, flags=re.M)
    return (m.group(1), sbatch_file) if m else (None, None)


def _squeue(job_id):
    r = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T|%r"], env=_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    state, _, reason = r.stdout.strip().partition("|")
    return state, reason


def _queued(state, reason):
    return state + (f" ({reason})" if reason and reason != "None" else "")


def _poll(job_id, every=None):
    """The one wait for a job, which every function here that waits is built on: squeue's
    (state, reason, seconds waited) at each look while the job has not ended. It stops once
    squeue shows one of FINAL, or once the job has left squeue's list (MinJobAge after its end)
    and its record says it has ended or no record is found (a record still RUNNING: the
    accounting database is a moment behind, or squeue did not answer). A requeued job has not
    ended. every(waited): seconds to the next look; 0.2 on the practice cluster (sbatch --wait
    looks every 2 s: the suite's ~150 jobs would wait ~1 s longer each), else 1 (a real
    cluster's slurmctld serves everyone)."""
    start_time = time.monotonic()
    while True:
        state, reason = _squeue(job_id)
        if not state:
            state, reason = _exit_status(job_id)[0] or "", ""
        if state in ("", *FINAL):
            return
        waited = time.monotonic() - start_time
        yield state, reason, waited
        time.sleep(every(waited) if every else 0.2 if _practice() else 1)


# A job's record, with ExitCode as "code:signal" (the batch script's exit status, or the signal
# that ended it): slurmctld's while it still holds the job, then the accounting database's.
_RECORDS = {"scontrol": (["scontrol", "-o", "show", "job"], r"(?:^|\s)JobState=(\S+)\s.*?\sExitCode=(\d+):(\d+)"),
            "sacct": (["sacct", "-n", "-X", "-P", "-o", "State,ExitCode", "-j"], r"^(\w+)[^|\n]*\|(\d+):(\d+)")}


def _record(source, text):
    """(state, exit code, signal) from scontrol's or sacct's answer, or None."""
    m = re.search(_RECORDS[source][1], text, flags=re.M)
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else None


def _exit_status(job_id, sources=("scontrol", "sacct")):
    """(state, exit code, signal) of a job from the first source that knows it, else Nones."""
    for source in sources:
        r = subprocess.run([*_RECORDS[source][0], job_id], env=_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
        record = _record(source, r.stdout)
        if record:
            return record
    return None, None, None


def wait_recorded(job_id, timeout=30):
    """(state, exit code, signal) from the accounting database (what sacct shows), once its record
    of the job has ended: slurmctld sends the record to slurmdbd a moment after the job ends, and
    under load a FAILED state may be stored before its exit code (seen once: 0:0). After
    `timeout` seconds, the record as it is."""
    deadline = time.monotonic() + timeout
    while True:
        record = _exit_status(job_id, sources=("sacct",))
        if (record[0] in FINAL and not (record[0] == "FAILED" and not any(record[1:]))
                or time.monotonic() > deadline):
            return record
        time.sleep(0.2)


def _how_it_ended(state, code, sig):
    """What follows "job N " (the module's docstring says why): the exit code or the signal where
    the batch script ended the job, Slurm's state where Slurm did."""
    if state is None:
        return "ended with exit code unknown"
    if state == "FAILED" and sig:
        try:
            return f"was killed by signal {sig} ({signal.Signals(sig).name})"
        except ValueError:  # a number Python has no name for
            return f"was killed by signal {sig}"
    if state == "COMPLETED" or (state == "FAILED" and code):
        return f"ended with exit code {code}"
    return f"ended with Slurm state {state}"


def _result(job_id, check, grep):
    """How an ended job ended and its output, printed and returned; with check, raises unless
    it completed."""
    state, code, sig = _exit_status(job_id)
    how = _how_it_ended(state, code, sig)
    out = job_output(job_id)
    print(f"job {job_id} {how}; its output:")
    _show(out, grep)
    if check and state != "COMPLETED":
        raise RuntimeError(f"job {job_id} {how}")
    return out


def _submit_and_watch(sbatch_file, options, check, grep):
    cluster = re.search(r"ClusterName\s*=\s*(\S+)", subprocess.run(
        ["scontrol", "show", "config"], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True).stdout)
    account, source = _sbatch_setting("account", "-A", options, sbatch_file)
    partition, _ = _sbatch_setting("partition", "-p", options, sbatch_file)
    if account is None or (account in PLACEHOLDER_ACCOUNTS and source == sbatch_file):
        why = f"{sbatch_file} names the placeholder {account}" if account else "none is set"
        raise SystemExit(f"error: no project account for the job ({why}): run "
                         "%env SBATCH_ACCOUNT=project_<number> in a cell (your project), then this cell again")
    print(f"cluster {cluster.group(1) if cluster else '?'}, partition {partition or '(default)'}, "
          f"account {account} (from {source})")
    job_id, _ = _sbatch([*options, sbatch_file])
    if not watch(job_id, float(os.environ.get("JOBS_WAIT_LIMIT", 1800)), "JOBS_WAIT_LIMIT"):
        state, _ = _squeue(job_id)
        raise SystemExit(f"job {job_id} is still {state}: read it later with job_result(\"{job_id}\")")
    return job_result(job_id, check=check, grep=grep)


def watch(job_id, limit, why=None):
    """While the job is in the queue, show squeue's state and reason and the time waited; True
    once it has ended, False if it is still there after `limit` seconds (it stays queued)."""
    shown = None
    for state, reason, waited in _poll(job_id, every=lambda waited: 2 if waited < 30 else 10):
        waited = int(waited)
        status = f"job {job_id}: {_queued(state, reason)}"
        # One line per state; the time on it is rewritten in place (\r), not printed again.
        print(("\n" if shown not in (None, status) else "\r") + f"{status}, {waited // 60}:{waited % 60:02d} waited",
              end="", flush=True)
        shown = status
        if waited >= limit:
            print(f"\nstopped waiting after {int(limit)} s{f' ({why})' if why else ''}; the job stays in the queue.\n"
                  f"Later: job_result(\"{job_id}\") in a cell prints its output (squeue -j {job_id} shows it meanwhile).")
            return False
    if shown is not None:
        print()
    return True


def job_result(job_id, check=True, grep=None):
    """A submitted job's output, by its id: prints how it ended and its output, as submit() does
    (a cell that stopped waiting can pick the job up later). None while the job is still queued."""
    job_id = str(job_id)
    for state, reason, _ in _poll(job_id):  # one look
        print(f"job {job_id} is {_queued(state, reason)}: not finished yet, try again later")
        return None
    return _result(job_id, check, grep)
# --8<-- [end:queue]
