"""Step 15: two dimensions on one DeviceMesh. A small transformer, tensor
parallel (TP) inside each group of --tp processes, FSDP2 across the --dp
groups; compared step by step, inside rank 0, with the same model trained by
one process; resharded through distributed checkpoints (DCP)."""
import argparse
import contextlib
import copy
import os
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import (
    get_state_dict, set_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel, RowwiseParallel, parallelize_module)
from torch.utils.data import DataLoader, DistributedSampler

from ddp_helpers import (below, cleanup, fail, load_dataset,
                         print0, setup_distributed)

# torch 2.10's DCP writer calls tensor.storage(), which warns for every tensor
# it saves: harmless.
warnings.filterwarnings("ignore", "TypedStorage is deprecated", UserWarning)
# CommDebugMode's module tracker says that no input of the first module
# requires a gradient: true.
warnings.filterwarnings("ignore", "Full backward hook is firing", UserWarning)
# dcp.load(..., no_dist=True) in rank 0 says that it reads alone: that is
# what it is asked to do.
warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)

p = argparse.ArgumentParser()
p.add_argument("--tp", type=int, default=2,
               help="tensor-parallel degree: processes that split each layer")
p.add_argument("--dp", type=int,
               help="data-parallel (FSDP2) degree; default: world size / tp")
p.add_argument("--steps", type=int, default=8)
p.add_argument("--batch-size", type=int, default=96,
               help="global batch, over the dp groups")
p.add_argument("--lr", type=float, default=0.003)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--heads", type=int, default=8)
p.add_argument("--data-over", default="dp", choices=["dp", "world"],
               help="world: shard the data over every process "
                    "(the classic mistake)")
p.add_argument("--comm", action="store_true",
               help="print the collectives of the first step, per module")
p.add_argument("--save", help="write a DCP checkpoint to SAVE/step-N "
               "after step --save-step")
p.add_argument("--save-step", type=int, default=4)
p.add_argument("--resume", help="continue from this DCP checkpoint, "
               "saved on any mesh")
p.add_argument("--tolerance", type=float, default=1e-5,
               help="largest |loss difference| called equal")
p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
args = p.parse_args()
# Bad shapes, before any process group: one line, the same from every process
world = int(os.environ.get("WORLD_SIZE", 1))
# torchrun: the processes (GPUs) of a node
per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
dp = args.dp or max(1, world // args.tp)
if dp * args.tp != world:
    raise SystemExit(f"error: mesh (dp {dp}, tp {args.tp}) holds "
                     f"{dp * args.tp} processes, but the "
                     f"world size is {world}: dp x tp must equal it")
if args.tp > per_node:
    raise SystemExit(f"error: tp {args.tp} is larger than the {per_node} "
                     f"GPUs (processes) of one node: "
                     f"tensor parallel talks in every layer, "
                     f"keep it inside a node (tp <= {per_node})")
if args.batch_size % dp:
    raise SystemExit(f"error: batch size {args.batch_size} is not divisible "
                     f"by dp {dp}: use a multiple of {dp} "
                     f"(the tp processes of a group share their batch)")
if args.resume and not os.path.isfile(os.path.join(args.resume, ".metadata")):
    raise SystemExit(f"error: {args.resume} is not a DCP checkpoint "
                     f"(it has no .metadata file)")
if args.heads % args.tp:
    raise SystemExit(f"error: tp {args.tp} does not divide the "
                     f"{args.heads} attention heads")

rank, local_rank, world_size, device = setup_distributed(args.backend)
# GPUs: no TF32, so that one process compares
torch.backends.cuda.matmul.fp32_precision = "ieee"


class Block(nn.Module):
    """Attention and MLP, each after a LayerNorm, each added to its input."""

    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.norm2, self.head_dim = (
            nn.LayerNorm(dim), nn.LayerNorm(dim), dim // heads)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim)
                                          for _ in range(4))
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, _ = x.shape
        # -1: as many heads as this process holds (all of them, / tp under TP)
        h = self.norm1(x)
        q, k, v = (f(h).view(b, t, -1, self.head_dim).transpose(1, 2)
                   for f in (self.q, self.k, self.v))
        x = x + self.o(F.scaled_dot_product_attention(q, k, v)
                       .transpose(1, 2).reshape(b, t, -1))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Transformer(nn.Module):
    """Each row of an 8x8 digit is a token of 8 pixels: 8 tokens, 2 blocks, a
    class from their mean."""

    def __init__(self, dim=64, heads=8, layers=2):
        super().__init__()
        self.embed, self.pos = (nn.Linear(8, dim),
                                nn.Parameter(0.02 * torch.randn(8, dim)))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, 10)

    def forward(self, x):
        # [B, 1, 8, 8] -> [B, 8 tokens, dim]
        x = self.embed(x.flatten(1, 2)) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(1))


