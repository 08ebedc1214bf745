"""Step 9: training that survives preemption, time limits and lost processes.

Slurm warns a job before its time limit (USR1, the signal the batch script asks
for) and sends SIGTERM at preemption, at the time limit and on scancel. Every
rank catches both; at the end of the current step the ranks agree (an
all_reduce of a flag), write one consistent checkpoint in the middle of the
epoch and exit with code 3. After the warning rank 0 also writes a marker
beside it, and the batch script requeues the job when it finds the marker;
SIGTERM alone (scancel) ends the job. Slurm signals every process of the step,
loader workers too: they ignore it. A checkpoint is also written at the end of
every epoch, for the failures that give no warning (a killed process). At
start every rank resumes from the checkpoint if there is one, and the run ends
with the weights of an uninterrupted run: bitwise with 2 processes, up to
float rounding with more (a new DDP's first all-reduce sums the gradients in
another order). That holds on CPU; on a GPU only with --deterministic (cuDNN's
default kernels are not: an H100 resumed to other weights, with the same
losses to 4 decimals).
"""
import argparse
import hashlib
import os
import signal

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddp_helpers import (ConvNet, accuracy, assert_replicas_equal, cleanup,
                         fail, load_dataset, mean_over_ranks, per_rank_batch,
                         print0, setup_distributed, weights_fingerprint)
from stop_signals import (ignore_stop_signals, signal_like_slurm,
                          stop_signals_blocked)

STOPPED = 3  # exit code: stopped on a signal, checkpoint written

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=10)
p.add_argument("--batch-size", type=int, default=96,
               help="global batch, over all ranks")
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--dropout", type=float, default=0.1,
               help="random numbers that differ per rank")
p.add_argument("--seed", type=int, default=0)
p.add_argument("--dataset", default="digits")
p.add_argument("--data-dir", default="data")
p.add_argument("--checkpoint", default="runs/09-checkpoint.pt",
               help="resume from it if it exists")
p.add_argument("--workers", type=int, default=2,
               help="DataLoader worker processes per rank")
p.add_argument("--worker-signals", default="ignore",
               choices=["ignore", "default"],
               help="default: workers keep PyTorch's handlers and die of "
               "SIGTERM (the pitfall)")
p.add_argument("--signal-at", type=int,
               help="after this many steps the last rank sends the signal "
               "to itself and its loader workers (a preemption you can "
               "reproduce)")
p.add_argument("--send", default="USR1", choices=["USR1", "TERM"],
               help="the signal --signal-at sends")
p.add_argument("--save", help="write the trained weights here (rank 0)")
p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
p.add_argument("--timeout", type=int, default=300,
               help="seconds before a missing rank is an error")
p.add_argument("--deterministic", action="store_true",
               help="deterministic GPU kernels only (slower): a resumed run "
               "then equals an uninterrupted one bitwise")
args = p.parse_args()
os.makedirs(os.path.dirname(args.checkpoint) or ".", exist_ok=True)
# "stopped on the warning, checkpoint written": requeue
requeue_marker = args.checkpoint + ".requeue"

# --8<-- [start:signal]
# set by the handler; the training loop checks it after every step
stop_signal = None


# Python runs it in the main thread, between two statements
def request_stop(signum, frame):
    global stop_signal
    # a SIGTERM after the warning keeps it: the marker is still written
    if stop_signal != "SIGUSR1":
        stop_signal = signal.Signals(signum).name


# Slurm's warning: #SBATCH --signal=USR1@120
signal.signal(signal.SIGUSR1, request_stop)
# preemption, the time limit, scancel: no requeue
signal.signal(signal.SIGTERM, request_stop)
# --8<-- [end:signal]


# --8<-- [start:deterministic]
if args.deterministic:  # before CUDA starts: cuBLAS reads this once
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # an op without a deterministic kernel: an error
    torch.use_deterministic_algorithms(True)
    # no autotuning: the same kernels in every run
    torch.backends.cudnn.benchmark = False
    # and only cuDNN's deterministic convolutions
    torch.backends.cudnn.deterministic = True
