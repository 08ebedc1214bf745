"""Step 12: step 1's DDP training sharded with FSDP2 (fully_shard), with
distributed checkpoints (DCP), bf16 and torch.compile. --mode ddp trains the
same way with DDP, for comparison."""
import argparse
import os
import time
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions, get_model_state_dict, get_state_dict, set_state_dict)
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddp_helpers import (ConvNet, accuracy, assert_replicas_equal, cleanup,
                         fail, load_dataset, mean_over_ranks, per_rank_batch,
                         print0, setup_distributed)

# torch 2.10's DCP writer calls tensor.storage(), which warns for every tensor
# it saves: harmless.
warnings.filterwarnings("ignore", "TypedStorage is deprecated", UserWarning)

p = argparse.ArgumentParser()
p.add_argument("--mode", default="fsdp", choices=["fsdp", "ddp"])
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--batch-size", type=int, default=96,
               help="global batch, over all ranks")
p.add_argument("--lr", type=float, default=0.003)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--dataset", default="digits")
p.add_argument("--data-dir", default="data")
p.add_argument("--mp", default="fp32", choices=["fp32", "bf16"],
               help="bf16: compute in bfloat16")
p.add_argument("--compile", action="store_true",
               help="torch.compile: DDP after wrapping, FSDP2 each block "
                    "before sharding it")
p.add_argument("--compile-root", action="store_true",
               help="FSDP2: compile the sharded root instead (the pitfall)")
p.add_argument("--compile-inner", action="store_true",
               help="DDP: compile the model, then wrap it (nanoGPT's "
                    "order, and PyTorch's advice for wrappers)")
p.add_argument("--save", help="write a DCP checkpoint to SAVE/epoch-N "
               "after every epoch (every rank)")
p.add_argument("--resume", help="continue from this DCP checkpoint, "
               "saved by any number of processes")
p.add_argument("--export", help="write the whole model as one plain "
               "state_dict file (rank 0)")
p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
args = p.parse_args()
if args.resume and not os.path.isfile(os.path.join(args.resume, ".metadata")):
    raise SystemExit(f"error: {args.resume} is not a DCP checkpoint "
                     f"(it has no .metadata file)")

rank, local_rank, world_size, device = setup_distributed(args.backend)
batch = per_rank_batch(args.batch_size, world_size)
# the same initial weights on every rank: each then keeps its shard
torch.manual_seed(args.seed)
train, test = load_dataset(args.dataset, args.data_dir)
# each rank reads its own 1/world_size of the data
sampler = DistributedSampler(train, seed=args.seed)
loader = DataLoader(train, batch_size=batch, sampler=sampler)
net = model = ConvNet(image_size=train[0][0].shape[-1]).to(device)
bf16 = args.mp == "bf16"
# --8<-- [start:shard]
if args.mode == "fsdp":
    # bf16: weights gathered and used in bf16, gradients reduced in fp32, the
    # shards stay fp32
    bf16_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                       reduce_dtype=torch.float32)
    mp = bf16_policy if bf16 else MixedPrecisionPolicy()
    # bottom-up: each block gathers its weights in one all-gather
    for block in net.features:
        if isinstance(block, nn.Conv2d):
            # compile each block before sharding it, as torchtitan: FSDP's
            # hooks stay outside
            if args.compile and not args.compile_root:
                block.forward = torch.compile(block.forward)
            fully_shard(block, mp_policy=mp)
    # the root: the rest (fc), and the forward everything enters by
    fully_shard(net, mp_policy=mp)
else:
    if args.compile_inner:
        # compiled in place; DDP's forward then runs the compiled module
        net.compile()
    model = DDP(net,
                device_ids=[local_rank] if device.type == "cuda" else None)
# --8<-- [end:shard]
if args.compile and args.mode == "ddp" or args.compile_root:
    # DDP: after wrapping, so that compile sees DDP's buckets
    model = torch.compile(model)
# after sharding: it steps this rank's shards
opt = torch.optim.Adam(model.parameters(), lr=args.lr)
compiled = args.compile or args.compile_root or args.compile_inner
print0(f"{world_size} processes, {args.mode}, {args.mp}"
       f"{', compiled' if compiled else ''}, backend "
       f"{dist.get_backend()}, device {device.type}, "
       f"batch {args.batch_size} = {world_size} x {batch}")

