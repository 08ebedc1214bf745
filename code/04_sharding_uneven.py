"""Step 4, pitfall: ranks that run different numbers of batches. Start it with
torchrun.

Rank r takes samples r, r + world_size, ... (no padding, like hand-made shards
or files of different sizes): with 481 samples rank 0 gets one more, so one
more batch, and its last gradient all-reduce waits for a partner that never
comes: a hang, until the timeout.
--join: the same shards inside Join([model]): ranks that are done shadow the
others.
(DistributedSampler avoids all this: it gives every rank the same number of
samples.)
"""
import argparse

import torch
import torch.nn.functional as F
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Subset

from ddp_helpers import (ConvNet, assert_replicas_equal, cleanup, load_dataset,
                         per_rank_batch, print0, setup_distributed)

p = argparse.ArgumentParser()
p.add_argument("--join", action="store_true",
               help="train inside Join([model])")
p.add_argument("--samples", type=int, default=481,
               help="use the first N training images")
p.add_argument("--batch-size", type=int, default=96,
               help="global batch, over all ranks")
p.add_argument("--timeout", type=int, default=5,
               help="seconds before a stuck collective fails")
args = p.parse_args()
if not 0 < args.samples <= 1440 or args.timeout <= 0:
    raise SystemExit(f"error: --samples must be 1..1440 (got {args.samples}) "
                     f"and --timeout > 0 (got {args.timeout})")

rank, local_rank, world_size, device = setup_distributed(
    timeout_s=args.timeout)
batch = per_rank_batch(args.batch_size, world_size)
torch.manual_seed(0)
train = Subset(load_dataset("digits")[0], range(args.samples))
shard = Subset(train, range(rank, len(train), world_size))
loader = DataLoader(shard, batch_size=batch)
counts = [None] * world_size
torch.distributed.all_gather_object(counts, (len(shard), len(loader)))
print0("samples per rank", [c[0] for c in counts],
       "batches per rank", [c[1] for c in counts])
model = DDP(ConvNet().to(device),
            device_ids=[local_rank] if device.type == "cuda" else None)
opt = torch.optim.SGD(model.parameters(), lr=0.05)

with Join([model], enable=args.join):  # enable=False: a plain loop
    for x, y in loader:
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        opt.zero_grad()
        # all ranks must get here equally often: the all-reduce needs everyone
        loss.backward()
        opt.step()
assert_replicas_equal(model)
print0(f"all {world_size} ranks finished, replicas equal")
cleanup()
