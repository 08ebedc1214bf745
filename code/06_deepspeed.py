"""Step 6: the DDP script of step 1 converted to DeepSpeed. Start it with
torchrun, srun or deepspeed."""
import argparse
import json
import os
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler

# before importing deepspeed: use its CPU accelerator (gloo)
if not torch.cuda.is_available():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
import deepspeed  # noqa: E402
import deepspeed.ops  # noqa: E402

if not torch.cuda.is_available():  # workaround, CPU only
    # DeepSpeed's CPU accelerator compiles a shared-memory all-reduce (C++, up
    # to minutes; cached) that only its tensor-parallel inference uses. There
    # is no public switch (checked: DeepSpeed 0.19.8), so this edits a private
    # table, guarded: without it DeepSpeed just builds the op.
    ops_table = getattr(deepspeed.ops, "__compatible_ops__", None)
    if isinstance(ops_table, dict) and "deepspeed_shm_comm" in ops_table:
        ops_table["deepspeed_shm_comm"] = False
# DeepSpeed 0.19.8 calls torch.distributed functions that newer torch releases
# deprecate: harmless.
warnings.filterwarnings("ignore", r"`torch\.distributed\.\w+` is deprecated",
                        FutureWarning)

from ddp_helpers import (  # noqa: E402
    ConvNet, accuracy, assert_replicas_equal, cleanup, fail, load_dataset,
    mean_over_ranks, print0, setup_distributed)

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--dataset", default="digits")
p.add_argument("--data-dir", default="data")
p.add_argument("--zero-stage", type=int, choices=[0, 1, 2, 3],
               help="overrides the config's")
p.add_argument("--micro-batch", type=int,
               help="overrides train_micro_batch_size_per_gpu")
p.add_argument("--grad-accum", type=int,
               help="overrides gradient_accumulation_steps")
p.add_argument("--ckpt-dir",
               help="save a DeepSpeed checkpoint here after every epoch")
p.add_argument("--resume", action="store_true",
               help="continue from the latest checkpoint in --ckpt-dir")
p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
# DeepSpeed's own options: --deepspeed, --deepspeed_config
p = deepspeed.add_config_arguments(p)
args = p.parse_args()
if args.resume and not args.ckpt_dir:
    p.error("--resume needs --ckpt-dir")

rank, local_rank, world_size, device = setup_distributed(args.backend)
# The ds_config holds the batch sizes, ZeRO stage and precision; options
# override it.
config_file = args.deepspeed_config or os.path.join(
    os.path.dirname(__file__), "06_ds_config.json")
with open(config_file) as f:
    ds_config = json.load(f)
for key, value in [("train_micro_batch_size_per_gpu", args.micro_batch),
                   ("gradient_accumulation_steps", args.grad_accum)]:
    if value is not None:
        ds_config[key] = value
if args.zero_stage is not None:
    ds_config.setdefault("zero_optimization", {})["stage"] = args.zero_stage
stage = ds_config.get("zero_optimization", {}).get("stage", 0)
# DeepSpeed's rule, checked before anything starts: global batch = micro x
# accumulation x ranks
batch, accum = (ds_config["train_batch_size"],
                ds_config.get("gradient_accumulation_steps", 1))
micro = ds_config.setdefault("train_micro_batch_size_per_gpu",
                             batch // max(accum * world_size, 1))
if min(micro, accum) < 1 or micro * accum * world_size != batch:
    fail(f"error: train_batch_size {batch} != "
         f"train_micro_batch_size_per_gpu {micro} x "
         f"gradient_accumulation_steps {accum} x world size {world_size}: "
         f"fix the ds_config "
         f"(or give only two of the three and DeepSpeed computes the third)")

torch.manual_seed(args.seed)  # the same initial weights on every rank
train, test = load_dataset(args.dataset, args.data_dir)
# each rank reads its own 1/world_size of the data
sampler = DistributedSampler(train, seed=args.seed)
loader = DataLoader(train, batch_size=micro, sampler=sampler)
model = ConvNet(image_size=train[0][0].shape[-1])
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
# The engine replaces DDP: it moves the model to the device, averages
# gradients, shards (ZeRO).
engine, opt, _, _ = deepspeed.initialize(model=model, optimizer=opt,
                                         config=ds_config)
# With "bf16"/"fp16" enabled (GPUs) the engine casts the weights, not the
# inputs: cast those too
dtype = (torch.bfloat16 if engine.bfloat16_enabled()
         else torch.half if engine.fp16_enabled() else None)
print0(f"{world_size} processes, "
       f"backend {dist.get_backend()}, device {engine.device.type}, "
       f"ZeRO stage {stage}, "
       f"batch {batch} = {world_size} x {micro} x {accum} accumulation steps")

start_epoch = 0
if args.resume:
    # weights, optimizer, step counters
    path, client_state = engine.load_checkpoint(args.ckpt_dir)
    if path is not None:
        start_epoch = client_state["epoch"]
        print0(f"resumed from {os.path.relpath(path)} at epoch {start_epoch}")
for epoch in range(start_epoch, args.epochs):
    # a new, reproducible order every epoch, the same on all ranks
    sampler.set_epoch(epoch)
    total = 0.0
    for x, y in loader:
        x, y = x.to(engine.device, dtype), y.to(engine.device)
        loss = F.cross_entropy(engine(x), y)
        # averages gradients over ranks (ZeRO-2: each rank keeps its shard)
        engine.backward(loss)
        # optimizer step at the end of each accumulation, then zeroes the
        # gradients
        engine.step()
        total += loss.item()
    print0(f"epoch {epoch} loss {mean_over_ranks(total / len(loader)):.4f}")
    if args.ckpt_dir:  # every rank writes its own shard: call it on all ranks
        engine.save_checkpoint(args.ckpt_dir,
                               client_state={"epoch": epoch + 1})

# What ZeRO shards: the optimizer state (here SGD's momentum) each rank holds.
state = getattr(opt, "optimizer", opt).state  # ZeRO wraps the torch optimizer
state_bytes = sum(t.numel() * t.element_size()
                  for s in state.values() for t in s.values()
                  if torch.is_tensor(t))
per_rank = [None] * world_size
dist.all_gather_object(per_rank, state_bytes)
print0(f"optimizer state per rank: "
       f"{', '.join(f'{b:,}' for b in per_rank)} bytes")
if stage < 3:  # ZeRO-3 shards the parameters themselves
    assert_replicas_equal(engine.module)
# on every rank: ZeRO-3 gathers weights in forward
acc = accuracy(engine.module, test, engine.device, dtype=dtype)
print0(f"test accuracy {acc:.4f}")
cleanup()
