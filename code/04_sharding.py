"""Step 4: step 1's DDP training, with data prepared once per node, per-rank worker seeds and
an evaluation that counts every test image exactly once. Start it with torchrun or srun."""
import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, Subset

from ddp_helpers import (ConvNet, accuracy, assert_replicas_equal, cleanup, load_dataset,
                         mean_over_ranks, per_rank_batch, print0, setup_distributed)

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--batch-size", type=int, default=96, help="global batch, over all ranks")
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--dataset", default="digits")
p.add_argument("--data-dir", default="data")
p.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes per rank")
p.add_argument("--save", help="write the trained weights here (rank 0)")
p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
args = p.parse_args()
if args.num_workers < 0:
    raise SystemExit(f"error: --num-workers must be 0 or more, not {args.num_workers}")

rank, local_rank, world_size, device = setup_distributed(args.backend)
batch = per_rank_batch(args.batch_size, world_size)
torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP also broadcasts them)
# --8<-- [start:data]
if local_rank == 0:  # one process per node checks/unpacks/copies the data first ...
    load_dataset(args.dataset, args.data_dir)
dist.barrier()  # ... the others wait here, then every rank reads the prepared files
train, test = load_dataset(args.dataset, args.data_dir)
sampler = DistributedSampler(train, seed=args.seed)  # each rank reads its own 1/world_size
# Worker processes seed their RNGs from this generator: a per-rank seed, so random
# augmentations differ between ranks (with the global RNG they would be the same on all ranks).
g = torch.Generator().manual_seed(args.seed + 1000 * rank)
loader = DataLoader(train, batch_size=batch, sampler=sampler, num_workers=args.num_workers,
                    generator=g, persistent_workers=args.num_workers > 0)
# --8<-- [end:data]
model = ConvNet(image_size=train[0][0].shape[-1]).to(device)
model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
print0(f"{world_size} processes, backend {dist.get_backend()}, device {device.type}, "
       f"batch {args.batch_size} = {world_size} x {batch}, {args.num_workers} loader workers per rank")

for epoch in range(args.epochs):
    sampler.set_epoch(epoch)  # a new, reproducible order every epoch, the same on all ranks
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
def count_correct(shard):
    """(right predictions, images) over this rank's shard of the test set."""
    right = seen = 0
    for x, y in DataLoader(shard, batch_size=500):  # model.module: no DDP hooks in evaluation
        right += (model.module(x.to(device)).argmax(1) == y.to(device)).sum().item()
        seen += len(y)
    return right, seen


model.eval()
# Wrong: DistributedSampler pads the shards to equal length by repeating test images, and the
# mean of the ranks' accuracies then counts those images twice.
padded = list(DistributedSampler(test, shuffle=False))
right, seen = count_correct(Subset(test, padded))
naive = mean_over_ranks(right / seen)
# Right: unpadded shards (rank r takes r, r + world_size, ...), then all-reduce the two *sums*.
counts = torch.tensor(count_correct(Subset(test, range(rank, len(test), world_size))),
                      dtype=torch.float64, device=device)
dist.all_reduce(counts)
right_total, seen_total = int(counts[0]), int(counts[1])
assert seen_total == len(test), f"{seen_total} images evaluated, the test set has {len(test)}"
# --8<-- [end:eval]
print0(f"test images {len(test)}, padded shards {world_size} x {len(padded)} = {world_size * len(padded)}")
print0(f"test accuracy, mean over padded shards: {naive:.5f}")
print0(f"test accuracy, sums over unpadded shards: {right_total}/{seen_total} = {right_total / seen_total:.5f}")
if rank == 0:  # the same model on one process, whole test set: the number to agree with
    single = accuracy(model.module, test, device)
    assert right_total / seen_total == single, (right_total / seen_total, single)
    print(f"test accuracy, 1 process, whole set: {single:.5f}")
    if args.save:
        torch.save(model.module.state_dict(), args.save)
cleanup()
