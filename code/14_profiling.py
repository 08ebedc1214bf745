"""Step 14: see one DDP step. torch.profiler traces a few steps on every rank,
with ranges for data, forward, backward and optimizer, for three variants of
the same training: DDP's default gradient buckets, small buckets, and
accumulation with no_sync(). One trace file per rank and variant: open it in
Perfetto (ui.perfetto.dev) or draw it with code/14_timeline.py.
"""
import argparse
import contextlib
import os

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from torch.utils.data import DataLoader, DistributedSampler

from ddp_helpers import (ConvNet, assert_replicas_equal, cleanup, load_dataset,
                         per_rank_batch, print0, setup_distributed)

# name: (bucket_cap_mb, micro-batches per optimizer step, all but the last
# under no_sync)
# (None: DDP's default, 25 MB, and a first bucket of 1 MB; the model's
# gradients are 58 KB)
VARIANTS = {"default": (None, 1), "small-buckets": (0.001, 1),
            "no-sync": (None, 4)}

p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int, default=96,
               help="global batch, over all ranks")
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--dataset", default="digits")
p.add_argument("--data-dir", default="data")
p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
p.add_argument("--variants", default=",".join(VARIANTS),
               help=f"some of {', '.join(VARIANTS)}")
p.add_argument("--trace-dir", default="runs/14-trace",
               help="one folder per variant, a file per rank")
p.add_argument("--active", type=int, default=3,
               help="steps traced (after 1 skipped, 1 warm-up)")
args = p.parse_args()
variants = args.variants.split(",")
if not set(variants) <= set(VARIANTS):
    raise SystemExit(f"error: --variants {args.variants!r}: "
                     f"choose from {', '.join(VARIANTS)}")
if args.batch_size < 1:
    raise SystemExit(f"error: --batch-size {args.batch_size}: must be >= 1")
train, _ = load_dataset(args.dataset, args.data_dir)
# One epoch, no more: its optimizer steps (len // batch or more, at every
# world size) must hold the 1 skipped, the 1 warm-up and the traced ones.
epoch = len(train) // args.batch_size
if epoch < 3:
    raise SystemExit(f"error: --batch-size {args.batch_size}: an epoch of "
                     f"{len(train):,} images has {epoch} step(s) of it, the "
                     f"profiler needs 3 or more (1 skipped, 1 warm-up, "
                     f"1 traced)")
if not 1 <= args.active <= epoch - 2:
    raise SystemExit(f"error: --active {args.active}: must be from 1 to "
                     f"{epoch - 2} (an epoch of {len(train):,} images has "
                     f"{epoch} steps of --batch-size {args.batch_size}; "
                     f"the profiler skips 1 and warms up 1)")
# before the process group: a trace that cannot be written is a one-line
# error, not a hang
try:
    for v in variants:
        os.makedirs(os.path.join(args.trace_dir, v), exist_ok=True)
        if not os.access(os.path.join(args.trace_dir, v), os.W_OK):
            raise PermissionError(13, "Permission denied")
except OSError as e:
    raise SystemExit(f"error: cannot write traces to --trace-dir "
                     f"{args.trace_dir} ({e.strerror}): give a folder you "
                     f"can write, e.g. under your project's scratch") from None

rank, local_rank, world_size, device = setup_distributed(args.backend)
torch.manual_seed(args.seed)
sampler = DistributedSampler(train, seed=args.seed)
# the CPU profiler always; on GPUs the kernels too (NCCL's all-reduce kernels
# on their own stream)
activities = ([ProfilerActivity.CPU]
              + ([ProfilerActivity.CUDA] if device.type == "cuda" else []))
# a CUDA build of torch on a CPU node: the profiler's library (kineto) would
# log that it found no GPU
if device.type == "cpu":
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
print0(f"{world_size} processes, "
       f"backend {torch.distributed.get_backend()}, device {device.type}")

for name in variants:
    bucket_cap_mb, accum = VARIANTS[name]
    loader = DataLoader(
        train, batch_size=per_rank_batch(args.batch_size, world_size, accum),
        sampler=sampler, drop_last=True)
    torch.manual_seed(args.seed)
    model = ConvNet(image_size=train[0][0].shape[-1]).to(device)
    # bucket_cap_mb: DDP all-reduces the gradients in buckets of about this
    # size, each as soon as backward has filled it: smaller buckets start
    # sooner and overlap more with backward
    model = DDP(model,
                device_ids=[local_rank] if device.type == "cuda" else None,
                bucket_cap_mb=bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    batches = iter(loader)
    path = os.path.join(args.trace_dir, name, f"rank{rank}.json")
    # a few steps, not an epoch: skip 1 (start-up), warm up 1 (the profiler's
    # own start), record `active`; then write this rank's trace. Every traced
    # step adds to the file's size. One cycle (repeat=1): quiet.
    with profile(
            activities=activities, acc_events=True,
            schedule=schedule(wait=1, warmup=1, active=args.active, repeat=1),
            on_trace_ready=lambda prof: prof.export_chrome_trace(path),
    ) as prof:
        for step in range(2 + args.active):
            for micro in range(accum):
                with record_function("data"):
                    x, y = next(batches)
                    x, y = x.to(device), y.to(device)
                # no_sync(): gradients only add up locally; the last
                # micro-batch all-reduces them
                sync = (contextlib.nullcontext() if micro == accum - 1
                        else model.no_sync())
                with sync:
                    with record_function("forward"):
                        loss = F.cross_entropy(model(x), y) / accum
                    with record_function("backward"):
                        # DDP's all-reduces start in here, bucket by bucket
                        loss.backward()
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad()
            prof.step()
    assert_replicas_equal(model)
    print0(f"{name}: bucket_cap_mb {bucket_cap_mb or 'default'}, "
           f"{accum} micro-batch(es) per step, "
           f"{args.active} steps traced: {name}/rank0..{world_size - 1}.json")
cleanup()