torch.manual_seed(args.seed)  # the same initial weights on every process
train, _ = load_dataset()
model = Transformer(heads=args.heads).to(device)
# the same model, trained by one process
ref = copy.deepcopy(model) if rank == 0 else None
# --8<-- [start:mesh]
if world_size > 1:
    # (dp, tp): ranks 0..tp-1 form the first TP group. torchrun numbers a
    # node's processes consecutively, so each TP group lies inside one node
    # and dp runs across nodes.
    mesh = init_device_mesh(device.type, (dp, args.tp),
                            mesh_dim_names=("dp", "tp"))
    # Megatron's split: column-wise in, row-wise out; one all-reduce per pair
    if args.tp > 1:
        # q, k, v: heads / tp each
        plan = {"q": ColwiseParallel(), "k": ColwiseParallel(),
                "v": ColwiseParallel(), "o": RowwiseParallel(),
                "up": ColwiseParallel(), "down": RowwiseParallel()}
        for block in model.blocks:
            parallelize_module(block, mesh["tp"], plan)
    # then FSDP2 over dp, on the TP-split weights: 2-D DTensors
    for block in model.blocks:
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    dp_rank, tp_group = mesh["dp"].get_local_rank(), mesh["tp"].get_group()
else:
    dp_rank, tp_group = 0, None
# --8<-- [end:mesh]
opt = torch.optim.Adam(model.parameters(), lr=args.lr)
# --8<-- [start:data]
# The dp rank picks the shard: the tp processes of one group read the same
# batch. (--data-over world, the mistake: every process reads its own, as in
# DDP.)
shards, shard = (dp, dp_rank) if args.data_over == "dp" else (world_size, rank)
sampler = DistributedSampler(train, num_replicas=shards, rank=shard,
                             seed=args.seed)
loader = DataLoader(train, batch_size=args.batch_size // shards,
                    sampler=sampler, drop_last=True)
# --8<-- [end:data]
# one process: the whole global batch, the samples the dp shards take together
if rank == 0:
    ref_opt = torch.optim.Adam(ref.parameters(), lr=args.lr)
    ref_loader = DataLoader(train, batch_size=args.batch_size, drop_last=True,
                            sampler=DistributedSampler(train, num_replicas=1,
                                                       rank=0, seed=args.seed))
if args.steps > len(loader):
    fail(f"error: --steps {args.steps}: at most {len(loader)}, "
         f"the steps of one epoch")
print0(f"{world_size} processes, mesh (dp {dp}, tp {args.tp}), "
       f"backend {dist.get_backend()}, device {device.type}, "
       f"batch {args.batch_size} = {shards} x {loader.batch_size}, "
       f"data over {args.data_over}")

for name in (["blocks.0.q.weight", "blocks.0.o.weight",
              "blocks.0.norm1.weight"] if world_size > 1 else []):
    # TP splits q by rows, o by columns; FSDP2 then splits dim 0 over dp
    t = model.get_parameter(name)
    print0(f"  {name}: {list(t.shape)} over {t.device_mesh.mesh_dim_names}, "
           f"{t.placements}, rank 0 holds {list(t.to_local().shape)}")

