"""Step 2, variant: nn.DataParallel (one process, one thread per GPU) against
one GPU.

DataParallel needs no launcher: in every forward it scatters the batch over
the GPUs, replicates the model from GPU 0, runs the replicas in threads and
gathers the outputs on GPU 0; backward sums the gradients back on GPU 0. Run it
with plain python on a GPU node.
"""
import argparse
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, RandomSampler

from ddp_helpers import ConvNet, load_dataset

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=1)
p.add_argument("--batch-size", type=int, default=96)
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--tolerance", type=float, default=1e-5,
               help="largest max|dparam| called equal")
args = p.parse_args()

n_gpus = torch.cuda.device_count()
# never faked: with fewer than 2 GPUs there is nothing to compare
if n_gpus < 2:
    print(f"DataParallel vs 1 GPU: skipped, it needs at least 2 GPUs "
          f"and this node has {n_gpus}")
    raise SystemExit(0)
# full float32, no TF32 (fp32_precision replaces the older allow_tf32 flags)
torch.backends.cuda.matmul.fp32_precision = \
    torch.backends.cudnn.conv.fp32_precision = "ieee"
torch.backends.cudnn.deterministic = True

train, _ = load_dataset("digits")
torch.manual_seed(args.seed)
ref = ConvNet().cuda()  # one GPU
model = nn.DataParallel(copy.deepcopy(ref))  # the same weights, on all GPUs
g = torch.Generator()
loader = DataLoader(train, batch_size=args.batch_size,
                    sampler=RandomSampler(train, generator=g))
for net in (ref, model):
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    for epoch in range(args.epochs):
        g.manual_seed(args.seed + epoch)  # the same batches for both
        for x, y in loader:
            # outputs gathered on GPU 0
            loss = F.cross_entropy(net(x.cuda()), y.cuda())
            opt.zero_grad()
            loss.backward()
            opt.step()

diff = max((a - b).abs().max().item()
           for a, b in zip(ref.parameters(), model.module.parameters()))
print(f"DataParallel on {n_gpus} GPUs vs 1 GPU: max|dparam| {diff:.0e}")
assert diff <= args.tolerance, (
    f"DataParallel differs from one GPU by {diff:.1e}")
