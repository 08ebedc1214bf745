"""Data for many ranks: step 1's DDP training, reading its data as a real data
set must be read on a cluster: prepared once, staged once per node, from one
packed file, by as many loader workers as the rank has cores. Start it with
torchrun or srun (--prepare-only and --stage-to run as plain python, without a
process group)."""
import argparse
import errno
import os
import shutil
import socket
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, Subset

from data_loading import DigitZip, cores_per_rank, prepare_digits
from ddp_helpers import (ConvNet, accuracy, assert_replicas_equal, cleanup,
                         fail, mean_over_ranks, per_rank_batch,
                         print0, setup_distributed)

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--batch-size", type=int, default=96,
               help="global batch, over all ranks")
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--data-dir", default="data",
               help="the folder holding digits-train.zip and digits-test.zip")
p.add_argument("--prepare-only", action="store_true",
               help="write the packed files into --data-dir, then stop")
p.add_argument("--stage-to",
               help="copy the packed files from --data-dir into this "
                    "node-local folder, then stop")
p.add_argument("--prepare", default="before",
               choices=["before", "rank0", "rank0-no-wait"],
               help="before: a step before the ranks did it; "
                    "rank0: rank 0 does it, the others wait")
p.add_argument("--prepare-wait", type=int, default=3600,
               help="seconds the ranks wait for rank 0 to prepare")
p.add_argument("--slow-prepare", type=float, default=0,
               help="seconds the preparation takes first (a large data set)")
p.add_argument("--max-workers", type=int, default=8,
               help="loader workers per rank, at most")
p.add_argument("--train-images", type=int,
               help="train on the first N images only (a small data set)")
p.add_argument("--drop-last", action="store_true",
               help="drop each rank's last, smaller batch")
p.add_argument("--sync-bn", action="store_true",
               help="BatchNorm over the global batch (GPUs only)")
p.add_argument("--save", help="write the trained weights here (rank 0)")
p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
args = p.parse_args()
host = socket.gethostname()
FILES = [os.path.join(args.data_dir, f"digits-{split}.zip")
         for split in ("train", "test")]


def shown(path):
    """The path as the batch script names it: $TMPDIR, $SLURM_JOB_ID rather
    than their values."""
    tmp, job = os.environ.get("TMPDIR"), os.environ.get("SLURM_JOB_ID")
    if tmp and tmp != "/tmp" and (path == tmp or path.startswith(tmp + "/")):
        path = "$TMPDIR" + path[len(tmp):]
    return path.replace(job, "$SLURM_JOB_ID") if job else path


# --8<-- [start:prepare]
# once, before any rank reads: login node, batch script or a job of its own
if args.prepare_only:
    # scikit-learn's digits, written as files
    prepare_digits(args.data_dir, slow=args.slow_prepare)
    print(f"prepared {' and '.join(FILES)}")
    sys.exit()
# --8<-- [end:prepare]
# --8<-- [start:stage]
# one task per node (srun --ntasks-per-node=1): the packed files to its disk
if args.stage_to:
    if not all(map(os.path.exists, FILES)):
        raise SystemExit(f"error: nothing to stage: {FILES[0]} does not "
                         f"exist: prepare it first (--prepare-only)")
    os.makedirs(args.stage_to, exist_ok=True)
    need, free = (sum(map(os.path.getsize, FILES)),
                  shutil.disk_usage(args.stage_to).free)
    full = (f"error: {shown(args.stage_to)} on {host} is full: "
            f"{free // 1024} KiB free, the data needs "
            f"{need // 1024} KiB: free it, or ask for more "
            f"(on LUMI /tmp is the job's memory: --mem)")
    if free < need:
        raise SystemExit(full)
    try:
        # as prepare_digits() does: a temporary name, renamed when complete
        for src in FILES:
            dst = os.path.join(args.stage_to, os.path.basename(src))
            shutil.copyfile(src, dst + ".partial")
            os.replace(dst + ".partial", dst)
    except OSError as e:  # filled up meanwhile (another job's files)
        raise SystemExit(full if e.errno == errno.ENOSPC
                         else f"error: staging on {host}: {e}") from None
    print(f"{host}: staged {len(FILES)} files, {need // 1024} KiB, "
          f"in {shown(args.stage_to)}", flush=True)
    sys.exit()
# --8<-- [end:stage]

