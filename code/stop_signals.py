"""Step 9: Slurm's stop signals and the DataLoader workers of a training that
handles them.

Scripts import it as `from stop_signals import ...`; it sits next to them in
code/. Importing it registers end_workers_at_exit() (below), which only a
script whose workers ignore SIGTERM needs.
"""
import atexit
import contextlib
import multiprocessing.resource_tracker
import multiprocessing.util  # noqa: F401 (its exit handler first)
import os
import signal
import subprocess
import time


# --8<-- [start:workers]
# preemption / time limit, and Slurm's warning
STOP_SIGNALS = {signal.SIGTERM, signal.SIGUSR1}


def ignore_stop_signals(worker_id):
    """worker_init_fn for DataLoaders of a training that handles Slurm's
    signals (step 9).

    Slurm signals every process of a job step, loader workers included.
    PyTorch's workers die of SIGTERM (their handler re-raises it), and with
    the spawn or forkserver start method (Python 3.14's default) of USR1 too;
    the main process then fails with "DataLoader worker ... exited
    unexpectedly" before it can save. The main process decides when to stop;
    its workers end when it does.
    """
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    # see stop_signals_blocked()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


@contextlib.contextmanager
def stop_signals_blocked(enabled=True, start_method="fork"):
    """Start loader workers inside this (`iter(loader)`): they begin with the
    signals blocked until ignore_stop_signals() ignores them; a signal in
    between would find PyTorch's handler. This process gets a signal that
    arrived meanwhile when the block ends. Give the loader's `start_method`:
    spawn and forkserver need multiprocessing's resource tracker."""
    if enabled:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        # starting the tracker unblocks SIGTERM: start it, block again
        if start_method != "fork":
            multiprocessing.resource_tracker.ensure_running()
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        if enabled:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def end_workers_at_exit():
    """At exit, multiprocessing stops the loader workers with SIGTERM, which
    they now ignore, and then waits for them forever: a rank that fails (a
    collective's timeout, an error) would hold its job until the time limit.
    Registered after multiprocessing's handler, this one runs first: it ends
    them with SIGKILL (quietly: PyTorch's SIGCHLD handler would report each
    one)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for p in multiprocessing.active_children():
        if p.daemon:
            p.kill()


atexit.register(end_workers_at_exit)
# --8<-- [end:workers]


def children(pid):
    """The process ids whose parent is `pid` (read from /proc: a rank's loader
    workers)."""
    found = []
    for child in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{child}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(child))
        except (OSError, IndexError, ValueError):
            pass
    return found


def signal_like_slurm(name):
    """Send signal `name` (USR1, TERM) to this process and its children (the
    loader workers) at once, from another process, as Slurm signals every
    process of a step; then wait a moment, the rest of a real step. (A worker
    that gets SIGTERM from its own parent just exits.)"""
    subprocess.run(["kill", f"-{name}", str(os.getpid()),
                    *map(str, children(os.getpid()))], check=True)
    time.sleep(0.5)
