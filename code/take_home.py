"""Take home: the tutorial's lessons in one file, with no import from it.

Copy it next to your training, replace load_data() and build_model() with
yours, and keep the rest. It runs unchanged on a login node (CPU, gloo), on
one node and on many:
    torchrun --standalone --nproc_per_node=2 take_home.py
    srun python take_home.py  # one task per GPU, MASTER_ADDR/PORT exported
slurm/take-home.sbatch (Roihu) and slurm/take-home-lumi.sbatch (LUMI) requeue
the job when it stops on Slurm's warning; scancel ends it. Each part:
docs/take-home.md.
"""
import argparse
import atexit
import datetime
import hashlib
import multiprocessing.resource_tracker
import multiprocessing.util  # noqa: F401 (its exit handler first)
import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, Subset
from torch.utils.data import TensorDataset

STOPPED = 3  # exit code: stopped on a signal, checkpoint written
STOP_SIGNALS = {signal.SIGUSR1, signal.SIGTERM}  # Slurm's warning; scancel

def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=96,
                   help="global batch, over all ranks")
    p.add_argument("--lr", type=float, default=0.05,
                   help="the learning rate for --lr-batch")
    p.add_argument("--lr-batch", type=int, default=96,
                   help="the global batch that --lr was tuned for")
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--workers", type=int, default=2,
                   help="loader worker processes per rank")
    p.add_argument("--checkpoint", default="runs/take-home.pt",
                   help="resumed from when it exists")
    p.add_argument("--signal-at", type=int,
                   help="a test: the last rank signals itself after this step")
    p.add_argument("--timeout", type=int, default=300,
                   help="seconds before a missing rank is an error")
    return p.parse_args()


def load_data():
    """Yours here. scikit-learn's 8x8 digits stand in (offline, 1,797)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        sys.exit("error: scikit-learn is missing: pip install scikit-learn "
                 "(or load your own data here)")
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16, dtype=torch.float32).view(-1, 1, 8, 8)
    y = torch.tensor(y)
    return TensorDataset(x[:1437], y[:1437]), TensorDataset(x[1437:], y[1437:])


def build_model():
    """Yours here."""
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                         nn.Flatten(), nn.Linear(16 * 64, 10))


def leave(code=0):
    """The last line: leave together. With gloo end through os._exit: a
    normal exit after destroy_process_group() sometimes aborts in gloo's
    threads (exit code 134; step 9)."""
    gloo = dist.get_backend() == "gloo"
    dist.barrier()
    dist.destroy_process_group()
    if gloo:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        os._exit(code)
    sys.exit(code)


def fail(message):  # one line, exit code 1 (after init: not gloo's abort)
    sys.stderr.write(message + "\n")  # one write: ranks' lines never merge
    os._exit(1)


def workers_ignore_signals(worker_id):  # the main process decides (step 9)
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def start_workers(loader):
    """iter(loader), whose first call starts the workers: with Slurm's
    signals blocked, so that they meet none before workers_ignore_signals.
    This process gets a signal that came meanwhile when the block ends."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    # spawn needs multiprocessing's resource tracker, whose start unblocks
    # SIGTERM: start it first, then block again
    multiprocessing.resource_tracker.ensure_running()
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    batches = iter(loader)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    return batches


def end_workers():  # at exit, before multiprocessing's SIGTERM: they ignore it
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for p in multiprocessing.active_children():
        if p.daemon:
            p.kill()