rank, local_rank, world_size, device = setup_distributed(args.backend)
batch = per_rank_batch(args.batch_size, world_size)
# the same initial weights on every rank (DDP also broadcasts them)
torch.manual_seed(args.seed)
# --8<-- [start:once]
if args.prepare != "before":  # inside the job: rank 0 alone prepares ...
    if rank == 0 and not all(map(os.path.exists, FILES)):
        prepare_digits(args.data_dir, slow=args.slow_prepare)
    # ... and the others wait, with a timeout that allows it
    if args.prepare == "rank0":
        dist.barrier(group=dist.new_group(
            backend="gloo", timeout=timedelta(seconds=args.prepare_wait)))
# --8<-- [end:once]
# --8<-- [start:check]
# Every rank checks the files it will read; all ranks learn who lacks them,
# and stop together.
missing = [path for path in FILES if not os.path.exists(path)]
everyone = [None] * world_size
dist.all_gather_object(everyone, (host, missing))
# (rank, node, first missing file)
lacking = [(r, h, m[0]) for r, (h, m) in enumerate(everyone) if m]
if lacking and FILES[0].startswith(
        (os.environ.get("TMPDIR", "/tmp"), "/tmp")):  # node-local copies
    fail(f"error: no staged copy {shown(lacking[0][2])} on node "
         f"{', '.join(sorted({h for _, h, _ in lacking}))}"
         f": stage on every node: "
         f"srun --ntasks-per-node=1 python code/13_data.py --stage-to DIR")
if lacking:
    fail(f"error: {lacking[0][2]} does not exist for rank "
         f"{', '.join(str(r) for r, _, _ in lacking)}: "
         f"prepare it once before the ranks read it: "
         f"python code/13_data.py --prepare-only --data-dir {args.data_dir} "
         f"(your own data: "
         f"fetch it into {args.data_dir} on a login node first)")
train, test = DigitZip(FILES[0]), DigitZip(FILES[1])
if args.train_images:
    train = Subset(train, range(args.train_images))
# --8<-- [end:check]
# --8<-- [start:workers]
cores, seen, sharing = cores_per_rank()
# one core stays with the rank's own process
workers = min(args.max_workers, cores - 1)
# each rank reads its own 1/world_size of the data
sampler = DistributedSampler(train, seed=args.seed)
loader = DataLoader(train, batch_size=batch, sampler=sampler,
                    num_workers=workers, drop_last=args.drop_last,
                    # the same workers (and open files) every epoch
                    persistent_workers=workers > 0,
                    # page-locked batches: faster copies to the GPU
                    pin_memory=device.type == "cuda",
                    # fork, asked for: Python 3.14's forkserver would run
                    # this file again in each worker
                    multiprocessing_context="fork" if workers else None)
print0(f"SLURM_CPUS_PER_TASK="
       f"{os.environ.get('SLURM_CPUS_PER_TASK', 'unset')}; "
       f"rank 0 sees {seen} cores, shared by {sharing} rank(s): "
       f"{cores} each, so {workers} loader workers per rank")
# --8<-- [end:workers]
# --8<-- [start:model]
# A head with BatchNorm1d, as many real models have: it needs 2+ images per
# batch in training.
model = nn.Sequential(ConvNet(batchnorm=True).features, nn.Flatten(),
                      nn.Linear(128, 64), nn.BatchNorm1d(64), nn.ReLU(),
                      nn.Linear(64, 10))
norms = sum(isinstance(m, nn.modules.batchnorm._BatchNorm)
            for m in model.modules())
# statistics over the global batch: 2 collectives a layer a step (GPUs only)
if args.sync_bn:
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
# --8<-- [end:model]
model = DDP(model.to(device),
            device_ids=[local_rank] if device.type == "cuda" else None)
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
last = len(sampler) % batch
print0(f"{world_size} processes, "
       f"backend {dist.get_backend()}, device {device.type}, "
       f"batch {args.batch_size} = {world_size} x {batch}; "
       f"{len(sampler)} images per rank: {len(loader)} batches"
       + (f", the last of {last} image(s)"
          if last and not args.drop_last else "")
       + f"; {norms} BatchNorm layers, "
       f"statistics {'over all ranks' if args.sync_bn else 'per rank'}")

for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    total = 0.0
    for x, y in loader:
        x, y = (x.to(device, non_blocking=True),
                y.to(device, non_blocking=True))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
    print0(f"epoch {epoch} loss {mean_over_ranks(total / len(loader)):.4f}")

assert_replicas_equal(model)
hosts = [None] * world_size
dist.all_gather_object(hosts, host)
print0(f"{world_size} ranks on {len(set(hosts))} node(s) read "
       f"{shown(FILES[0])}")
if rank == 0:
    print(f"test accuracy {accuracy(model.module, test, device):.4f}")
    # on a node-local disk: the batch script copies it back before the job ends
    if args.save:
        torch.save(model.module.state_dict(), args.save)
cleanup()
