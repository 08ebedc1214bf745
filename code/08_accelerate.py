"""Step 8: the DDP script of step 1 with Hugging Face Accelerate. Start it with
accelerate launch or torchrun."""
import argparse
import os
from datetime import timedelta

import torch
import torch.nn.functional as F
from accelerate import (Accelerator, DataLoaderConfiguration,
                        InitProcessGroupKwargs)
from accelerate.utils import DistributedType
from torch.utils.data import DataLoader

from ddp_helpers import (ConvNet, accuracy, assert_replicas_equal, cleanup,
                         fail, load_dataset, per_rank_batch, print0)

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--batch-size", type=int, default=96,
               help="global batch, over all ranks")
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--dataset", default="digits")
p.add_argument("--data-dir", default="data")
p.add_argument("--save", help="write the trained weights here (rank 0)")
args = p.parse_args()
# Accelerate imports DeepSpeed (step 6) if installed: no GPU probe warning
if not torch.cuda.is_available():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")

# Accelerate reads the launcher's variables (RANK, WORLD_SIZE, ...) and joins
# the process group. cpu=True where there is no GPU: otherwise Accelerate
# ignores WORLD_SIZE and each process trains alone.
accelerator = Accelerator(
    cpu=not torch.cuda.is_available(),
    # the sampler below: a new, reproducible order per epoch, as
    # DistributedSampler
    dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True,
                                              data_seed=args.seed),
    kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=300))])
world_size, kind = accelerator.num_processes, accelerator.distributed_type
if world_size != int(os.environ.get("WORLD_SIZE", 1)):
    fail(f"error: Accelerate sees {world_size} process(es), "
         f"the launcher started {os.environ['WORLD_SIZE']}")
if (os.environ.get("ACCELERATE_USE_FSDP") == "true"
        and kind != DistributedType.FSDP):
    # once, not once per rank
    print0(f"error: the config asks for FSDP, but Accelerate runs "
           f"{kind.value} here: Accelerate's FSDP needs GPUs "
           f"({torch.cuda.device_count()} visible)")
    raise SystemExit(1)
batch = per_rank_batch(args.batch_size, world_size)
torch.manual_seed(args.seed)  # the same initial weights on every rank
train, test = load_dataset(args.dataset, args.data_dir)
# prepare() shards it over the ranks
loader = DataLoader(train, batch_size=batch, shuffle=True)
model = ConvNet(image_size=train[0][0].shape[-1])
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
# prepare(): moves the model to this rank's device and wraps it (DDP, or FSDP
# from the config), and gives each rank its own share of every batch, moved to
# the device.
model, opt, loader = accelerator.prepare(model, opt, loader)
# print0, not accelerator.print: that prints once per node (on each node's
# local rank 0)
backend = (torch.distributed.get_backend()
           if torch.distributed.is_initialized() else "none")
print0(f"{world_size} processes, {kind.value}, backend {backend}, "
       f"device {accelerator.device.type}, "
       f"batch {args.batch_size} = {world_size} x {batch}")

for epoch in range(args.epochs):
    loader.set_epoch(epoch)
    total = 0.0
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        # loss.backward(), plus what the wrapper needs (scaling, FSDP)
        accelerator.backward(loss)
        opt.step()
        total += loss.item()
    mean = accelerator.reduce(
        torch.tensor(total / len(loader), device=accelerator.device), "mean")
    print0(f"epoch {epoch} loss {mean.item():.4f}")

# FSDP keeps only a shard of each weight on each rank
if kind != DistributedType.FSDP:
    assert_replicas_equal(model)
# the full weights (gathered from the shards under FSDP)
state = accelerator.get_state_dict(model)
# on every rank: an FSDP forward needs all ranks
acc = accuracy(model, test, accelerator.device)
print0(f"test accuracy {acc:.4f}")
if accelerator.is_main_process and args.save:
    torch.save(state, args.save)
cleanup()