def start_distributed(args):
    """Who am I, on which device, in which process group: (rank, local
    rank, world size, device). Errors are one line before anything starts."""
    # torchrun sets RANK, LOCAL_RANK, WORLD_SIZE; srun alone sets Slurm's
    # names for the same numbers (step 5).
    env = os.environ
    if "RANK" not in env and "SLURM_STEP_ID" in env:
        env["RANK"] = env["SLURM_PROCID"]
        env["LOCAL_RANK"] = env["SLURM_LOCALID"]
        env["WORLD_SIZE"] = env["SLURM_NTASKS"]
        if "MASTER_ADDR" not in env or "MASTER_PORT" not in env:
            sys.exit("error: started by srun without torchrun: export "
                     "MASTER_ADDR and MASTER_PORT before srun")
    if "LOCAL_RANK" not in env:
        sys.exit("error: LOCAL_RANK is not set: start it with torchrun "
                 "(--standalone --nproc_per_node=2) or srun")
    local_rank, world_size = int(env["LOCAL_RANK"]), int(env["WORLD_SIZE"])
    if "SLURM_STEP_ID" in env:  # a world Slurm did not start hangs (step 9)
        per_task = 1
        if "TORCHELASTIC_RUN_ID" in env:  # torchrun: processes per task
            per_task = int(env["LOCAL_WORLD_SIZE"])
        if world_size != int(env["SLURM_NTASKS"]) * per_task:
            fail(f"error: WORLD_SIZE={world_size}, but Slurm started "
                 f"{env['SLURM_NTASKS']} task(s) x {per_task} "
                 f"process(es): with torchrun use one task per node")
    if args.batch_size % world_size:
        fail(f"error: batch size {args.batch_size} is not divisible by "
             f"world size {world_size}")
    # One code path: nccl and a GPU per process where there are GPUs, gloo
    # and the CPU otherwise.
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    try:  # with a timeout, a rank that never arrives is an error, not a hang
        dist.init_process_group(
            "nccl" if device.type == "cuda" else "gloo",
            timeout=datetime.timedelta(seconds=args.timeout))
    except dist.DistError as e:  # a port in use, a missing rank: one line
        where = f"{env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}"
        sys.exit(f"error: no process group at {where}: "
                 f"{str(e).strip().splitlines()[0][:200]}")
    if device.type == "cpu":
        dist.barrier()  # let torch 2.10's gloo finish printing its connections
    return dist.get_rank(), local_rank, world_size, device