# --8<-- [end:deterministic]
rank, local_rank, world_size, device = setup_distributed(
    args.backend, timeout_s=args.timeout)
batch = per_rank_batch(args.batch_size, world_size)
torch.manual_seed(args.seed)  # the same initial weights on every rank
train, test = load_dataset(args.dataset, args.data_dir)
sampler = DistributedSampler(train, seed=args.seed)
# batches per epoch and rank
steps = len(sampler) // batch + bool(len(sampler) % batch)
model = ConvNet(image_size=train[0][0].shape[-1])
# after the first convolution, as in step 2
model.features.insert(1, nn.Dropout(args.dropout))
model = DDP(model.to(device),
            device_ids=[local_rank] if device.type == "cuda" else None)
# step 2: after the weights, a generator per rank
torch.manual_seed(args.seed + 1000 * rank)
# The loader gets a generator of its own: every new loader iterator draws a
# number from the generator it is given, the global one by default, and a
# resumed run starts one more.
loader_rng = torch.Generator().manual_seed(args.seed + 1000 * rank)
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
print0(f"{world_size} processes, "
       f"backend {dist.get_backend()}, device {device.type}, "
       f"batch {args.batch_size} = {world_size} x {batch}"
       + (", deterministic" if args.deterministic else ""))


# --8<-- [start:save]
def save_checkpoint(epoch, step, loss_sum):
    """Everything the next step depends on, from every rank, in one file that
    rank 0 writes."""
    # this rank's own random state and loss so far
    mine = {"torch_rng": torch.get_rng_state(),
            "loader_rng": loader_rng.get_state(),
            "cuda_rng": (torch.cuda.get_rng_state(device)
                         if device.type == "cuda" else None),
            "loss_sum": loss_sum}
    ranks = [None] * world_size if rank == 0 else None
    dist.gather_object(mine, ranks, dst=0)
    if rank == 0:  # one writer; the weights are the same on every rank
        state = {"model": model.module.state_dict(),
                 "optimizer": opt.state_dict(),
                 "scheduler": sched.state_dict(), "epoch": epoch,
                 "step": step, "history": history,
                 "world_size": world_size, "batch_size": args.batch_size,
                 "ranks": ranks}
        with open(args.checkpoint + ".tmp", "wb") as f:
            torch.save(state, f)
            f.flush()
            # on disk before the rename: a node dying now keeps either file
            os.fsync(f.fileno())
        # atomic: old or new, never half
        os.replace(args.checkpoint + ".tmp", args.checkpoint)
    dist.barrier()  # nobody runs ahead of a checkpoint that is not written yet
# --8<-- [end:save]


# --8<-- [start:resume]
start_epoch, start_step, loss_sum, history = 0, 0, 0.0, []
if rank == 0 and os.path.exists(requeue_marker):
    # this run decides anew whether the job goes back in the queue
    os.remove(requeue_marker)
if os.path.exists(args.checkpoint):
    # map_location="cpu": tensors saved from cuda:0 would otherwise all land
    # on GPU 0. load_state_dict then copies them to this rank's device.
    ckpt = torch.load(args.checkpoint, map_location="cpu")
    if ((ckpt["world_size"], ckpt["batch_size"])
            != (world_size, args.batch_size)):
        fail(f"error: {args.checkpoint} was written by "
             f"{ckpt['world_size']} processes with batch size "
             f"{ckpt['batch_size']}; resume it with the same, "
             f"or start afresh with another --checkpoint")
    model.module.load_state_dict(ckpt["model"])
    # momentum buffers: without them, not the same run
    opt.load_state_dict(ckpt["optimizer"])
    sched.load_state_dict(ckpt["scheduler"])
    mine = ckpt["ranks"][rank]  # this rank's own random numbers, not rank 0's
    torch.set_rng_state(mine["torch_rng"])
    loader_rng.set_state(mine["loader_rng"])
    if device.type == "cuda":
        torch.cuda.set_rng_state(mine["cuda_rng"], device)
    start_epoch, start_step, loss_sum, history = (
        ckpt["epoch"], ckpt["step"], mine["loss_sum"], ckpt["history"])
    print0(f"resumed from {args.checkpoint}: epoch {start_epoch}, "
           f"{start_step} of {steps} batches done")
