"""Step 4: step 1's DDP training, with data prepared once before every rank
reads it, per-rank worker seeds and an evaluation that counts every test image
exactly once. Start it with torchrun or srun."""
import argparse
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, Subset

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
p.add_argument("--num-workers", type=int, default=0,
               help="DataLoader worker processes per rank")
p.add_argument("--save", help="write the trained weights here (rank 0)")
p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
p.add_argument("--timeout", type=int, default=300,
               help="seconds any collective may wait")
p.add_argument("--prepare-wait", type=int, default=3600,
               help="seconds the ranks wait for the data preparation "
               "(0: --timeout, as any collective)")
p.add_argument("--slow-prepare", type=float, default=0,
               help="seconds rank 0's preparation sleeps "
               "(a large data set to unpack)")
args = p.parse_args()
if args.num_workers < 0:
    raise SystemExit(f"error: --num-workers must be 0 or more, "
                     f"not {args.num_workers}")

rank, local_rank, world_size, device = setup_distributed(
    args.backend, timeout_s=args.timeout)
batch = per_rank_batch(args.batch_size, world_size)
# the same initial weights on every rank (DDP also broadcasts them)
torch.manual_seed(args.seed)
# --8<-- [start:data]
# --data-dir is shared by all nodes: one process of the whole job
# checks/unpacks the data first (a copy to each node's local disk would be
# local_rank == 0, into a folder only that node sees) ... The others wait at a
# barrier. The process group's timeout bounds *every* collective, this barrier
# too: a wait longer than that (unpacking a real data set) gets a group of its
# own. gloo: a barrier on the CPU, whatever the training uses.
waiting = (dist.new_group(backend="gloo",
                          timeout=timedelta(seconds=args.prepare_wait))
           if args.prepare_wait else None)
if rank == 0:
    load_dataset(args.dataset, args.data_dir)
    time.sleep(args.slow_prepare)
try:
    dist.barrier(group=waiting)  # ... then every rank reads the prepared files
except (RuntimeError, dist.DistError):
    fail(f"error: the wait for rank 0's data preparation ended after "
         f"{args.prepare_wait or args.timeout} s: the process group's "
         f"timeout (--timeout) bounds every collective, not only the start; "
         f"wait in a group with a longer timeout (--prepare-wait)")
train, test = load_dataset(args.dataset, args.data_dir)
# each rank reads its own 1/world_size of the data
sampler = DistributedSampler(train, seed=args.seed)
# Worker processes seed their RNGs from this generator: a per-rank seed, so
# random augmentations differ between ranks (with the global RNG they would be
# the same on all ranks).
g = torch.Generator().manual_seed(args.seed + 1000 * rank)
# fork, asked for: Python 3.14's default (forkserver) would run this file
# again in each worker
loader = DataLoader(train, batch_size=batch, sampler=sampler,
                    num_workers=args.num_workers, generator=g,
                    persistent_workers=args.num_workers > 0,
                    multiprocessing_context=(
                        "fork" if args.num_workers else None))
# --8<-- [end:data]
model = ConvNet(image_size=train[0][0].shape[-1]).to(device)
model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
print0(f"{world_size} processes, "
       f"backend {dist.get_backend()}, device {device.type}, "
       f"batch {args.batch_size} = {world_size} x {batch}, "
       f"{args.num_workers} loader workers per rank")

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


# --8<-- [start:eval]
@torch.no_grad()
def count_correct(indices):
    """(right predictions, images) over these test images, on this rank."""
    right = seen = 0
    for x, y in DataLoader(Subset(test, indices), batch_size=500):
        # no DDP hooks
        right += (model.module(x.to(device)).argmax(1)
                  == y.to(device)).sum().item()
        seen += len(y)
    return right, seen


def summed_over_ranks(right_seen):
    t = torch.tensor(right_seen, dtype=torch.float64, device=device)
    dist.all_reduce(t)  # SUM over ranks
    right, seen = int(t[0]), int(t[1])
    assert seen == len(test), (
        f"{seen} images evaluated, the test set has {len(test)}")
    return right, seen


model.eval()
# Wrong: DistributedSampler pads the shards to equal length by repeating test
# images, and the mean of the ranks' accuracies then counts those images
# twice.
padded = list(DistributedSampler(test, shuffle=False))
right, seen = count_correct(padded)
naive = mean_over_ranks(right / seen)
# Right: unpadded shards (rank r takes r, r + world_size, ...), then all-reduce
# the two *sums*.
right_a, seen_a = summed_over_ranks(
    count_correct(range(rank, len(test), world_size)))
# Also right, keeping the sampler: drop its padding. Rank r's i-th index sits
# at position r + i * world_size of the padded list, and the positions from
# len(test) on are the padding.
kept = [j for i, j in enumerate(padded) if rank + i * world_size < len(test)]
right_b, seen_b = summed_over_ranks(count_correct(kept))
# --8<-- [end:eval]
print0(f"test images {len(test)}, "
       f"padded shards {world_size} x {len(padded)} = "
       f"{world_size * len(padded)}")
print0(f"test accuracy, mean over padded shards: {naive:.5f}")
print0(f"test accuracy, sums over unpadded shards: {right_a}/{seen_a} = "
       f"{right_a / seen_a:.5f}")
print0(f"test accuracy, sums over the sampler's shards without padding: "
       f"{right_b}/{seen_b} = {right_b / seen_b:.5f}")
# the same model on one process, whole test set: the number to agree with
if rank == 0:
    single = accuracy(model.module, test, device)
    assert right_a / seen_a == right_b / seen_b == single, (
        right_a / seen_a, right_b / seen_b, single)
    print(f"test accuracy, 1 process, whole set: {single:.5f}")
    if args.save:
        torch.save(model.module.state_dict(), args.save)
cleanup()