def main():
    args = parse_args()
    rank, local_rank, world_size, device = start_distributed(args)
    batch = args.batch_size // world_size

    def say(*a):  # one line from rank 0, not one per rank
        if rank == 0:
            print(*a, flush=True)

    # Slurm's warning (USR1: requeue) and SIGTERM (scancel, preemption, the
    # time limit: the end) reach every process of the step: note it, and stop
    # at the end of the current step.
    stop = []
    for s in STOP_SIGNALS:
        signal.signal(s, lambda signum, frame: stop.append(signum))
    atexit.register(end_workers)  # else a failed rank waits for them forever

    torch.manual_seed(0)  # the same initial weights on every rank
    train, test = load_data()
    sampler = DistributedSampler(train, seed=0)  # each rank its own shard
    steps = -(-len(sampler) // batch)  # batches per epoch and rank
    model = build_model().to(device)
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda"
                else None)
    lr = args.lr * args.batch_size / args.lr_batch  # linear in the batch
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    ramp = lambda step: min(1.0, (step + 1) / (args.warmup_steps + 1))
    warmup = torch.optim.lr_scheduler.LambdaLR(opt, ramp)
    say(f"{world_size} processes, backend {dist.get_backend()}, device "
        f"{device.type}, batch {args.batch_size} = {world_size} x {batch}, "
        f"lr {lr:.4f}")

    # Resume: the same weights, optimizer, schedule and place in the data.
    marker = args.checkpoint + ".requeue"  # "stopped on the warning": requeue
    if rank == 0 and os.path.exists(marker):
        os.remove(marker)
    start_epoch, start_step = 0, 0
    done = 0.0  # this epoch's losses summed over every rank, before a resume
    if os.path.exists(args.checkpoint):
        ckpt = torch.load(args.checkpoint, map_location="cpu")
        # its data position counts batches of this size on this many ranks
        was = (ckpt["world_size"], ckpt["batch_size"])
        if was != (world_size, args.batch_size):
            fail(f"error: {args.checkpoint} was written by {was[0]} "
                 f"processes with batch size {was[1]}: resume with the "
                 f"same, or start afresh with another --checkpoint")
        model.module.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        warmup.load_state_dict(ckpt["warmup"])
        start_epoch, start_step = ckpt["epoch"], ckpt["step"]
        done = ckpt.get("loss_sum", 0.0)
        say(f"resumed from {args.checkpoint}: epoch {start_epoch}, "
            f"step {start_step}")

    def save(epoch, step, loss_sum=0.0):
        if rank == 0:  # one writer: the weights are the same on every rank
            os.makedirs(os.path.dirname(args.checkpoint) or ".",
                        exist_ok=True)
            state = {"model": model.module.state_dict(), "epoch": epoch,
                     "optimizer": opt.state_dict(), "step": step,
                     "warmup": warmup.state_dict(), "world_size": world_size,
                     "batch_size": args.batch_size, "loss_sum": loss_sum}
            with open(args.checkpoint + ".tmp", "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())  # on disk, not only in the page cache
            # atomic: the old file or the new one, never half of one
            os.replace(args.checkpoint + ".tmp", args.checkpoint)
        dist.barrier()

    # One loader for every epoch, so its workers start once. Its sampler is
    # a list that each epoch refills with the indices still to read.
    rest = []
    loader = DataLoader(train, batch_size=batch, sampler=rest,
                        num_workers=args.workers,
                        persistent_workers=args.workers > 0,
                        worker_init_fn=workers_ignore_signals,
                        # spawn, not fork: a process forked from one with
                        # threads (gloo's, NCCL's) can deadlock at birth
                        multiprocessing_context="spawn" if args.workers
                        else None)
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)  # without it every epoch reads one order
        rest[:] = list(sampler)[start_step * batch:]  # minus the batches done
        batches = start_workers(loader)
        losses, flag = [], torch.zeros(1, device=device)
        for step, (x, y) in enumerate(batches, start=start_step):
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            warmup.step()
            losses.append(loss.item())
            at = epoch * steps + step + 1
            if args.signal_at == at and rank == world_size - 1:
                os.kill(os.getpid(), signal.SIGUSR1)
            # Every rank stops after the same step: did any rank get one? 2:
            # the warning (requeue), 1: SIGTERM alone (scancel: stop for good)
            flag = torch.tensor([2.0 if signal.SIGUSR1 in stop else
                                 float(bool(stop))], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if flag.item():
                break
        # the epoch's losses, every rank's, the steps before a resume too
        total = torch.tensor(sum(losses), dtype=torch.float64, device=device)
        dist.all_reduce(total)
        total = total.item() + done
        if flag.item():
            save(epoch, step + 1, total)
            requeue = flag.item() == 2  # the batch script requeues on it
            if rank == 0 and requeue:
                open(marker, "w").close()
            say(f"stopped in epoch {epoch} after step {step + 1} on a "
                f"signal: checkpoint written, exit {STOPPED}"
                + ("" if requeue else " (SIGTERM, no warning: no requeue)"))
            leave(STOPPED)
        start_step, done = 0, 0.0
        save(epoch + 1, 0)  # a crash without warning loses one epoch at most
        say(f"epoch {epoch} loss {total / (world_size * steps):.4f}")

    # Evaluation without duplicates (step 4): each rank counts its own
    # slice of the test set, and the counts are summed.
    model.eval()
    counts = torch.zeros(2, device=device)  # correct, seen
    mine = Subset(test, range(rank, len(test), world_size))
    with torch.no_grad():
        for x, y in DataLoader(mine, batch_size=256):
            counts[0] += (model(x.to(device)).argmax(1) == y.to(device)).sum()
            counts[1] += len(y)
    dist.all_reduce(counts)
    assert int(counts[1]) == len(test)  # every test image counted once
    correct = int(counts[0])
    say(f"test accuracy {correct / len(test):.4f} ({correct}/{len(test)})")
    # A fingerprint of the weights: compare an interrupted run with another.
    weights = model.module.state_dict().values()
    digest = hashlib.sha256(b"".join(v.cpu().numpy().tobytes()
                                     for v in weights))
    say(f"weights sha256 {digest.hexdigest()[:16]}")
    leave(0)


# A spawned loader worker imports this file again: it needs the functions
# above, and must not train.
if __name__ == "__main__":
    main()
