"""Step 14: the short benchmark of the scaling sweep. Each job of code/14_sweep.py runs it once
with its own number of nodes and GPUs; it times DDP training steps of the tutorial's ConvNet on
random images kept on the device, twice:

- strong scaling: the global batch stays --batch, split over the ranks;
- weak scaling: every rank keeps --batch, so the global batch grows with the ranks.

It writes one JSON row (sizes, step times, images/s, versions); the sweep adds the job's wall
time and transport and draws the figures. Start it like the training: torchrun or srun.
"""
import argparse
import json
import os
import platform
import socket
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_helpers import ConvNet, cleanup, per_rank_batch, print0, setup_distributed

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=1024, help="strong: the global batch; weak: per process")
p.add_argument("--image-size", type=int, default=28)
p.add_argument("--steps", type=int, default=50, help="timed steps, after 5 warm-up steps")
p.add_argument("--out", required=True, help="write the row here (JSON, rank 0)")
args = p.parse_args()
if args.steps < 1 or args.image_size < 4:
    raise SystemExit(f"error: --steps must be >= 1 and --image-size >= 4 (got {args.steps}, {args.image_size})")

rank, local_rank, world_size, device = setup_distributed()
hosts = [None] * world_size
dist.all_gather_object(hosts, socket.gethostname())
torch.manual_seed(0)
model = ConvNet(image_size=args.image_size).to(device)
model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def seconds_per_step(batch):
    """Mean time of one training step (the slowest rank's), data already on the device."""
    x = torch.randn(batch, 1, args.image_size, args.image_size, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    for _ in range(5):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = torch.tensor(time.perf_counter() - start, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item() / args.steps


row = dict(nodes=len(set(hosts)), gpus=world_size, backend=dist.get_backend(), device=device.type,
           torch=torch.__version__, cuda=torch.version.cuda, hip=torch.version.hip,
           nccl=".".join(map(str, torch.cuda.nccl.version())) if device.type == "cuda" else None,
           python=platform.python_version(), image_size=args.image_size, steps=args.steps)
for mode, batch in (("strong", per_rank_batch(args.batch, world_size)), ("weak", args.batch)):
    s = seconds_per_step(batch)
    row[mode] = dict(global_batch=batch * world_size, step_s=s, images_per_s=batch * world_size / s)
if rank == 0:
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(row, f, indent=1)
print0(f"{world_size} processes on {row['nodes']} node(s), backend {row['backend']}, device {device.type}: "
       f"strong (global batch {args.batch}) and weak ({args.batch} per process), "
       f"{args.steps} steps each")
cleanup()
