"""Step 5: the step-1 DDP script on many nodes. Start it with torchrun, or
with srun alone."""
import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddp_helpers import (ConvNet, accuracy, assert_replicas_equal, cleanup,
                         fail, load_dataset, mean_over_ranks, per_rank_batch,
                         print0, setup_distributed)

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--batch-size", type=int, default=96,
               help="global batch, over all ranks")
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--dataset", default="digits")
p.add_argument("--data-dir", default="data")
p.add_argument("--save", help="write the trained weights here (rank 0)")
p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
args = p.parse_args()

# srun without torchrun: Slurm numbers its tasks; give them the names
# torch.distributed reads. Only where they are missing: under torchrun,
# SLURM_PROCID is the node's task, not the rank.
launcher = "torchrun" if "RANK" in os.environ else "srun"
if launcher == "srun" and "SLURM_PROCID" in os.environ:
    # 0 .. ntasks-1 over all nodes
    os.environ["RANK"] = os.environ["SLURM_PROCID"]
    os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
    # 0 .. tasks on this node - 1
    os.environ["LOCAL_RANK"] = os.environ["SLURM_LOCALID"]
    if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
        raise SystemExit("error: started by srun without torchrun, but "
                         "MASTER_ADDR/MASTER_PORT are not set: export them in "
                         "the batch script (slurm/05-multinode-srun.sbatch)")
rank, local_rank, world_size, device = setup_distributed(args.backend)
# where every rank runs: its node, and the cores it may use
where = [None] * world_size
dist.all_gather_object(where, (socket.gethostname(),
                               sorted(os.sched_getaffinity(0))))
nodes = len({host for host, _ in where})
# One process per GPU: a world that does not match the GPUs Slurm gave leaves
# GPUs idle.
gpus = int(os.environ.get("SLURM_GPUS_ON_NODE", 0))
if gpus and world_size != gpus * nodes:
    fail(f"error: {world_size} processes on {nodes} nodes, "
         f"but the job has {gpus} GPUs per node: start {gpus} per node "
         f"(--ntasks-per-node or --nproc_per_node)")
batch = per_rank_batch(args.batch_size, world_size)
# the same initial weights on every rank (DDP also broadcasts them)
torch.manual_seed(args.seed)
train, test = load_dataset(args.dataset, args.data_dir)
# each rank reads its own 1/world_size of the data
sampler = DistributedSampler(train, seed=args.seed)
loader = DataLoader(train, batch_size=batch, sampler=sampler)
model = ConvNet(image_size=train[0][0].shape[-1]).to(device)
model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
print0(f"{world_size} processes on {nodes} node{'s' if nodes > 1 else ''}, "
       f"started by {launcher}")
print0(f"{world_size} processes, "
       f"backend {torch.distributed.get_backend()}, device {device.type}, "
       f"batch {args.batch_size} = {world_size} x {batch}")


# [0, 1, 2, 5] -> "0-2,5", as taskset and Slurm write core lists
def ranges(numbers):
    runs = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}"
                    for r in runs)


# The cores each rank may use, consecutive ranks with the same cores on one
# line. Bound ranks (torchrun --numa-binding, srun --cpu-bind) have cores of
# their own, next to their GPU.
first = 0
for r in range(world_size):
    if r + 1 == world_size or where[r + 1][1] != where[first][1]:
        cores = where[first][1]
        count = f"{len(cores)} core{'s' if len(cores) > 1 else ''}"
        print0(f"rank {first}: {count} ({ranges(cores)})" if r == first else
               f"ranks {first}-{r}: {count} each ({ranges(cores)})")
        first = r + 1
node_cores = {}
for host, cores in where:
    node_cores.setdefault(host, []).append(set(cores))
shared = any(sum(map(len, c)) > len(set().union(*c))
             for c in node_cores.values())
print0("cpu binding: none, the ranks of a node share its cores" if shared else
       "cpu binding: each rank has cores of its own")

for epoch in range(args.epochs):
    # a new, reproducible order every epoch, the same on all ranks
    sampler.set_epoch(epoch)
    total = 0.0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()  # DDP all-reduces (averages) the gradients here
        opt.step()
        total += loss.item()
    print0(f"epoch {epoch} loss {mean_over_ranks(total / len(loader)):.4f}")

assert_replicas_equal(model)
if rank == 0:  # the model is the same on every rank: evaluate and save once
    print(f"test accuracy {accuracy(model.module, test, device):.4f}")
    if args.save:
        torch.save(model.module.state_dict(), args.save)
cleanup()
