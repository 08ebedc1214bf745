"""A GPT-style training loop in miniature, in one process: the script
code/own_tokens.py starts from.

It draws its batches as random windows of a token file, accumulates gradients
over micro-batches and fetches the next batch inside the step.
The token file is made here if absent: characters of made-up sentences, as
uint16, read through a memory map (nothing to download). The model is an
embedding and a small MLP that predicts each next character: it trains in
seconds on a CPU.

    python code/own_tokens_single.py

Resume (--checkpoint, --stop-after): the generator is the data order here, so
its state is saved, taken before the prefetch of the batch not used yet.
"""
import argparse
import os
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--data", default="data/tokens.bin",
                    help="token file, made if absent")
parser.add_argument("--steps", type=int, default=40, help="optimizer steps")
parser.add_argument("--micro-batch", type=int, default=8,
                    help="windows per forward")
parser.add_argument("--accumulation", type=int, default=8,
                    help="micro-batches per step")
parser.add_argument("--block", type=int, default=32, help="tokens per window")
parser.add_argument("--lr", type=float, default=3e-3)
parser.add_argument("--seed", type=int, default=1337)
parser.add_argument("--checkpoint", help="resume from this file if it exists")
parser.add_argument("--stop-after", type=int,
                    help="save to --checkpoint after this many steps "
                    "and exit, as on Slurm's warning")
parser.add_argument("--every", type=int, default=10,
                    help="print every this many steps")
args = parser.parse_args()

device = (torch.device("cuda") if torch.cuda.is_available()
          else torch.device("cpu"))
micro_steps = args.accumulation
global_batch = args.micro_batch * args.accumulation

# The token file: written once, to a temporary name, then renamed, so that no
# run reads half a file.
if not os.path.exists(args.data):
    words = ("the a cat dog sees runs eats small big red old one two "
             "and then").split()
    rng = np.random.default_rng(0)  # the same text every time
    text = ". ".join(" ".join(rng.choice(words, 6)) for _ in range(20_000))
    os.makedirs(os.path.dirname(args.data) or ".", exist_ok=True)
    np.frombuffer(text.encode(), dtype=np.uint8).astype(np.uint16).tofile(
        args.data + ".tmp")
    os.replace(args.data + ".tmp", args.data)
data = np.memmap(args.data, dtype=np.uint16, mode="r")
vocab = 128  # the characters are ASCII

# One random stream of windows.
generator = torch.Generator().manual_seed(args.seed)
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


torch.manual_seed(args.seed)
model = TinyLM(vocab).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
print(f"1 process, device {device.type}, global batch {global_batch} = "
      f"{micro_steps} x {args.micro_batch} windows of {args.block} tokens",
      flush=True)

start = 0
if args.checkpoint and os.path.exists(args.checkpoint):
    ckpt = torch.load(args.checkpoint, map_location="cpu")
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    start = ckpt["step"]
    generator.set_state(ckpt["rng"])
    print(f"resumed at step {start}", flush=True)

X, Y = get_batch()
losses = []
for step in range(start, args.steps):
    # the data goes on from the batch drawn but not used yet
    if args.stop_after == step:
        torch.save({"model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "step": step, "rng": drawn_with}, args.checkpoint)
        print(f"stopped after step {step - 1}: checkpoint written", flush=True)
        break
    # the step's first micro-batch, as a hash
    batch = zlib.crc32(X.cpu().numpy().tobytes())
    total = 0.0
    for micro in range(micro_steps):
        _, loss = model(X, Y)
        X, Y = get_batch()  # next batch, while the GPU computes this loss
        (loss / micro_steps).backward()  # mean of the step's micro-batches
        total += loss.item() / micro_steps
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    losses.append(total)
    if step % args.every == 0 or step == args.steps - 1:
        print(f"step {step} loss {total:.4f} batch {batch:08x}", flush=True)

if losses:
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)
