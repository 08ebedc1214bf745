"""Step 1b: the same training with DistributedDataParallel. Start it with
torchrun or srun."""
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
args = p.parse_args()

rank, local_rank, world_size, device = setup_distributed(args.backend)
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
