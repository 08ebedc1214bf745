"""A GPT-style training loop in miniature: no DataLoader, no sampler, no
epochs.

Each rank draws its batches as random windows of a token file (its own seed:
seed + rank), accumulates gradients over micro-batches, fetches the next batch
inside the step, and prints from rank 0.
The token file is made here if absent: characters of made-up sentences, as
uint16, read through a memory map (nothing to download). The model is an
embedding and a small MLP that predicts each next character: it trains in
seconds on a CPU.

    torchrun --standalone --nproc_per_node=2 code/own_tokens.py --check
    torchrun --standalone --nproc_per_node=2 code/own_tokens.py --check \
        --same-seed  # the mistake

Resume (--checkpoint, --stop-after): the generator is the data order here, so
each rank's state is saved, taken before the prefetch of the batch not used yet
(--rng shows the two mistakes).
"""
import argparse
import os
import sys
import zlib
from contextlib import nullcontext

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--data", default="data/tokens.bin",
                    help="token file, made if absent")
parser.add_argument("--steps", type=int, default=40, help="optimizer steps")
parser.add_argument("--micro-batch", type=int, default=8,
                    help="windows per forward, per rank")
parser.add_argument("--accumulation", type=int, default=8,
                    help="micro-batches per step, all ranks")
parser.add_argument("--block", type=int, default=32, help="tokens per window")
parser.add_argument("--lr", type=float, default=3e-3)
parser.add_argument("--seed", type=int, default=1337)
parser.add_argument("--same-seed", action="store_true",
                    help="the mistake: one seed on every rank")
parser.add_argument("--check", action="store_true",
                    help="run code/ddp_check.py's checks")
parser.add_argument("--checkpoint", help="resume from this file if it exists")
parser.add_argument("--stop-after", type=int,
                    help="save to --checkpoint after this many steps "
                    "and exit, as on Slurm's warning")
parser.add_argument("--rng", choices=["before-prefetch", "at-stop", "none"],
                    default="before-prefetch", help="the generator state "
                    "the checkpoint keeps (at-stop, none: the mistakes)")
parser.add_argument("--every", type=int, default=10,
                    help="print every this many steps")
args = parser.parse_args()

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
local_rank = int(os.environ["LOCAL_RANK"])
device = (torch.device("cuda", local_rank) if torch.cuda.is_available()
          else torch.device("cpu"))
if device.type == "cuda":
    torch.cuda.set_device(device)
assert args.accumulation % world_size == 0, (
    "--accumulation must divide by the world size")
# the ranks share the micro-batches of a step
micro_steps = args.accumulation // world_size
global_batch = args.micro_batch * args.accumulation

# The token file: rank 0 writes it once (to a temporary name, then renamed, so
# that no rank reads half a file); the others wait at the barrier.
if rank == 0 and not os.path.exists(args.data):
    words = ("the a cat dog sees runs eats small big red old one two "
             "and then").split()
    rng = np.random.default_rng(0)  # the same text every time
    text = ". ".join(" ".join(rng.choice(words, 6)) for _ in range(20_000))
    os.makedirs(os.path.dirname(args.data) or ".", exist_ok=True)
    np.frombuffer(text.encode(), dtype=np.uint8).astype(np.uint16).tofile(
        args.data + ".tmp")
    os.replace(args.data + ".tmp", args.data)
dist.barrier()
data = np.memmap(args.data, dtype=np.uint16, mode="r")
vocab = 128  # the characters are ASCII

# Each rank its own random stream of windows; with --same-seed every rank draws
# the same ones.
generator = torch.Generator().manual_seed(
    args.seed + (0 if args.same_seed else rank))
# the generator's state before the last draw: it draws that batch again
drawn_with = None


def get_batch():
    """micro_batch windows at random offsets; y is x one token later (the
    next characters)."""
    global drawn_with
    drawn_with = generator.get_state()
    offsets = torch.randint(len(data) - args.block - 1, (args.micro_batch,),
                            generator=generator)
    windows = torch.stack(
        [torch.from_numpy(data[i:i + args.block + 1].astype(np.int64))
         for i in offsets])
    return windows[:, :-1].to(device), windows[:, 1:].to(device)


class TinyLM(nn.Module):
    """Next character from the current one: an embedding, then an MLP."""

    def __init__(self, vocab, width=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, vocab))

    def forward(self, idx, targets):
        logits = self.mlp(self.embed(idx))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)),
                                       targets.reshape(-1))


# the same initial weights everywhere (DDP copies rank 0's anyway)
torch.manual_seed(args.seed)
model = DDP(TinyLM(vocab).to(device),
            device_ids=[local_rank] if device.type == "cuda" else None)
optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
if rank == 0:
    print(f"{world_size} processes, backend {dist.get_backend()}, "
          f"device {device.type}, global batch {global_batch} = "
          f"{world_size} x {micro_steps} x {args.micro_batch} windows of "
          f"{args.block} tokens", flush=True)
if args.check:
    import ddp_check  # the file code/ddp_check.py, beside this script
    # no loader: the batches are drawn here
    ddp_check.check(model, None, global_batch=global_batch)

start = 0
if args.checkpoint and os.path.exists(args.checkpoint):
    ckpt = torch.load(args.checkpoint, map_location="cpu")
    model.module.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    start = ckpt["step"]
    # without it, the data starts over from its first batch
    if ckpt["rng"][rank] is not None:
        generator.set_state(ckpt["rng"][rank])
    if rank == 0:
        print(f"resumed at step {start} ({ckpt['kept']})", flush=True)

X, Y = get_batch()
# every rank's first batch, as a hash: do the ranks draw their own?
first = [None] * world_size
dist.all_gather_object(first, zlib.crc32(X.cpu().numpy().tobytes()))
losses = []
for step in range(start, args.steps):
    # the data goes on from the batch drawn but not used yet
    if args.stop_after == step:
        kept = {"before-prefetch": drawn_with,
                "at-stop": generator.get_state(), "none": None}
        # every rank's own: each draws its own batches
        states = [None] * world_size
        dist.all_gather_object(states, kept[args.rng])
        if rank == 0:
            torch.save({"model": model.module.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "step": step, "rng": states,
                        "kept": f"generator state {args.rng}"},
                       args.checkpoint)
            print(f"stopped after step {step - 1}: checkpoint written",
                  flush=True)
        break
    # the step's first micro-batch, as a hash
    batch = zlib.crc32(X.cpu().numpy().tobytes())
    total = 0.0
    for micro in range(micro_steps):
        # all-reduce the gradients once per step, in its last backward
        with model.no_sync() if micro < micro_steps - 1 else nullcontext():
            _, loss = model(X, Y)
            X, Y = get_batch()  # next batch, while the GPU computes this loss
            (loss / micro_steps).backward()  # mean of the step's micro-batches
        total += loss.item() / micro_steps
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    losses.append(total)
    if rank == 0 and (step % args.every == 0 or step == args.steps - 1):
        print(f"step {step} loss {total:.4f} batch {batch:08x} (rank 0's)",
              flush=True)

if rank == 0 and losses:
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}; first batches of the "
          f"{world_size} ranks: {len(set(first))} distinct", flush=True)
dist.barrier()
dist.destroy_process_group()
if not torch.cuda.is_available():  # gloo may abort in Python's exit (step 9):
    sys.stdout.flush()  # skip that exit, keeping what print() still holds
    os._exit(0)
