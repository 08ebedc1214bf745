"""Step 2: is DDP the same training as one process? For each case, train
with DDP and, inside rank 0, with one process on the same global batches from
the same initial weights; compare."""
import argparse
import contextlib
import copy

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import (
    allreduce_hook)
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import (DataLoader, DistributedSampler, RandomSampler,
                              Subset)

from ddp_helpers import (ConvNet, assert_replicas_equal, cleanup, fail,
                         load_dataset, per_rank_batch,
                         print0, setup_distributed)

p = argparse.ArgumentParser()
p.add_argument("--cases", default="all",
               help="comma-separated names from CASES below, or all")
p.add_argument("--epochs", type=int, default=1)
p.add_argument("--batch-size", type=int, default=96,
               help="global batch, over all ranks")
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--tolerance", type=float, default=1e-5,
               help="largest max|dparam| called equal")
p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
args = p.parse_args()

rank, local_rank, world_size, device = setup_distributed(args.backend)
if world_size < 2:
    fail("error: this comparison needs at least 2 processes "
         "(torchrun --nproc_per_node=2)")
K, B = world_size, args.batch_size
# Compare in full float32 on GPUs too: TF32 convolutions would differ by ~1e-3
# by themselves.
torch.backends.cuda.matmul.fp32_precision = \
    torch.backends.cudnn.conv.fp32_precision = "ieee"
torch.backends.cudnn.deterministic = True

# Each case changes one thing. same: should DDP's weights equal the single
# process's?
CASES = {
    "baseline": dict(same=True),
    # each rank normalizes with its own B/K images
    "bn-local": dict(bn="local", same=False),
    # fix: statistics over the global batch
    "bn-global": dict(bn="global", same=True),
    # PyTorch's fix, nn.SyncBatchNorm: GPUs only
    "sync-bn": dict(bn="sync", same=True),
    # DDP divides the gradient by K
    "sum": dict(reduction="sum", lr=args.lr / B, same=False),
    # fix
    "sum-lr-x-world": dict(reduction="sum", lr=args.lr / B, lr_x_world=True,
                           same=True),
    # the sampler pads the last batch
    "uneven": dict(train_size=10 * B + 1, same=False),
    # fix
    "uneven-drop-last": dict(train_size=10 * B + 1, drop_last=True, same=True),
    # gradient summed, x2
    "accum-unscaled": dict(accum=2, scale_loss=False, same=False),
    # loss / accum: the same mean gradient
    "accum": dict(accum=2, same=True),
    # same, one all-reduce per step
    "accum-no-sync": dict(accum=2, no_sync=True, same=True),
    # every rank draws the same masks
    "dropout-same-seed": dict(dropout=0.5, same=False),
    # fix
    "dropout-seed-per-rank": dict(dropout=0.5, seed_per_rank=True,
                                  same=False),
    # 3 epochs (135 steps): rounding differences grow. same=None: not
    # asserted, luck decides
    "long-run": dict(epochs=3, batch=32, lr=0.01, same=None),
}
names = list(CASES) if args.cases == "all" else args.cases.split(",")
for name in names:
    if name not in CASES:
        fail(f"error: unknown case {name!r}: choose from {', '.join(CASES)}")


class AllReduceSum(torch.autograd.Function):
    """Sum a tensor over ranks, and its gradient too (the backward of a sum
    over ranks)."""

    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class GlobalBatchNorm2d(nn.BatchNorm2d):
    """What nn.SyncBatchNorm computes, written out so it also runs on CPU: the
    mean and the variance over the global batch, in the forward and in the
    backward pass."""

    def forward(self, x):
        if not self.training:
            return super().forward(x)
        # values per channel (equal shards)
        n = x.numel() // x.shape[1] * dist.get_world_size()
        mean = AllReduceSum.apply(x.sum((0, 2, 3))) / n
        var = AllReduceSum.apply(
            ((x - mean[:, None, None]) ** 2).sum((0, 2, 3))) / n
        with torch.no_grad():
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var * n / (n - 1), self.momentum)
        x = (x - mean[:, None, None]) / torch.sqrt(
            var[:, None, None] + self.eps)
        return x * self.weight[:, None, None] + self.bias[:, None, None]