step = 0
# each process reads the pieces of its own shards, whatever mesh saved them
if args.resume:
    model_sd, optim_sd = get_state_dict(model, opt)
    state = {"model": model_sd, "optim": optim_sd, "step": 0, "mesh": ""}
    dcp.load(state, checkpoint_id=args.resume)
    set_state_dict(model, opt, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    step = state["step"]
    # and one process alone, without the others: whole tensors, no group
    if rank == 0:
        ref_sd, ref_optim_sd = get_state_dict(ref, ref_opt)
        alone = {"model": ref_sd, "optim": ref_optim_sd}
        dcp.load(alone, checkpoint_id=args.resume, no_dist=True)
        set_state_dict(ref, ref_opt, model_state_dict=alone["model"],
                       optim_state_dict=alone["optim"])
    print0(f"resumed {os.path.basename(args.resume)}, "
           f"saved on mesh {state['mesh']}, at step {step}")


# --8<-- [start:comm]
class CommBytes(CommDebugMode):
    """CommDebugMode counts each collective under the module that runs when it
    is issued; this adds its mesh dimension and its buffer's bytes (an
    all-reduce's tensor, an all-gather's output, a reduce-scatter's input):
    {(module, dim, collective): [forward, backward] [count, bytes]}."""

    def __init__(self, mesh):
        super().__init__()
        self.dims = {mesh[d].get_group().group_name: d
                     for d in mesh.mesh_dim_names}
        self.table = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        counted = self.get_total_counts()
        out = super().__torch_dispatch__(func, types, args, kwargs)
        # a collective (DTensor's dispatch comes back here)
        if self.get_total_counts() > counted:
            group = next(a if isinstance(a, str)
                         else dist.ProcessGroup.unbox(a).group_name
                         for a in args
                         if a in self.dims
                         or "ProcessGroup" in str(getattr(a, "_type", str)()))
            size = max(t.numel() * t.element_size() for t in args
                       if isinstance(t, torch.Tensor))
            name = (self.advanced_module_tracker.name.partition(".")[2]
                    or "(root)")
            # FSDP's collectives: to the unit (block or root) they serve
            if self.dims[group] == "dp":
                name = (".".join(name.split(".")[:2])
                        if name.startswith("blocks.") else "(root)")
            row = self.table.setdefault(
                (name, self.dims[group],
                 func.__name__.split(".")[0].strip("_")), [[0, 0], [0, 0]])
            row[self.advanced_module_tracker.is_bw][0] += 1
            row[self.advanced_module_tracker.is_bw][1] += size
        return out
# --8<-- [end:comm]




def show_comm(table):
    """The table of CommBytes, rows in the model's module order, from rank 0;
    checks the counts."""
    order = {name or "(root)": i
             for i, (name, _) in enumerate(model.named_modules())}
    names = {"all_reduce": "all-reduce", "allreduce": "all-reduce",
             "allgather_base": "all-gather",
             "reduce_scatter_base": "reduce-scatter"}
    print0(f"collectives of one training step on rank 0 "
           f"(count, bytes of the buffer)\n"
           f"{'module':16}{'dim':4}{'collective':16}"
           f"{'forward':>16}{'backward':>16}")
    for (name, dim, op), (fw, bw) in sorted(table.items(),
                                            key=lambda kv: order[kv[0][0]]):
        print0(f"{name:16}{dim:4}{names.get(op, op):16}" + "".join(
            f"{f'{n} x, {b:,}':>16}" if n else f"{'':>16}"
            for n, b in (fw, bw)))
    count = lambda dim, op, bw: sum(v[bw][0] for (_, d, o), v in table.items()
                                    if d == dim and names[o] == op)
    blocks = len(model.blocks)
    # forward: o and down (row-wise) sum outputs; backward: q, k, v and up
    if args.tp > 1:
        assert (count("tp", "all-reduce", 0) == 2 * blocks
                and count("tp", "all-reduce", 1) == 4 * blocks)
    # FSDP: each unit gathers forward, each block again backward (the root
    # keeps its weights), each unit reduce-scatters its gradients: three
    # collectives per block and step
    if dp > 1:
        assert (count("dp", "all-gather", 0) == blocks + 1
                and count("dp", "all-gather", 1) == blocks)
        assert count("dp", "reduce-scatter", 1) == blocks + 1


losses, ref_losses, same_batch = [], [], True
sampler.set_epoch(0)
if rank == 0:
    ref_batches = iter(ref_loader)
for i, (x, y) in enumerate(loader):
    if rank == 0:
        rx, ry = next(ref_batches)
    if i < step:  # resumed: these steps were trained before the checkpoint
        continue
    if i == args.steps:
        break
    x, y = x.to(device), y.to(device)
    # do the processes of this TP group hold the same batch?
    if tp_group is not None:
        # every tensor a collective sees lives on `device`: nccl has no
        # backend for CPU tensors
        sums = [torch.zeros(1, dtype=torch.float64, device=device)
                for _ in range(args.tp)]
        dist.all_gather(sums, x.double().sum().reshape(1), group=tp_group)
        same_batch &= all(torch.equal(s, sums[0]) for s in sums)
    comm = (CommBytes(mesh) if args.comm and i == step and world_size > 1
            else contextlib.nullcontext())
    # counts the collectives of the first step with --comm, else nothing
    with comm:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
    opt.step()
    if isinstance(comm, CommBytes):
        show_comm(comm.table)
    total = torch.tensor([loss.item()], dtype=torch.float64, device=device)
    # the mean over processes (the members of a TP group agree)
    dist.all_reduce(total)
    losses.append(total.item() / world_size)
    if rank == 0:  # the same step in one process, on the whole global batch
        ref_loss = F.cross_entropy(ref(rx.to(device)), ry.to(device))
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        ref_losses.append(ref_loss.item())
        print(f"step {i} loss {losses[-1]:.6f}, "
              f"one process {ref_losses[-1]:.6f}")
    if args.save and i + 1 == args.save_step:
        model_sd, optim_sd = get_state_dict(model, opt)
        dcp.save({"model": model_sd, "optim": optim_sd, "step": i + 1,
                  "mesh": f"(dp {dp}, tp {args.tp})"},
                 checkpoint_id=f"{args.save}/step-{i + 1}")
        print0(f"saved {args.save}/step-{i + 1}")

# What the TP group shares: its batch, and the weights that TP does not split
# (norms, embedding, head), which FSDP shards over dp only: one copy per
# member of the group.
flags = torch.tensor([same_batch, True], dtype=torch.float64, device=device)
for t in model.parameters():
    if (isinstance(t, DTensor) and t.device_mesh.ndim == 1
            and tp_group is not None):
        copies = [torch.empty_like(t.to_local()) for _ in range(args.tp)]
        dist.all_gather(copies, t.to_local().contiguous(), group=tp_group)
        flags[1] *= all(torch.equal(c, copies[0]) for c in copies)
dist.all_reduce(flags, op=dist.ReduceOp.MIN)
if rank == 0:
    gap = max(abs(a - b) for a, b in zip(losses, ref_losses))
    if args.tp > 1:
        print(f"each TP group read one batch: {bool(flags[0])}; "
              f"the weights TP does not split stayed "
              f"equal in the group: {bool(flags[1])}")
    # Within the tolerance only the decade is printed: the last digits differ
    # between CPUs.
    shown = below(gap) if gap <= args.tolerance else f"{gap:.1e}"
    print(f"largest |loss difference| from one process: {shown} "
          f"(tolerance {args.tolerance:g})")
    if args.data_over == "dp":  # the invariants of a correct 2-D run
        assert flags.all() and gap <= args.tolerance, (flags, gap)
    else:  # the mistake trains another model, silently
        assert not flags[0] and gap > args.tolerance
cleanup()
