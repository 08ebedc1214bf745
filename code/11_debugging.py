"""Step 11: the step-1 DDP script, with a bug you can switch on to practise
finding a hang.

--bug: after training, rank 0 logs a loss averaged over all ranks, inside
`if rank == 0:`. The average is an all-reduce that only rank 0 calls; the
other ranks go on to their next collective. Nobody gets an error: every rank
waits, until the timeout. Start it with torchrun.
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddp_helpers import (ConvNet, accuracy, assert_replicas_equal, cleanup,
                         load_dataset, mean_over_ranks, per_rank_batch,
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
p.add_argument("--timeout", type=int, default=300,
               help="seconds before a stuck collective fails")
p.add_argument("--bug", action="store_true",
               help="call a collective on rank 0 only (a hang)")
args = p.parse_args()
if args.timeout <= 0:
    raise SystemExit(
        f"error: --timeout must be > 0 seconds (got {args.timeout})")

rank, local_rank, world_size, device = setup_distributed(
    args.backend, timeout_s=args.timeout)
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
print0(f"{world_size} processes, "
       f"backend {torch.distributed.get_backend()}, device {device.type}, "
       f"batch {args.batch_size} = {world_size} x {batch}")
# One line from every rank: which rank is which, in logs labelled by srun or
# torchrun.
print(f"rank {rank}: local rank {local_rank}, "
      f"{len(loader)} batches per epoch", flush=True)

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

if args.bug and rank == 0:  # THE BUG: an all-reduce that only rank 0 calls
    print(f"last epoch's loss: {mean_over_ranks(total / len(loader)):.4f}",
          flush=True)

assert_replicas_equal(model)
if rank == 0:  # the model is the same on every rank: evaluate and save once
    print(f"test accuracy {accuracy(model.module, test, device):.4f}")
    if args.save:
        torch.save(model.module.state_dict(), args.save)
cleanup()
