"""Step 11: can every rank talk? all_reduce correctness and bandwidth, within
and across nodes.

Run it with the job's real layout (same nodes, same processes per node) before
debugging a training: every group below must give the right sum, and its
bandwidth should be in line with the hardware. Start it like the training:
torchrun, or srun alone (step 5).
"""
import argparse
import os
import socket
import time

import torch
import torch.distributed as dist

from ddp_helpers import cleanup, fail, print0, setup_distributed

UNITS = {"K": 2**10, "M": 2**20, "G": 2**30}


def parse_size(text):
    """'8K' -> 8192 bytes; a plain number is bytes."""
    mult = UNITS.get(text[-1:].upper(), 1)
    digits = text[:-1] if mult > 1 else text
    if (not digits.isdigit() or int(digits) * mult < 4
            or int(digits) * mult % 4):
        raise SystemExit(f"error: --sizes: {text!r} is not a size like 8K, "
                         f"1M or 64M (float32s: a multiple of 4 bytes)")
    return int(digits) * mult


def show(n):
    unit = max((u for u in UNITS.items() if n >= u[1]), key=lambda u: u[1],
               default=("", 1))
    return f"{n // unit[1]} {unit[0]}iB" if unit[0] else f"{n} B"


p = argparse.ArgumentParser()
p.add_argument("--sizes", help="message sizes, e.g. 8K,1M,64M "
               "(default: 8K,1M,4M on CPU, 8K,1M,64M,1G on GPUs, "
               "where the bandwidth needs large messages)")
p.add_argument("--iters", type=int, default=5,
               help="timed all_reduces per size")
p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
p.add_argument("--timeout", type=int, default=120,
               help="seconds before a rank that cannot talk fails")
args = p.parse_args()
if args.iters < 1 or args.timeout <= 0:
    raise SystemExit(f"error: --iters must be >= 1 (got {args.iters}) "
                     f"and --timeout > 0 (got {args.timeout})")
# bad input: stop now
sizes = ([parse_size(s) for s in args.sizes.split(",")] if args.sizes
         else None)
# Launched by srun alone (step 5's pattern 2): take the rank from Slurm.
if "RANK" not in os.environ and "SLURM_PROCID" in os.environ:
    os.environ.update(RANK=os.environ["SLURM_PROCID"],
                      WORLD_SIZE=os.environ["SLURM_NTASKS"],
                      LOCAL_RANK=os.environ["SLURM_LOCALID"])
rank, local_rank, world_size, device = setup_distributed(
    args.backend, timeout_s=args.timeout)
# not "all 0 tests correct": a check that checked nothing must say so
if world_size == 1:
    print(f"11_talk.py: skipped, one process "
          f"(backend {dist.get_backend()}, device {device.type}) has no "
          f"other rank to talk to: start 2 or more "
          f"(torchrun --nproc_per_node=2, or srun with 2 tasks)")
    cleanup()
sizes = sizes or [parse_size(s) for s in (
    "8K,1M,64M,1G" if device.type == "cuda" else "8K,1M,4M").split(",")]

# Which rank runs on which node; nodes numbered in order of their first rank.
hosts = [None] * world_size
dist.all_gather_object(hosts, socket.gethostname())
nodes = list(dict.fromkeys(hosts))
# The groups to test. Every rank must create every group, in the same order.
tests = [(f"within node {i}", [r for r in range(world_size) if hosts[r] == h])
         for i, h in enumerate(nodes)]
# one rank per node: the network alone; then everyone, as in training
if len(nodes) > 1:
    tests += [("across nodes", [hosts.index(h) for h in nodes]),
              ("all ranks", list(range(world_size)))]
groups = [(name, ranks, dist.new_group(ranks)) for name, ranks in tests]

# (name, ranks, size, correct, seconds), filled in by each group's first rank
rows = []
for name, ranks, group in groups:
    if rank not in ranks or len(ranks) < 2:
        # a group of one rank has nobody to talk to (e.g. one GPU per node)
        continue
    for size in sizes:
        x = torch.empty(size // 4, dtype=torch.float32, device=device)
        # rank r sends r + 1: the sum is exact in float32
        expected = float(sum(r + 1 for r in ranks))
        x.fill_(rank + 1)
        dist.all_reduce(x, group=group)  # warm-up: connections, buffers
        dist.barrier(group=group)
        seconds = 0.0
        for _ in range(args.iters):
            x.fill_(rank + 1)
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            dist.all_reduce(x, group=group)
            if device.type == "cuda":
                # all_reduce only queues the work on a GPU
                torch.cuda.synchronize()
            seconds += time.perf_counter() - start
        # A check and a time that all ranks of the group agree on: all
        # correct, slowest rank.
        check = torch.tensor([float(torch.all(x == expected)),
                              seconds / args.iters], device=device)
        dist.all_reduce(check[:1], op=dist.ReduceOp.MIN, group=group)
        dist.all_reduce(check[1:], op=dist.ReduceOp.MAX, group=group)
        if rank == ranks[0]:
            rows.append((name, len(ranks), size, bool(check[0] == 1),
                         check[1].item()))

everything = [None] * world_size
dist.all_gather_object(everything, rows)
rows = [r for part in everything for r in part]
if rank == 0:
    order = [name for name, _, _ in groups]
    rows.sort(key=lambda r: (order.index(r[0]), r[2]))
    print(f"can every rank talk? {world_size} processes on {len(nodes)} "
          f"node{'s' * (len(nodes) > 1)}, "
          f"backend {dist.get_backend()}, device {device.type}")
    print(f"{'group':<14} {'ranks':>5} {'size':>8}  {'sum':<7} "
          f"{'time':>12} {'bus bandwidth':>14}")
    for name, n, size, correct, seconds in rows:
        # nccl-tests' bus bandwidth: a ring all_reduce moves 2(n-1)/n of the
        # data over each link, so numbers for different group sizes compare
        # with the links' speed.
        busbw = size / seconds * 2 * (n - 1) / n / 1e9
        print(f"{name:<14} {n:>5} {show(size):>8}  "
              f"{'correct' if correct else 'WRONG':<7} "
              f"{seconds * 1e6:>9.0f} us {busbw:>9.3g} GB/s")
wrong = [f"{name} at {show(size)}" for name, _, size, correct, _ in rows
         if not correct]
if wrong:  # every rank knows (all_gather_object above), so all stop together
    fail(f"error: all_reduce gave a wrong sum: {', '.join(wrong)}: "
         f"suspect a GPU, link or driver")
print0(f"all {len(rows)} tests correct")
cleanup()
