"""Step 9: what Slurm's signals do to DataLoader workers, for each
multiprocessing start method.

One process, no training: a loader with 2 workers is iterated, and after 5
batches the signal goes to the process and its workers at once, as Slurm sends
it to every process of a job step. The main process handles it (it only notes
it); the workers keep PyTorch's handlers (--workers-hear default) or run
ignore_stop_signals first (step 9's fix). Each option takes a comma-separated
list: every combination runs in turn, each with a new loader.

spawn and forkserver start each worker as a new Python that imports this file
again, so everything runs under `if __name__ == "__main__":`.
"""
import argparse
import itertools
import re
import signal
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from stop_signals import (ignore_stop_signals, signal_like_slurm,
                          stop_signals_blocked)

# the main process's handler only notes the signal, as step 9's training does
noted = []


def why_worker_died(error):
    """The loader's error, first line, without the pid (it differs per run).
    A SIGCHLD that arrives while the loader waits on its queue raises "is
    killed by signal" inside the loader's own check, which re-raises it as
    "exited unexpectedly" (which one a run gets is a race): the signal's error
    is then the cause, and it is the one that says why."""
    while isinstance(error.__cause__, RuntimeError):
        error = error.__cause__
    return re.sub(r" \(pid \d+\)", "", str(error).splitlines()[0].strip())


def one_case(start_method, send, workers_hear):
    noted.clear()
    ignore = workers_hear == "ignore"
    loader = DataLoader(TensorDataset(torch.arange(400.0)), batch_size=4,
                        num_workers=2, multiprocessing_context=start_method,
                        worker_init_fn=ignore_stop_signals if ignore else None)
    with stop_signals_blocked(ignore, start_method):
        batches = iter(loader)
    i = 0
    try:
        for i, _ in enumerate(batches):
            # a job step: Slurm signals us and the workers
            if i == 5 and send == "slurm":
                print("waiting for Slurm's signal", flush=True)
                while not noted:
                    time.sleep(0.05)
                # the workers got it at the same moment: let them act on it
                time.sleep(0.5)
            elif i == 5:
                signal_like_slurm(send)
        result = f"all {i + 1} batches; main process noted {', '.join(noted)}"
    except RuntimeError as e:  # how the main process learns that a worker died
        result = f"failed after batch {i}:\n{'':9}{why_worker_died(e)}"
    del batches  # ends the workers still alive before the next case
    sent = noted[0][3:] if send == "slurm" and noted else send
    print(f"{start_method:6} SIG{sent:5} workers: {workers_hear:8}"
          f"-> {result}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--start-method", default="fork",
                   help="fork, spawn, forkserver (comma-separated)")
    p.add_argument("--send", default="USR1",
                   help="USR1, TERM or slurm: wait after 5 batches for a "
                   "signal from outside (scancel --signal)")
    p.add_argument("--workers-hear", default="ignore", help="ignore, default")
    args = p.parse_args()
    cases = [a.split(",")
             for a in (args.start_method, args.send, args.workers_hear)]
    allowed_values = (["fork", "spawn", "forkserver"],
                      ["USR1", "TERM", "slurm"], ["ignore", "default"])
    for given, allowed in zip(cases, allowed_values):
        for bad in set(given) - set(allowed):
            p.error(f"{bad!r} is not one of {', '.join(allowed)}")
    for s in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(
            s, lambda signum, frame: noted.append(signal.Signals(signum).name))
    for case in itertools.product(*cases):
        one_case(*case)


if __name__ == "__main__":
    main()
