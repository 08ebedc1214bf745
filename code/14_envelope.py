"""Step 14: the back of the envelope, from measurements. Counts the FLOPs of
one training step of step 14's model at its batch (forward and backward,
torch.utils.flop_counter.FlopCounterMode), times that compute on every rank at
once to get the FLOP/s this machine reaches, measures an all-reduce's fixed
cost (4 bytes, after each step's compute) and, given the bus bandwidth step
11's talk test measured at a large size, predicts the all-reduce of the
model's gradients:

    torchrun --standalone --nproc_per_node=2 code/11_talk.py --sizes 4,16M
    torchrun --standalone --nproc_per_node=2 code/14_envelope.py --busbw-gbs B

(B: the talk test's bus bandwidth at 16 MiB, in GB/s.) Notebook 14 compares
the prediction with the all-reduces in step 14's traces.
"""
import argparse
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torch.utils.flop_counter import FlopCounterMode

from ddp_helpers import (ConvNet, cleanup, load_dataset, per_rank_batch,
                         print0, setup_distributed)
from scaling_formula import allreduce_seconds

p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int, default=96,
               help="global batch, over all ranks (step 14's)")
p.add_argument("--dataset", default="digits")
p.add_argument("--data-dir", default="data")
p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
p.add_argument("--iters", type=int, default=20,
               help="timed steps of forward and backward")
p.add_argument("--latency-us", type=float,
               help="an all-reduce's fixed cost "
                    "(default: measured here, see below)")
p.add_argument("--busbw-gbs", type=float,
               help="bus bandwidth in GB/s: the talk test's at a large size")
args = p.parse_args()
bad = []
if args.iters < 1:
    bad.append(f"--iters {args.iters} (must be >= 1)")
if args.latency_us is not None and args.latency_us < 0:
    bad.append(f"--latency-us {args.latency_us:g} (must be >= 0)")
if args.busbw_gbs is not None and args.busbw_gbs <= 0:
    bad.append(f"--busbw-gbs {args.busbw_gbs:g} (must be > 0)")
if bad:
    raise SystemExit(f"error: {', '.join(bad)}")
train, _ = load_dataset(args.dataset, args.data_dir)
rank, local_rank, world_size, device = setup_distributed(args.backend)
torch.manual_seed(0)
batch = per_rank_batch(args.batch_size, world_size)
x, y = (t.to(device) for t in next(iter(DataLoader(train, batch_size=batch))))
# step 14's model, without DDP: compute alone
model = ConvNet(image_size=x.shape[-1]).to(device)


def step():
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()


# counts each operator's FLOPs from its shapes
with FlopCounterMode(display=False) as counter:
    step()
flops = counter.get_total_flops()
for _ in range(3):  # warm-up: allocator, kernels
    step()
if device.type == "cuda":
    torch.cuda.synchronize()
dist.barrier()  # every rank computes at the same time, as in a training step
start = time.perf_counter()
for _ in range(args.iters):
    step()
if device.type == "cuda":
    torch.cuda.synchronize()  # the kernels run after the CPU queued them
slowest = torch.tensor([(time.perf_counter() - start) / args.iters],
                       device=device)
# the step waits for the slowest rank
dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
compute_s = slowest.item()
grad_bytes = sum(q.numel() * q.element_size() for q in model.parameters())
print0(f"{world_size} processes, backend {dist.get_backend()}, "
       f"device {device.type}, {batch} images per rank")
print0(f"FLOPs of one step per rank (forward + backward, FlopCounterMode): "
       f"{flops:,}")
print0(f"compute: {compute_s * 1e3:.2f} ms per step on the slowest rank = "
       f"{flops / compute_s / 1e9:.2f} GFLOP/s")
print0(f"gradients: {grad_bytes:,} bytes ({next(model.parameters()).dtype}), "
       f"all-reduced once per step")


def latency_s(iters=25):
    """An all-reduce's fixed cost as a training step pays it: a 4-byte
    all_reduce right after a step's compute, timed on each rank; the rank that
    came last to it waited for nobody (the smaller time of the ranks), and the
    median over the steps ignores the few that waited milliseconds for a
    shared core. The same measure as the traces' (notebook 14)."""
    one, times = torch.ones(1, device=device), []
    for _ in range(iters):
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        dist.all_reduce(one)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    every = [torch.zeros(iters, device=device) for _ in range(world_size)]
    dist.all_gather(every, torch.tensor(times, device=device))
    # per step: the rank that came last
    last = torch.stack(every).min(dim=0).values
    return last.median().item()


if args.latency_us is None:
    args.latency_us = latency_s() * 1e6
    print0(f"latency: {args.latency_us:.0f} us, a 4-byte all-reduce after "
           f"each step's compute (median of 25)")
if args.busbw_gbs is not None:
    predicted = allreduce_seconds(grad_bytes, world_size,
                                  args.busbw_gbs * 1e9,
                                  args.latency_us * 1e-6)
    print0(f"predicted all-reduce = {args.latency_us:.0f} us + "
           f"2({world_size}-1)/{world_size} x {grad_bytes:,} "
           f"bytes / {args.busbw_gbs:g} GB/s = {predicted * 1e6:.0f} us")
    print0(f"compute / predicted all-reduce = {compute_s / predicted:.1f} "
           f"({'compute' if compute_s > predicted else 'communication'}"
           f"-bound)")
cleanup()
