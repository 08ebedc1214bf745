"""Step 14: the short benchmark of the scaling sweep. Each job of
code/14_sweep.py runs it once with its own number of nodes and GPUs; it times
DDP training steps of the tutorial's ConvNet on random images kept on the
device, twice:

- strong scaling: the global batch stays --batch, split over the ranks;
- weak scaling: every rank keeps --batch, so the global batch grows with the
  ranks.

Each mode runs for about --seconds after its warm-up (the steps for that are
counted from 10 timed steps, the slowest rank's, so every rank runs the same
number), or exactly --steps. It writes one JSON row (sizes, steps, the timed
window's seconds and clock times, step times, images/s, versions); the sweep
adds the job's wall time, GPU use within the timed windows and the transport,
and draws the figures. Start it like the training: torchrun or srun.
"""
import argparse
import json
import math
import os
import platform
import socket
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_helpers import (ConvNet, cleanup, per_rank_batch, print0,
                         setup_distributed)

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=1024,
               help="strong: the global batch; weak: per process")
p.add_argument("--image-size", type=int, default=28)
p.add_argument("--seconds", type=float, default=30,
               help="timed seconds per mode, after 5 warm-up steps "
                    "(start-up, module loads and NCCL's set-up stay outside: "
                    "the sweep's numbers come from this)")
p.add_argument("--steps", type=int,
               help="exactly this many timed steps per mode instead of "
                    "--seconds")
p.add_argument("--out", required=True,
               help="write the row here (JSON, rank 0)")
args = p.parse_args()
for name, value, low in (("--batch", args.batch, 1),
                         ("--image-size", args.image_size, 4),
                         ("--seconds", args.seconds, 1e-3),
                         ("--steps",
                          1 if args.steps is None else args.steps, 1)):
    if not value >= low:
        raise SystemExit(f"error: {name} {value:g}: must be >= {low:g}")

rank, local_rank, world_size, device = setup_distributed()
hosts = [None] * world_size
dist.all_gather_object(hosts, socket.gethostname())
torch.manual_seed(0)
model = ConvNet(image_size=args.image_size).to(device)
model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def timed(batch):
    """Time training steps, data already on the device: (steps, seconds of the
    slowest rank, the window's start and end on rank 0's clock, which the sweep
    matches with the GPU-use samples, and the 10-step probe's seconds that
    chose the count)."""
    x = torch.randn(batch, 1, args.image_size, args.image_size, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def run(n):  # n steps, all ranks started together; the slowest rank's time
        if device.type == "cuda":
            torch.cuda.synchronize()
        dist.barrier()
        start, wall = time.perf_counter(), time.time()
        for _ in range(n):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = torch.tensor(time.perf_counter() - start, dtype=torch.float64,
                         device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item(), wall, time.time()
    # warm-up: cuDNN's choice of kernels, NCCL's first buckets, the allocator
    run(5)
    # the same count on every rank (a rank that stops early would leave the
    # others waiting)
    if args.steps:
        steps, probe = args.steps, None
    else:
        probe = run(10)[0]
        steps = max(10, math.ceil(args.seconds / (probe / 10)))
    seconds, start, end = run(steps)
    return steps, seconds, start, end, probe


row = dict(nodes=len(set(hosts)), gpus=world_size, backend=dist.get_backend(),
           device=device.type, torch=torch.__version__,
           cuda=torch.version.cuda, hip=torch.version.hip,
           nccl=(".".join(map(str, torch.cuda.nccl.version()))
                 if device.type == "cuda" else None),
           python=platform.python_version(), image_size=args.image_size)
for mode, batch in (("strong", per_rank_batch(args.batch, world_size)),
                    ("weak", args.batch)):
    steps, seconds, start, end, probe = timed(batch)
    row[mode] = dict(global_batch=batch * world_size, steps=steps,
                     seconds=seconds, window=[start, end], probe_s=probe,
                     step_s=seconds / steps,
                     images_per_s=batch * world_size * steps / seconds)
if rank == 0:
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(row, f, indent=1)
print0(f"{world_size} processes on {row['nodes']} node(s), "
       f"backend {row['backend']}, device {device.type}: "
       f"strong (global batch {args.batch}) and weak "
       f"({args.batch} per process), "
       + (f"{args.steps} steps each" if args.steps else
          f"{row['strong']['steps']} and {row['weak']['steps']} steps, "
          f"about {args.seconds:g} s each"))
cleanup()
