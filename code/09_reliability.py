"""Step 9: training that survives preemption, time limits and lost processes.

Rank 0 checkpoints everything the next epoch depends on at the end of every epoch (write,
then rename: a crash mid-write leaves the previous checkpoint intact). At start every rank
loads the checkpoint if there is one, so a requeued job or a restarted torchrun just carries
on, and ends with the weights of an uninterrupted run: bitwise with 2 processes, up to float
rounding with more (a new DDP's first all-reduce sums the gradients in another order).
"""
import argparse
import hashlib
import os
import random

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddp_helpers import (ConvNet, accuracy, assert_replicas_equal, cleanup, load_dataset,
                         mean_over_ranks, per_rank_batch, print0, setup_distributed)

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--batch-size", type=int, default=96, help="global batch, over all ranks")
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--dataset", default="digits")
p.add_argument("--data-dir", default="data")
p.add_argument("--checkpoint", default="runs/09-checkpoint.pt", help="resume from it if it exists")
p.add_argument("--stop-after", type=int, help="leave after this many epochs (a simulated preemption)")
p.add_argument("--save", help="write the trained weights here (rank 0)")
p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
p.add_argument("--timeout", type=int, default=300, help="seconds before a missing rank is an error")
args = p.parse_args()

rank, local_rank, world_size, device = setup_distributed(args.backend, timeout_s=args.timeout)
batch = per_rank_batch(args.batch_size, world_size)
torch.manual_seed(args.seed)
train, test = load_dataset(args.dataset, args.data_dir)
sampler = DistributedSampler(train, seed=args.seed)
loader = DataLoader(train, batch_size=batch, sampler=sampler)
model = ConvNet(image_size=train[0][0].shape[-1]).to(device)
model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
print0(f"{world_size} processes, backend {dist.get_backend()}, device {device.type}, "
       f"batch {args.batch_size} = {world_size} x {batch}")

# --8<-- [start:resume]
start, history = 0, []
if os.path.exists(args.checkpoint):
    # map_location="cpu": tensors saved from cuda:0 would otherwise all land on GPU 0.
    # load_state_dict then copies them to this rank's device.
    ckpt = torch.load(args.checkpoint, map_location="cpu")
    model.module.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])  # momentum buffers: without them, not the same run
    sched.load_state_dict(ckpt["scheduler"])
    sampler.set_epoch(ckpt["sampler_epoch"])
    torch.set_rng_state(ckpt["rng"]["torch"])
    if torch.cuda.is_available():
        torch.cuda.set_rng_state(ckpt["rng"]["cuda"][local_rank])
    random.setstate(ckpt["rng"]["python"])
    start, history = ckpt["epoch"], ckpt["history"]
    print0(f"resumed from {args.checkpoint}: {start} of {args.epochs} epochs done")
# --8<-- [end:resume]

for epoch in range(start, args.epochs):
    sampler.set_epoch(epoch)
    total = 0.0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
    sched.step()
    history.append(round(mean_over_ranks(total / len(loader)), 4))  # a collective: all ranks
    # --8<-- [start:save]
    if rank == 0:  # one writer; the weights are the same on every rank
        cuda_rng = [torch.cuda.get_rng_state(i) for i in range(torch.cuda.device_count())]
        state = {"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                 "scheduler": sched.state_dict(), "epoch": epoch + 1, "sampler_epoch": epoch + 1,
                 "history": history, "rng": {"torch": torch.get_rng_state(), "cuda": cuda_rng,
                                             "python": random.getstate()}}
        torch.save(state, args.checkpoint + ".tmp")
        os.replace(args.checkpoint + ".tmp", args.checkpoint)  # atomic: old or new, never half
    dist.barrier()  # nobody runs ahead of a checkpoint that is not written yet
    # --8<-- [end:save]
    if args.stop_after is not None and epoch + 1 == args.stop_after:
        print0(f"stopping after epoch {epoch} (checkpoint written)")
        cleanup()

assert_replicas_equal(model)
if rank == 0:
    # The full history comes from the checkpoint, so a resumed run prints the same lines.
    for epoch, loss in enumerate(history):
        print(f"epoch {epoch} loss {loss:.4f}")
    weights = b"".join(p.detach().cpu().numpy().tobytes() for p in model.module.parameters())
    print(f"weights sha256 {hashlib.sha256(weights).hexdigest()[:16]}")
    print(f"test accuracy {accuracy(model.module, test, device):.4f}")
    if args.save:
        torch.save(model.module.state_dict(), args.save)
cleanup()
