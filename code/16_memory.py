"""Step 16: the bytes each rank holds, measured from the frameworks' own
objects and set beside code/memory_formula.py. --part layouts: DDP, FSDP2 and
FSDP2 x TP after one optimizer step; --part zero: DeepSpeed's ZeRO-1 and
ZeRO-2; --part activations: the bytes saved for backward, without and with
activation checkpointing."""
import argparse
import gc
import math
import os
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from torch.utils._python_dispatch import TorchDispatchMode

from ddp_helpers import cleanup, fail, print0, setup_distributed
from memory_formula import GIB, bytes_per_device

p = argparse.ArgumentParser()
p.add_argument("--part", nargs="+", default=["layouts"],
               choices=["layouts", "zero", "activations"])
p.add_argument("--dim", type=int, default=256, help="width of the model")
p.add_argument("--layers", type=int, default=6,
               help="blocks (each LayerNorm, Linear up x4, GELU, Linear down)")
p.add_argument("--tp", type=int, default=2,
               help="tensor-parallel degree of the fsdp2-tp layout")
p.add_argument("--batch", type=int, default=4, help="samples per rank")
p.add_argument("--tokens", type=int, default=64, help="tokens per sample")
p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
args = p.parse_args()
# Layouts that cannot be built: one line, from every process, before any
# process group
world = int(os.environ.get("WORLD_SIZE", 1))
if "layouts" in args.part and world > 1 and (args.tp < 1 or world % args.tp):
    raise SystemExit(f"error: tensor-parallel degree {args.tp} does not "
                     f"divide the world size {world}: "
                     f"fsdp2-tp needs devices = dp x tp")
if "layouts" in args.part and args.dim % max(args.tp, 1):
    raise SystemExit(f"error: tensor-parallel degree {args.tp} does not "
                     f"divide the width {args.dim}")
if "zero" in args.part:
    if not torch.cuda.is_available():
        # before importing deepspeed: its CPU accelerator (gloo)
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed  # noqa: E402
    import deepspeed.ops  # noqa: E402
    # as step 6: skip a C++ build
    ops_table = getattr(deepspeed.ops, "__compatible_ops__", None)
    if (not torch.cuda.is_available() and isinstance(ops_table, dict)
            and "deepspeed_shm_comm" in ops_table):
        ops_table["deepspeed_shm_comm"] = False
    warnings.filterwarnings(
        "ignore", r"`torch\.distributed\.\w+` is deprecated", FutureWarning)

rank, local_rank, world_size, device = setup_distributed(args.backend)
torch.backends.cuda.matmul.fp32_precision = "ieee"