start_epoch = 0
# get_state_dict: this rank's shards, the layout to fill, whoever saved the
# checkpoint
if args.resume:
    model_sd, optim_sd = get_state_dict(model, opt)
    saved = (dcp.FileSystemReader(args.resume).read_metadata()
             .state_dict_metadata)
    for name, t in model_sd.items():
        old = getattr(saved.get(f"model.{name}"), "size", None)
        if old != t.shape:
            fail(f"error: {args.resume} holds another model: model.{name} is "
                 f"{list(old) if old else 'missing'} there, "
                 f"{list(t.shape)} here")
    state = {"model": model_sd, "optim": optim_sd, "epoch": 0, "world_size": 0}
    # each rank reads the pieces of its own shards
    dcp.load(state, checkpoint_id=args.resume)
    set_state_dict(model, opt, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    start_epoch = state["epoch"]
    print0(f"resumed {os.path.basename(args.resume)}, "
           f"saved by {state['world_size']} processes, "
           f"at epoch {start_epoch}")

# async_save coordinates on CPU
cpu_group = dist.new_group(backend="gloo") if args.save else None
saving, waited, step_times = None, 0.0, []
for epoch in range(start_epoch, args.epochs):
    # a new, reproducible order every epoch, the same on all ranks
    sampler.set_epoch(epoch)
    total = 0.0
    for x, y in loader:
        t0 = time.perf_counter()
        x, y = x.to(device), y.to(device)
        with torch.autocast(device.type, torch.bfloat16,
                            enabled=bf16 and args.mode == "ddp"):
            # always through the root: FSDP gathers each block's weights in
            # its forward
            out = model(x)
        loss = F.cross_entropy(out.float(), y)  # the loss in fp32
        opt.zero_grad()
        # DDP all-reduces gradients; FSDP reduce-scatters them: each rank
        # keeps its shard
        loss.backward()
        opt.step()
        total += loss.item()
        step_times.append(time.perf_counter() - t0)
    print0(f"epoch {epoch} loss {mean_over_ranks(total / len(loader)):.4f}")
    # every rank writes its own shards, in the background while the next
    # epoch trains
    if args.save:
        t0 = time.perf_counter()
        if saving is not None:
            saving.result()  # one checkpoint in flight at a time
        model_sd, optim_sd = get_state_dict(model, opt)
        saving = dcp.async_save({"model": model_sd, "optim": optim_sd,
                                 "epoch": epoch + 1,
                                 "world_size": world_size},
                                checkpoint_id=f"{args.save}/epoch-{epoch + 1}",
                                process_group=cpu_group)
        waited += time.perf_counter() - t0
if saving is not None:
    saving.result()
    print0(f"saved epoch-{start_epoch + 1}..epoch-{args.epochs} "
           f"in the background; training waited {waited:.3f} s for them")
# dynamo's counters: what it compiled, where it broke the graph
if args.compile or args.compile_root or args.compile_inner:
    c, later = (torch._dynamo.utils.counters,
                sorted(step_times[1:])[len(step_times) // 2])
    print0(f"compiled {c['stats']['unique_graphs']} graph(s) holding "
           f"{c['stats']['calls_captured']} ops, "
           f"{sum(c['graph_break'].values())} graph break(s); "
           f"first step (compiling) over 10x the median later step: "
           f"{step_times[0] > 10 * later}")


def nbytes(tensors):  # of a DTensor, count the local part: this rank's shard
    return sum((t.to_local() if isinstance(t, DTensor) else t).numel()
               * t.element_size() for t in tensors)


params = list(net.parameters())
held = [nbytes(params), nbytes(p.grad for p in params),
        nbytes(t for s in opt.state.values() for t in s.values())]
per_rank = [None] * world_size
dist.all_gather_object(per_rank, held)
for i, what in enumerate(["parameters", "gradients", "optimizer state"]):
    print0(f"{what} per rank: "
           f"{', '.join(f'{r[i]:,}' for r in per_rank)} bytes")
if args.mode == "fsdp":  # the shards add up to the model, exactly once
    assert sum(r[0] for r in per_rank) == sum(t.numel() * t.element_size()
                                              for t in params)
    for name, t in net.named_parameters():
        print0(f"  {name}: {type(t).__name__} {list(t.shape)}, "
               f"{t.placements[0]!r}, "
               f"rank 0 holds {list(t.to_local().shape)}")
else:
    assert_replicas_equal(net)
print0(f"dtypes: forward output {out.dtype}, parameters {params[0].dtype}, "
       f"gradients {params[0].grad.dtype}, "
       f"optimizer state {opt.state[params[0]]['exp_avg'].dtype}")

# The whole model, gathered from the shards, as a plain state_dict on rank 0
# (all ranks take part)
full = get_model_state_dict(model, options=StateDictOptions(
    full_state_dict=True, cpu_offload=True))
if rank == 0:
    plain = ConvNet(image_size=train[0][0].shape[-1])
    # a plain model in one process: no DDP, no FSDP
    plain.load_state_dict(full)
    print(f"test accuracy {accuracy(plain, test, torch.device('cpu')):.4f}")
    if args.export:
        torch.save(full, args.export)
cleanup()
