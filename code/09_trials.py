"""Step 9's measurements behind two pieces of advice; they take minutes, so
they are not part of the notebook: run them by hand and commit the JSON they
write, which the notebook shows.

    python code/09_trials.py exits --trials 50 --endings return,error,cleanup
        # how scripts end
    python code/09_trials.py restarts --trials 12
        # torchrun --max-restarts with and without
        # TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1

Each trial is a real `torchrun --standalone --nproc_per_node=2` run of this
file in its worker role (gloo, CPU); the counts go to
benchmarks/09-<experiment>.json.
"""
import argparse
import collections
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# one process of one trial, started by torchrun
if os.environ.get("TRIAL_ROLE") == "worker":
    sys.path.insert(0, str(Path(__file__).parent))
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddp_helpers import ConvNet, load_dataset, setup_distributed

    ending = os.environ["TRIAL_ENDING"]
    rank, _, _, device = setup_distributed(timeout_s=60)
    train, _ = load_dataset("digits")
    model = DDP(ConvNet())
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) > 0
    for step in range(10):  # a few real DDP steps: gloo's threads have worked
        x, y = (train.tensors[0][step * 48:(step + 1) * 48],
                train.tensors[1][step * 48:(step + 1) * 48])
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if ending == "killed" and not restarted and rank == 1 and step == 5:
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
    dist.barrier()
    # what cleanup() does by default now: destroy, then a normal exit
    if ending == "return":
        dist.destroy_process_group()
    # the workaround: destroy, then end without Python's shutdown
    elif ending == "os._exit":
        dist.destroy_process_group()
        sys.stdout.flush()
        os._exit(0)
    elif ending == "no-destroy":  # forgetting destroy_process_group()
        pass
    # an error after init: SystemExit with the group still alive
    elif ending == "error":
        raise SystemExit("error: on purpose")
    elif ending == "cleanup":  # what every script does: ddp_helpers.cleanup()
        from ddp_helpers import cleanup
        cleanup()
    elif ending == "killed":
        if rank == 0:
            print("recovered" if restarted else "never killed", flush=True)
        dist.destroy_process_group()
    sys.exit(0)


def descendants(pid):
    """The processes started by `pid`, and theirs (torchrun gives each worker
    a session of its own)."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def trial(ending, extra_env=None, max_restarts=0, timeout=300):
    """One 2-process torchrun; returns its outcome and the first line that says
    why it failed."""
    env = {k: v for k, v in os.environ.items()
           if k != "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"}
    env.update(TRIAL_ROLE="worker", TRIAL_ENDING=ending, OMP_NUM_THREADS="1",
               **(extra_env or {}))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node=2", f"--max-restarts={max_restarts}", __file__]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # a hang: kill the workers and torchrun
        for pid in descendants(proc.pid) + [proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        out = proc.communicate()[0]
        return "hang", (out.strip().splitlines() or [""])[-1][:200]
    reasons = [line.strip()[:200] for line in out.splitlines() if re.search(
        r"terminate called|connectFullMesh|Connection refused|timed out"
        r"|DistNetworkError|Error:", line)]
    # killed: after the restart
    why = ((reasons[-1] if ending == "killed" else reasons[0])
           if reasons else "")
    if ending == "killed":
        return ("recovered" if proc.returncode == 0 and "recovered" in out
                else "failed"), why
    if "terminate called" in out:
        return "abort at exit", why
    return f"exit code {proc.returncode}", why


def main():
    p = argparse.ArgumentParser()
    p.add_argument("experiment", choices=["exits", "restarts"])
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--endings", default="return,error,cleanup",
                   help="exits: which endings to try "
                   "(also: os._exit, no-destroy)")
    args = p.parse_args()
    import torch
    variants = ({e: (e, None) for e in args.endings.split(",")}
                if args.experiment == "exits" else
                {"default": ("killed", None),
                 "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1": (
                     "killed", {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})})
    counts = {name: collections.Counter() for name in variants}
    # outcome -> the first trial's reason
    examples = {name: {} for name in variants}
    # interleaved: the machine's load affects every variant alike
    for i in range(args.trials):
        for name, (ending, extra) in variants.items():
            outcome, why = trial(ending, extra,
                                 max_restarts=1 if ending == "killed" else 0)
            counts[name][outcome] += 1
            examples[name].setdefault(outcome, why)
            print(f"trial {i + 1}/{args.trials} {name}: {outcome}", flush=True)
    result = {"experiment": args.experiment, "torch": torch.__version__,
              "python": platform.python_version(), "cpus": os.cpu_count(),
              "date": time.strftime("%Y-%m-%d"),
              "counts": {k: dict(v) for k, v in counts.items()},
              "examples": examples}
    out = ROOT / "benchmarks" / f"09-{args.experiment}.json"
    out.parent.mkdir(exist_ok=True)
    # keep the variants measured by earlier runs (each with its own trials)
    if out.exists():
        old = json.loads(out.read_text())
        for name in old.get("counts", {}):
            if name not in variants:
                result["counts"][name], result["examples"][name] = (
                    old["counts"][name], old["examples"][name])
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["counts"], indent=1))


if __name__ == "__main__":
    main()