class Block(nn.Module):
    """x + down(gelu(up(norm(x)))): the MLP half of a transformer block."""

    def __init__(self, dim):
        super().__init__()
        self.norm, self.up, self.down = (nn.LayerNorm(dim),
                                         nn.Linear(dim, 4 * dim),
                                         nn.Linear(4 * dim, dim))

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Checkpointed(nn.Module):
    """A block whose activations are recomputed in backward: only its input is
    kept."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False)


class Model(nn.Module):
    def __init__(self, dim, layers):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim) for _ in range(layers))
        self.head = nn.Linear(dim, 10)
        # set by Saved(): counts what the blocks keep for backward
        self.saved = None

    def forward(self, x):  # x: [batch, tokens, dim]
        with self.saved or torch.autograd.graph.saved_tensors_hooks(
                lambda t: t, lambda t: t):
            for block in self.blocks:
                x = block(x)
        return self.head(x.mean(1))


def local(t):  # of a DTensor, this rank's own piece
    return t.to_local() if hasattr(t, "to_local") else t


def nbytes(tensors):
    return sum(local(t).numel() * local(t).element_size() for t in tensors)


def step(model, opt, dim):
    """One training step on random data, so that gradients and optimizer state
    exist."""
    x = torch.randn(args.batch, args.tokens, dim, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def gathered(value):
    out = [None] * world_size
    dist.all_gather_object(out, value)
    return out


# (layout, optimizer, term, measured per rank [all ranks], formula, expected
# extra per rank)
rows = []


def row(layout, optimizer, term, measured, formula, extra):
    ranks = gathered(measured)
    extras = gathered(extra)
    rows.append((layout, optimizer, term, ranks, formula, extras))
    # formula = measurement, up to the padding this script computes from the
    # shapes
    assert all(abs(m - formula - e) < 1 for m, e in zip(ranks, extras)), (
        layout, term, ranks, formula, extras)


def show():
    # measured on rank 0; in brackets the largest difference over the ranks
    print0(f"{'layout':10}{'optimizer':10}{'term':10}{'rank 0':>11}"
           f"{'formula':>11}{'difference':>12}  (largest)")
    for layout, optimizer, term, ranks, formula, extras in rows:
        print0(f"{layout:10}{optimizer:10}{term:10}{ranks[0]:11,}"
               f"{formula:11,.0f}{ranks[0] - formula:12,.0f}"
               f"  ({max(abs(m - formula) for m in ranks):,.0f})")


params_total = sum(t.numel()
                   for t in Model(args.dim, args.layers).parameters())

if "layouts" in args.part:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (ColwiseParallel,
                                                   RowwiseParallel,
                                                   parallelize_module)
    from torch.nn.parallel import DistributedDataParallel as DDP

    print0(f"{world_size} processes, backend {dist.get_backend()}, "
           f"device {device.type}, model "
           f"{params_total:,} parameters ({args.layers} blocks of width "
           f"{args.dim})")
    if device.type == "cuda":
        # cuBLAS's workspaces (one per thread: forward, backward) before any
        # baseline
        warm = nn.Linear(8, 8).to(device)
        warm(torch.ones(8, 8, device=device)).sum().backward()
    for name in ("sgd", "adam"):
        for layout in ("ddp", "fsdp2", "fsdp2-tp"):
            if device.type == "cuda":
                # start each layout's peak from what is already allocated
                gc.collect()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            torch.manual_seed(0)
            net = Model(args.dim, args.layers).to(device)
            tp, replicated = 1, 0.0
            if layout == "ddp":
                model = DDP(net, device_ids=(
                    [local_rank] if device.type == "cuda" else None))
            else:
                tp = args.tp if layout == "fsdp2-tp" else 1
                mesh = init_device_mesh(device.type, (world_size // tp, tp),
                                        mesh_dim_names=("dp", "tp"))
                # Megatron's split of an MLP: up column-wise, down row-wise
                if tp > 1:
                    for block in net.blocks:
                        parallelize_module(block, mesh["tp"],
                                           {"up": ColwiseParallel(),
                                            "down": RowwiseParallel()})
                    split = {f"blocks.{i}.{n}" for i in range(args.layers)
                             for n in ("up.weight", "up.bias", "down.weight")}
                    replicated = sum(t.numel()
                                     for n, t in net.named_parameters()
                                     if n not in split) / params_total
                for block in net.blocks:
                    fully_shard(block, mesh=mesh["dp"])
                model = fully_shard(net, mesh=mesh["dp"])
            opt = (torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
                   if name == "sgd"
                   else torch.optim.Adam(model.parameters(), lr=0.001))
            step(model, opt, args.dim)
            params = list(net.parameters())
            # This rank's bytes above an exact share: FSDP2 splits dim 0 as
            # torch.chunk does (ceil(rows / N) rows each, the last ranks
            # fewer, some none)
            extra = 0
            # a DTensor is split over the mesh dimensions it is Shard on
            for t in params:
                parts = (math.prod(t.device_mesh.size(i)
                                   for i, pl in enumerate(t.placements)
                                   if not pl.is_replicate())
                         if layout != "ddp" else 1)
                extra += (local(t).numel() - t.numel() / parts) * 4
            f = bytes_per_device(params_total, layout, world_size, "fp32",
                                 name, tp=tp, replicated=replicated)
            moments = [v for s in opt.state.values() for k, v in s.items()
                       if k != "step"]
            row(layout, name, "weights", nbytes(params), f["weights"], extra)
            row(layout, name, "gradients", nbytes(t.grad for t in params),
                f["gradients"], extra)
            row(layout, name, "optimizer", nbytes(moments), f["optimizer"],
                extra * len(moments) / len(params))
            if layout == "fsdp2-tp" and name == "sgd":
                print0(f"fsdp2-tp: mesh (dp {world_size // tp}, tp {tp}); "
                       f"the share of parameters tensor "
                       f"parallel does not split (norms, down.bias, head): "
                       f"replicated = {replicated:.6f}")
            if name == "adam" and layout == "ddp":
                steps = [s["step"] for s in opt.state.values()]
                print0(f"not in the formula: Adam's step counters, "
                       f"{len(steps)} tensors of "
                       f"{steps[0].numel() * steps[0].element_size()} bytes")
            if device.type == "cuda":
                # the allocator's peak beside the formula
                peak = torch.cuda.max_memory_allocated() - base
                acts = (args.batch * args.tokens * args.layers
                        * (10 * args.dim + 2) * 4)
                # Tolerance: the model whole before sharding, DDP's gradient
                # buckets, the optimizer's temporaries (2 x the weights), and
                # 64 MiB for the allocator's rounding
                bound = f["total"] + acts + 2 * params_total * 4 + 64 * 2**20
                print0(f"{layout} {name}: peak allocated {peak:,} bytes: "
                       f"the formula {f['total']:,.0f} <= peak "
                       f"<= formula + activations + tolerance {bound:,.0f}: "
                       f"{f['total'] <= peak <= bound}")
                assert f["total"] <= peak <= bound, (layout, name, peak,
                                                     f["total"], bound)
            del model, net, opt, params, moments
    show()
    print0("every row: measured = formula + the padding computed from the "
           "shards' shapes")

if "zero" in args.part:
    rows.clear()
    print0(f"{world_size} processes, backend {dist.get_backend()}, "
           f"device {device.type}, model "
           f"{params_total:,} parameters, DeepSpeed {deepspeed.__version__}, "
           f"Adam")
    for stage in (1, 2):
        torch.manual_seed(0)
        net = Model(args.dim, args.layers)
        config = {"train_micro_batch_size_per_gpu": args.batch,
                  "gradient_accumulation_steps": 1,
                  "zero_optimization": {
                      "stage": stage, "reduce_bucket_size": params_total // 8},
                  "steps_per_print": 10 ** 6,
                  "optimizer": {"type": "Adam",
                                "params": {"lr": 0.001, "torch_adam": True}}}
        engine, opt, _, _ = deepspeed.initialize(
            model=net, model_parameters=net.parameters(), config=config)
        x = torch.randn(args.batch, args.tokens, args.dim,
                        device=engine.device)
        y = torch.randint(0, 10, (args.batch,), device=engine.device)
        # Gradients: the most this rank holds at once during backward (each
        # .grad as autograd fills it, and the partitions ZeRO has reduced them
        # into), and what is left for the step
        partitions = lambda: nbytes(  # noqa: E731
            t for g in (getattr(opt, "averaged_gradients", None)
                        or {}).values()
            for t in g if t is not None)
        held = lambda: (nbytes(t.grad for t in net.parameters()  # noqa: E731
                               if t.grad is not None) + partitions())
        peak = [0]
        for t in net.parameters():
            t.register_post_accumulate_grad_hook(
                lambda _: peak.__setitem__(0, max(peak[0], held())))
        engine.backward(F.cross_entropy(engine(x), y))
        after = held()
        engine.step()
        # this rank's share
        partition = sum(t.numel() for t in opt.single_partition_of_fp32_groups)
        # the flat buffer, padded to N equal parts
        padding = (partition * world_size - params_total) * 4
        # fp32 copy of the partition it steps
        master = nbytes(opt.single_partition_of_fp32_groups)
        # 4/N bytes per parameter beyond the formula's fp32 rows
        assert master == partition * 4
        moments = [v for s in opt.optimizer.state.values()
                   for k, v in s.items() if k != "step"]
        layout = f"zero{stage}"
        f = bytes_per_device(params_total, layout, world_size, "fp32", "adam")
        pad_rank = partition * 4 - params_total * 4 / world_size
        row(layout, "adam", "weights", nbytes(net.parameters()), f["weights"],
            0)
        row(layout, "adam", "gradients", peak[0] if stage == 1 else after,
            f["gradients"], 0 if stage == 1 else pad_rank)
        row(layout, "adam", "optimizer", nbytes(moments), f["optimizer"],
            2 * pad_rank)
        # ZeRO-1 holds every gradient until backward ends; ZeRO-2 reduces a
        # bucket as it fills
        assert (peak[0] == params_total * 4 if stage == 1
                else after < peak[0] < params_total * 4)
        print0(f"zero{stage} gradients: at most {peak[0]:,} bytes during "
               f"backward, {after:,} after it")
        print0(f"zero{stage}: flat buffer padded by {padding:,} bytes to "
               f"{world_size} equal partitions; "
               f"also an fp32 master copy of the partition, {master:,} bytes "
               f"(fp32 training too)")
        del engine, opt, net
    show()
    print0("every row: measured = formula + the padding of DeepSpeed's flat "
           "buffer")

# in each process alone (no collective until the FSDP2 part)
if "activations" in args.part:
    class Saved(torch.autograd.graph.saved_tensors_hooks):
        """The bytes autograd keeps for backward, each storage counted once;
        weights not counted."""

        def __init__(self, weights):
            self.weights, self.storages = weights, {}

            def pack(t):
                ptr = t.untyped_storage().data_ptr()
                if ptr not in self.weights:
                    self.storages[ptr] = t.untyped_storage().nbytes()
                return t
            super().__init__(pack, lambda t: t)

        @property
        def bytes(self):
            return sum(self.storages.values())

    class Ops(TorchDispatchMode):
        """Counts the aten operators that run (forward, backward and
        recomputation)."""

        def __init__(self):
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, a=(), kw=None):
            self.count += 1
            return func(*a, **(kw or {}))

    b, t, d, n = args.batch, args.tokens, args.dim, args.layers
    print0(f"{world_size} processes, backend {dist.get_backend()}, "
           f"device {device.type}, {n} blocks of width "
           f"{d}, batch {b} x {t} tokens, fp32")
    results = {}
    for ckpt in (False, True):
        torch.manual_seed(0)
        net = Model(d, n).to(device)
        if ckpt:
            net.blocks = nn.ModuleList(Checkpointed(block)
                                       for block in net.blocks)
        x = torch.randn(b, t, d, device=device)
        net.saved = Saved({w.untyped_storage().data_ptr()
                           for w in net.parameters()})
        with Ops() as ops:
            loss = net(x).square().mean()
        forward_ops = ops.count
        with Ops() as ops:
            loss.backward()
        t0 = time.perf_counter()
        for _ in range(3):
            net.saved.storages.clear()
            net(x).square().mean().backward()
        seconds = (time.perf_counter() - t0) / 3
        results[ckpt] = (net.saved.bytes, forward_ops, ops.count, seconds,
                         [w.grad.clone() for w in net.parameters()])
    # Per token and block, the tensors saved for backward (fp32, 4 bytes each):
    # the block's input (LayerNorm), LayerNorm's output (up), up's output
    # (GELU), GELU's output (down): d + d + 4d + 4d, and LayerNorm's mean and
    # 1/std: 2. With checkpointing, only each block's input: d.
    formula = {False: b * t * n * (10 * d + 2) * 4, True: b * t * n * d * 4}
    print0(f"{'bytes saved for backward':24} {'per sample':>11} "
           f"{'formula':>11} {'operators':>11} {'one step':>11}")
    for ckpt in (False, True):
        saved, fw, bw, seconds, _ = results[ckpt]
        ops = f"{fw} + {bw}"  # forward + backward
        print0(f"{'checkpointed' if ckpt else 'plain':12} {saved:>11,} "
               f"{saved // b:>11,} {formula[ckpt]:>11,} {ops:>11} "
               f"{seconds * 1e3:>8.1f} ms")
        assert saved == formula[ckpt], (saved, formula[ckpt])
    extra = results[True][2] - results[False][2]
    print0(f"checkpointing keeps "
           f"{results[False][0] / results[True][0]:.1f}x fewer bytes and "
           f"runs {extra} more operators in backward "
           f"(each block's forward again); time x "
           f"{results[True][3] / results[False][3]:.2f} on this machine")
    print0(f"formula, per sample and block: tokens x (10 x width + 2) x 4 "
           f"bytes = {t * (10 * d + 2) * 4:,}; checkpointed: tokens x width "
           f"x 4 = {t * d * 4:,}")
    # recomputation: more operators; the time is printed, not asserted
    assert extra > 0
    assert all(torch.allclose(g1, g2, atol=1e-6)
               for g1, g2 in zip(results[False][4], results[True][4]))
    print0("the same gradients with and without checkpointing: True")
    # FSDP2 with checkpointing: checkpoint inside each block, then fully_shard
    if world_size > 1:
        from torch.distributed.fsdp import fully_shard
        grads = []
        for ckpt in (False, True):
            torch.manual_seed(0)
            net = Model(d, n).to(device)
            if ckpt:
                net.blocks = nn.ModuleList(Checkpointed(block)
                                           for block in net.blocks)
            for block in net.blocks:
                fully_shard(block)
            fully_shard(net)
            net(x).square().mean().backward()
            grads.append([local(w.grad).clone() for w in net.parameters()])
        same = all(torch.allclose(g1, g2, atol=1e-6) for g1, g2 in zip(*grads))
        print0(f"FSDP2 with checkpointed blocks: the same gradient shards: "
               f"{same}")
        assert same
cleanup()