def run_case(c):
    """Train DDP and (rank 0) one process on the same batches; return the
    comparison."""
    train, _ = load_dataset("digits")
    if "train_size" in c:
        train = Subset(train, range(c["train_size"]))
    accum, lr, B = (c.get("accum", 1), c.get("lr", args.lr),
                    c.get("batch", args.batch_size))
    micro = per_rank_batch(B, K, accum)  # images per rank per forward pass
    torch.manual_seed(args.seed)  # the same initial weights for both runs
    model = ConvNet(batchnorm="bn" in c)
    # after the first convolution: its outputs are never exactly 0
    if "dropout" in c:
        model.features.insert(1, nn.Dropout(c["dropout"]))
    # the single process: plain BatchNorm, no DDP
    ref = copy.deepcopy(model).to(device)
    if c.get("bn") == "global":
        model.features = nn.Sequential(
            *[GlobalBatchNorm2d(m.num_features)
              if isinstance(m, nn.BatchNorm2d) else m
              for m in model.features])
    if c.get("bn") == "sync":
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = DDP(model.to(device),
                device_ids=[local_rank] if device.type == "cuda" else None)
    calls = []
    model.register_comm_hook(
        None, lambda s, bucket: calls.append(1) or allreduce_hook(s, bucket))
    masks = []
    if "dropout" in c:
        model.module.features[1].register_forward_hook(
            lambda m, i, out: masks.append((out == 0).float()))
    if c.get("seed_per_rank"):
        # after the weights: random numbers differ per rank
        torch.manual_seed(args.seed + 1000 * rank)
    opt = torch.optim.SGD(model.parameters(),
                          lr=lr * K if c.get("lr_x_world") else lr,
                          momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=lr, momentum=0.9)
    drop_last = c.get("drop_last", False)
    sampler = DistributedSampler(train, seed=args.seed, drop_last=drop_last)
    loader = DataLoader(train, batch_size=B // K, sampler=sampler,
                        drop_last=drop_last)
    # the single process's order: the same permutation, as in step 1
    g = torch.Generator()
    ref_loader = DataLoader(train, batch_size=B,
                            sampler=RandomSampler(train, generator=g),
                            drop_last=drop_last)
    reduction, steps = c.get("reduction", "mean"), 0
    for epoch in range(c.get("epochs", args.epochs)):
        sampler.set_epoch(epoch)
        g.manual_seed(args.seed + epoch)
        for x, y in loader:
            opt.zero_grad()
            for i, (xm, ym) in enumerate(zip(x.split(micro),
                                             y.split(micro))):
                # all-reduce at the last one only
                sync = i == accum - 1 or not c.get("no_sync")
                # forward and backward
                with contextlib.nullcontext() if sync else model.no_sync():
                    loss = F.cross_entropy(model(xm.to(device)),
                                           ym.to(device), reduction=reduction)
                    if c.get("scale_loss", True):
                        # the mean over the micro-batches, not their sum
                        loss = loss / accum
                    loss.backward()
            opt.step()
            steps += 1
        if rank == 0:
            for x, y in ref_loader:
                loss = F.cross_entropy(ref(x.to(device)), y.to(device),
                                       reduction=reduction)
                ref_opt.zero_grad()
                loss.backward()
                ref_opt.step()
    # DDP keeps the replicas equal in every case, even wrong ones
    assert_replicas_equal(model)
    diff = torch.zeros((), device=device)
    if rank == 0:
        diff = max((a - b).abs().max()
                   for a, b in zip(model.module.parameters(),
                                   ref.parameters()))
    same_masks = None
    # the first step's dropout masks: how many agree between rank 0 and rank 1?
    if masks:
        gathered = [torch.zeros_like(masks[0]) for _ in range(K)]
        dist.all_gather(gathered, masks[0])
        same_masks = (gathered[0] == gathered[1]).float().mean().item()
    return diff.item(), len(calls) / steps, same_masks


print0(f"{K} processes, backend {dist.get_backend()}, device {device.type}, "
       f"global batch {B} = {K} x {B // K}, {args.epochs} epoch(s), "
       f"tolerance {args.tolerance:.0e}")
print0(f"{'case':22} {'max|dparam|':>11} {'all-reduces/step':>16} "
       f"{'same dropout masks':>18}  result")
for name in names:
    c = CASES[name]
    try:
        diff, allreduces, same_masks = run_case(c)
    except ValueError as e:
        if c.get("bn") != "sync" or device.type != "cpu":
            raise
        # the real error, on every rank alike
        print0(f"{name:22} not run on {device.type}: {e}")
        continue
    masks = "-" if same_masks is None else f"{same_masks:.0%}"
    equal = diff <= args.tolerance
    print0(f"{name:22} {diff:11.0e} {allreduces:16g} {masks:>18}  "
           f"{'equal' if equal else 'DIFFERENT'}")
    if rank == 0 and c["same"] is not None:
        assert equal == c["same"], (
            f"{name}: expected {'equal' if c['same'] else 'different'}")
    if "dropout" in c:
        assert (same_masks == 1.0) == (not c.get("seed_per_rank")), (
            f"{name}: masks {masks}")
cleanup()