# --8<-- [end:resume]

last_mask = {}  # this rank's dropout mask of the last step: checked at the end
model.module.features[1].register_forward_hook(
    lambda m, inputs, out: last_mask.update(m=out == 0))
stopped = False
# --8<-- [start:loop]
# One loader for every epoch: its workers are forked once, at the first
# iter(). A worker forked beside gloo's threads (they exist by then) can hang
# at birth: one fork per rank lowers the odds, spawning removes them (the
# take-home script). Its sampler is a list each epoch refills with the data
# still to read.
rest = []
# the workers must outlive Slurm's signals
ignore = args.worker_signals == "ignore"
# fork, asked for: Python 3.14's default (forkserver) would run this file
# again in each worker
loader = DataLoader(train, batch_size=batch, sampler=rest,
                    generator=loader_rng, num_workers=args.workers,
                    persistent_workers=args.workers > 0,
                    multiprocessing_context=(
                        "fork" if args.workers else None),
                    worker_init_fn=ignore_stop_signals if ignore else None)
for epoch in range(start_epoch, args.epochs):
    sampler.set_epoch(epoch)
    # The data position: this epoch's indices for this rank, minus the batches
    # already done.
    rest[:] = list(sampler)[start_step * batch:]
    with stop_signals_blocked(ignore):  # the first epoch's starts the workers
        batches = iter(loader)
    for step, (x, y) in enumerate(batches, start=start_step):
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss_sum += loss.item()
        if (args.signal_at == epoch * steps + step + 1
                and rank == world_size - 1):
            signal_like_slurm(args.send)  # one rank: the others must learn it
        # Each rank may get the signal at another moment: all stop at the
        # same step if any got it (2 if any got the warning: requeue; 1 for
        # SIGTERM alone: stop for good).
        stop = torch.tensor(
            float({None: 0, "SIGTERM": 1, "SIGUSR1": 2}[stop_signal]),
            device=device)
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        if stop.item():
            stopped = True
            break
    if stopped:
        save_checkpoint(epoch, step + 1, loss_sum)
        requeue = stop.item() == 2  # the warning: the batch script requeues
        # after the checkpoint: the marker promises that it exists
        if rank == 0 and requeue:
            with open(requeue_marker, "w") as f:
                f.write(f"stopped in epoch {epoch} after batch {step + 1} "
                        f"({stop_signal or 'another rank'})\n")
        print0(f"stopped in epoch {epoch} after batch {step + 1} of {steps} "
               f"on a signal ({stop_signal or 'from another rank'}): "
               f"checkpoint written, exit code {STOPPED}"
               + ("" if requeue
                  else " (SIGTERM without a warning: no requeue)"))
        cleanup(exit_code=STOPPED)
    # --8<-- [end:loop]
    sched.step()
    # a collective: all ranks
    history.append(round(mean_over_ranks(loss_sum / steps), 4))
    start_step, loss_sum = 0, 0.0
    # the end of an epoch: for failures without a warning
    save_checkpoint(epoch + 1, 0, 0.0)

assert_replicas_equal(model)
# (none when a finished run is started again: it trains nothing)
masks = [None] * world_size
mine = (hashlib.sha256(last_mask["m"].cpu().numpy().tobytes()).hexdigest()[:8]
        if last_mask else "-")
dist.all_gather_object(masks, mine)
assert world_size == 1 or not last_mask or len(set(masks)) == world_size, (
    f"ranks share dropout masks: {masks}")
if rank == 0:
    # The full history comes from the checkpoint, so a resumed run prints the
    # same lines.
    for epoch, loss in enumerate(history):
        print(f"epoch {epoch} loss {loss:.4f}")
    print(f"last dropout masks, one per rank: {' '.join(masks)}")
    print(f"weights sha256 {weights_fingerprint(model.module)}")
    print(f"test accuracy {accuracy(model.module, test, device):.4f}")
    if args.save:
        torch.save(model.module.state_dict(), args.save)
cleanup()
