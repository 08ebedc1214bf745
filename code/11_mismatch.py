"""Step 11: the bug of code/11_debugging.py --bug without the training: a
collective only rank 0 calls.

Each rank has a loss; with --bug rank 0 logs the average inside
`if rank == 0:`. The average is an all-reduce, so rank 0 waits in it while the
others wait in their next collective, the broadcast that checks that all
replicas of the model are equal.
Run it with TORCH_DISTRIBUTED_DEBUG=DETAIL to have every rank name its
collective.
(No DDP here: with gloo, DETAIL crashes DDP's constructor in the PyTorch of
these tests.)
"""
import argparse

import torch

from ddp_helpers import (ConvNet, assert_replicas_equal, cleanup,
                         mean_over_ranks, setup_distributed)

p = argparse.ArgumentParser()
p.add_argument("--timeout", type=int, default=30,
               help="seconds before a stuck collective fails")
p.add_argument("--bug", action="store_true",
               help="call the all-reduce on rank 0 only")
args = p.parse_args()
if args.timeout <= 0:
    raise SystemExit(
        f"error: --timeout must be > 0 seconds (got {args.timeout})")

rank, local_rank, world_size, device = setup_distributed(
    timeout_s=args.timeout)
torch.manual_seed(0)
# the same weights on every rank (no training here)
model = ConvNet().to(device)
loss = 1.0 + rank  # stands for each rank's loss
if args.bug:
    # THE BUG: mean_over_ranks is an all-reduce, and only rank 0 calls it
    if rank == 0:
        print(f"mean loss {mean_over_ranks(loss):.4f}", flush=True)
else:  # the fix: every rank joins the all-reduce, rank 0 prints
    mean = mean_over_ranks(loss)
    if rank == 0:
        print(f"mean loss {mean:.4f}", flush=True)
assert_replicas_equal(model)  # broadcasts: the other ranks' next collective
print(f"rank {rank}: done", flush=True)
cleanup()
