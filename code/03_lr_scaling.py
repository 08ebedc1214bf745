"""Step 3: the global batch and the learning rate. Start it with torchrun or
srun.

global batch = processes x per-process batch x accumulation steps.
Comma-separated values of --optimizer, --batch-size, --scale, --warmup-steps
and --seed run one training each (a sweep in one launch).
"""
import argparse
import contextlib
import copy
import itertools

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

from ddp_helpers import (ConvNet, accuracy, assert_replicas_equal, below,
                         cleanup, load_dataset, per_rank_batch, print0,
                         setup_distributed)

# the learning rate for global batch b, given base_lr tuned at batch base
RULES = {
    "none": lambda lr, b, base: lr,
    # SGD: Goyal et al. 2017, with warmup
    "linear": lambda lr, b, base: lr * b / base,
    "sqrt": lambda lr, b, base: lr * (b / base) ** 0.5,  # often used with Adam
    # and x processes in DDP only: for reduction='sum'
    "x-world": lambda lr, b, base: lr,
}
p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--batch-size", default="96",
               help="global batch(es), comma-separated")
p.add_argument("--accum", type=int, default=1,
               help="micro-batches per optimizer step")
p.add_argument("--optimizer", default="sgd",
               help="sgd, adam or both, comma-separated")
p.add_argument("--lr", type=float,
               help="base learning rate (default: sgd 0.05, adam 0.002)")
p.add_argument("--base-batch", type=int, default=96,
               help="the batch the base lr was tuned for")
p.add_argument("--scale", default="none",
               help=f"lr rule(s), comma-separated: {', '.join(RULES)}")
p.add_argument("--warmup-steps", default="0",
               help="raise the lr linearly over these steps "
               "(comma-separated)")
p.add_argument("--reduction", default="mean", choices=["mean", "sum"])
p.add_argument("--adam-eps", type=float, default=1e-8)
p.add_argument("--reference", action="store_true",
               help="rank 0 also trains one process on the same global "
               "batches with the rule's lr (not x processes); "
               "print max|dparam|")
p.add_argument("--seed", default="0",
               help="seed(s) of the initial weights and the batch order "
               "(comma-separated: one run per seed, to see the spread)")
p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
args = p.parse_args()
optimizers, rules = args.optimizer.split(","), args.scale.split(",")
batches = [int(b) for b in args.batch_size.split(",")]
warmups = [int(w) for w in args.warmup_steps.split(",")]
seeds = [int(s) for s in args.seed.split(",")]
if not set(optimizers) <= {"sgd", "adam"} or not set(rules) <= set(RULES):
    raise SystemExit(f"error: unknown optimizer or rule in "
                     f"{args.optimizer!r} / {args.scale!r}: "
                     f"optimizers sgd, adam; rules {', '.join(RULES)}")

rank, local_rank, world_size, device = setup_distributed(args.backend)
# images per rank per forward pass; a batch that does not split stops us
# before any training
micros = {b: per_rank_batch(b, world_size, args.accum) for b in batches}
# to compare in full float32: no TF32 (fp32_precision replaces the older
# allow_tf32 flags)
torch.backends.cuda.matmul.fp32_precision = \
    torch.backends.cudnn.conv.fp32_precision = "ieee"
train, test = load_dataset("digits")
print0(f"{world_size} processes, "
       f"backend {torch.distributed.get_backend()}, device {device.type}, "
       f"{args.epochs} epochs, loss reduction {args.reduction}")


def make_opt(params, name, lr):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    return torch.optim.Adam(params, lr=lr, eps=args.adam_eps)


trained = set()
runs = itertools.product(optimizers, batches, rules, warmups, seeds)
for opt_name, batch_size, rule, warmup_steps, seed in runs:
    micro = micros[batch_size]
    base_lr = args.lr or {"sgd": 0.05, "adam": 0.002}[opt_name]
    lr = RULES[rule](base_lr, batch_size, args.base_batch)
    ddp_lr = lr * world_size if rule == "x-world" else lr
    if (opt_name, batch_size, lr, ddp_lr, warmup_steps, seed) in trained:
        # another rule gave the same lr (at --base-batch none, linear,
        # sqrt do): done
        continue
    trained.add((opt_name, batch_size, lr, ddp_lr, warmup_steps, seed))
    # the same initial weights in every run with this seed, on every rank
    torch.manual_seed(seed)
    model = ConvNet().to(device)
    # the one-process reference (used on rank 0 with --reference)
    ref = copy.deepcopy(model)
    model = DDP(model,
                device_ids=[local_rank] if device.type == "cuda" else None)
    opt, ref_opt = (make_opt(model.parameters(), opt_name, ddp_lr),
                    make_opt(ref.parameters(), opt_name, lr))
    warmup = lambda step: (min(1.0, (step + 1) / warmup_steps)
                           if warmup_steps else 1.0)
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, warmup)
              for o in (opt, ref_opt)]
    # drop_last: only full global batches, so every micro-batch has the same
    # size (a short last batch would make the mean over micro-batches weight
    # its images unequally)
    sampler = DistributedSampler(train, seed=seed, drop_last=True)
    loader = DataLoader(train, batch_size=micro * args.accum, sampler=sampler,
                        drop_last=True)
    g = torch.Generator()
    ref_loader = DataLoader(train, batch_size=batch_size,
                            sampler=RandomSampler(train, generator=g),
                            drop_last=True)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            for i, (xm, ym) in enumerate(zip(x.split(micro),
                                             y.split(micro))):
                # sync at last
                with (model.no_sync() if i < args.accum - 1
                      else contextlib.nullcontext()):
                    loss = F.cross_entropy(model(xm.to(device)),
                                           ym.to(device),
                                           reduction=args.reduction)
                    # the mean over micro-batches
                    (loss / args.accum).backward()
            opt.step()
            scheds[0].step()
        # the same batches as the DistributedSampler's
        g.manual_seed(seed + epoch)
        for x, y in ref_loader if args.reference and rank == 0 else []:
            loss = F.cross_entropy(ref(x.to(device)), y.to(device),
                                   reduction=args.reduction)
            ref_opt.zero_grad()
            loss.backward()
            ref_opt.step()
            scheds[1].step()
    assert_replicas_equal(model)
    if rank == 0:
        # one short line per run: optimizer, global batch = processes x
        # micro-batch x accumulation, the learning rate and its rule, warmup
        # steps, seed, optimizer steps, test accuracy
        steps = args.epochs * len(loader)
        acc = accuracy(model.module, test, device)
        split = f"{world_size}x{micro}x{args.accum}"
        line = (f"{opt_name:4} {batch_size:3} = {split:7} lr {ddp_lr:.4f} "
                f"{rule:7}")
        if args.reference:  # the comparison instead of warmup, seed, ...
            diff = max((a - b).abs().max().item()
                       for a, b in zip(model.module.parameters(),
                                       ref.parameters()))
            line += f"  max|dparam| vs 1 process {below(diff)}"
        else:
            line += (f"  warmup {warmup_steps:2}  seed {seed}  "
                     f"{steps:3} steps  acc {acc:.4f}")
        print(line, flush=True)
cleanup()
