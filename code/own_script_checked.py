"""A plain single-GPU training script, like one you may have: nothing from this
tutorial in it.

A small classifier for scikit-learn's handwritten digits (they ship with
scikit-learn: nothing to download). The page "Your own script" turns it into
DDP with the fewest changes possible.

    torchrun --standalone --nproc_per_node=2 code/own_script_checked.py
"""
import argparse
import os
import sys

import ddp_check  # the file code/ddp_check.py, copied beside this script

import torch
import torch.distributed as dist
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--batch-size", type=int, default=96,
                    help="global batch, over all processes")
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--save", help="write the trained weights here")
args = parser.parse_args()

# torchrun starts one copy per GPU and tells each who it is in the environment
dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
local_rank = int(os.environ["LOCAL_RANK"])  # which GPU of this node is mine
if torch.cuda.is_available():
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
else:
    device = torch.device("cpu")
torch.manual_seed(0)

digits = load_digits()  # 1,797 images of 8 x 8 pixels, values 0..16
x = torch.tensor(digits.data, dtype=torch.float32) / 16
y = torch.tensor(digits.target)
train, test = (TensorDataset(x[:1500], y[:1500]),
               TensorDataset(x[1500:], y[1500:]))
sampler = DistributedSampler(train)  # shuffles; each process gets its share
loader = DataLoader(train, batch_size=args.batch_size // world_size,
                    sampler=sampler)

model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(),
                      nn.Linear(128, 10)).to(device)
model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
if rank == 0:
    print(f"{world_size} processes, backend {dist.get_backend()}, "
          f"device {device.type}, batch {args.batch_size} = "
          f"{world_size} x {args.batch_size // world_size}")
# one line per check, printed by rank 0
ddp_check.check(model, loader, global_batch=args.batch_size)

for epoch in range(args.epochs):
    sampler.set_epoch(epoch)  # new order every epoch, same on every process
    total = 0.0
    for xb, yb in loader:
        xb, yb = xb.to(device), yb.to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()  # DDP averages the gradients of all processes here
        optimizer.step()
        total += loss.item()
    if rank == 0:  # rank 0's batches: close to, not equal to, the loss of all
        print(f"epoch {epoch} loss {total / len(loader):.4f}")

if rank == 0:  # every process holds the same model: evaluate and save it once,
    # with .module, the model inside DDP: DDP's own forward may wait for others
    with torch.no_grad():
        xt, yt = test.tensors
        accuracy = (model.module(xt.to(device)).argmax(1)
                    == yt.to(device)).float().mean().item()
    print(f"test accuracy {accuracy:.4f}")
    if args.save:
        torch.save(model.module.state_dict(), args.save)
dist.barrier()  # leave together: rank 1 waits while rank 0 evaluates and saves
dist.destroy_process_group()
if not torch.cuda.is_available():  # gloo may abort in Python's exit (step 9):
    sys.stdout.flush()  # skip that exit, keeping what print() still holds
    os._exit(0)
