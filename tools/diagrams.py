"""Draw the tutorial's idea diagrams as plain SVG (stdlib only) into docs/images/.

    python tools/diagrams.py            # writes docs/images/*.svg
    python tools/diagrams.py --out DIR  # somewhere else (tests/test_diagrams.py compares)

Each picture is a card with its own background, so it reads on Material's light and dark
pages alike: an SVG shown through <img> does not inherit the page's colours (currentColor
would stay black), so the card brings a light palette and switches to a dark one when the
reader's system prefers dark (the scheme Material follows until its toggle is used).
Width 680 px: the content column at 1280 px is 688 px. Text is 13 px or larger.
"""
import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
W = 680
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"

# One palette, switched by class: fills carry the meaning, text and lines the ink.
STYLE = f"""
text {{ font-family: {FONT}; font-size: 14px; fill: #1f2328; }}
.card {{ fill: #ffffff; stroke: #c8ccd0; }}
.ink {{ stroke: #1f2328; fill: none; }}
.mute {{ fill: #57606a; }}
.box {{ fill: #f3f4f6; stroke: #8c959f; }}
.node {{ fill: #f6f8fa; stroke: #57606a; }}
.task {{ fill: #ddeeff; stroke: #2f6fb0; }}
.proc {{ fill: #fff1dc; stroke: #b36b00; }}
.gpu {{ fill: #e1f3e3; stroke: #2e7d32; }}
.r0 {{ fill: #ddeeff; stroke: #2f6fb0; }}
.r1 {{ fill: #fff1dc; stroke: #b36b00; }}
.r2 {{ fill: #e1f3e3; stroke: #2e7d32; }}
.r3 {{ fill: #f3e5f5; stroke: #8e44ad; }}
.pad {{ fill: none; stroke: #c62828; stroke-width: 2; stroke-dasharray: 5 3; }}
.gone {{ fill: #f3f4f6; stroke: #8c959f; stroke-dasharray: 4 3; }}
.par {{ fill: #7fb0e0; stroke: #2f6fb0; }}
.grad {{ fill: #f2b766; stroke: #b36b00; }}
.opt {{ fill: #8fd19e; stroke: #2e7d32; }}
.empty {{ fill: none; stroke: #8c959f; stroke-dasharray: 3 3; }}
.warn {{ fill: #c62828; }}
.arrow {{ stroke: #57606a; stroke-width: 1.5; fill: none; marker-end: url(#head); }}
.headfill {{ fill: #57606a; }}
@media (prefers-color-scheme: dark) {{
  text {{ fill: #e6edf3; }}
  .card {{ fill: #1e2129; stroke: #444c56; }}
  .ink {{ stroke: #e6edf3; }}
  .mute {{ fill: #9da7b3; }}
  .box {{ fill: #2d333b; stroke: #768390; }}
  .node {{ fill: #262b33; stroke: #9da7b3; }}
  .task, .r0 {{ fill: #1c3a5a; stroke: #6cb6ff; }}
  .proc, .r1 {{ fill: #4a3514; stroke: #f0a94a; }}
  .gpu, .r2 {{ fill: #1d4424; stroke: #6bc46d; }}
  .r3 {{ fill: #3f2650; stroke: #c38ee0; }}
  .pad {{ stroke: #ff7b72; }}
  .gone {{ fill: #2d333b; stroke: #768390; }}
  .par {{ fill: #3b78b8; stroke: #6cb6ff; }}
  .grad {{ fill: #b97a1e; stroke: #f0a94a; }}
  .opt {{ fill: #3f9a52; stroke: #6bc46d; }}
  .empty {{ stroke: #768390; }}
  .warn {{ fill: #ff7b72; }}
  .arrow {{ stroke: #9da7b3; }}
  .headfill {{ fill: #9da7b3; }}
}}
"""


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def n(v):
    """Numbers as short, stable text (integers without .0)."""
    return str(int(v)) if float(v).is_integer() else f"{v:.1f}"


def rect(x, y, w, h, cls, rx=4):
    return f'<rect x="{n(x)}" y="{n(y)}" width="{n(w)}" height="{n(h)}" rx="{rx}" class="{cls}"/>'


def text(x, y, s, size=14, anchor="start", weight="normal", cls=None):
    attrs = f' font-size="{size}"' if size != 14 else ""
    attrs += f' text-anchor="{anchor}"' if anchor != "start" else ""
    attrs += ' font-weight="bold"' if weight == "bold" else ""
    attrs += f' class="{cls}"' if cls else ""
    return f'<text x="{n(x)}" y="{n(y)}"{attrs}>{esc(s)}</text>'


def arrow(x1, y1, x2, y2):
    return f'<path d="M{n(x1)} {n(y1)} L{n(x2)} {n(y2)}" class="arrow"/>'


def svg(title, desc, height, body):
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" '
            f'viewBox="0 0 {W} {height}" role="img">\n'
            f"<title>{esc(title)}</title>\n<desc>{esc(desc)}</desc>\n"
            f"<style>{STYLE}</style>\n"
            '<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            'markerHeight="7" orient="auto-start-reverse"><path d="M0 0 L10 5 L0 10 z" '
            'class="headfill"/></marker></defs>\n')
    card = rect(1, 1, W - 2, height - 2, "card", rx=10)
    return head + card + "\n" + "\n".join(body) + "\n</svg>\n"


# (a) Step 5: two nodes of 4 GPUs, started two ways.
def launch():
    out, y = [], 0
    gpus, nodes = 4, 2
    panels = [
        ("Pattern 1: one srun task per node, torchrun starts one process per GPU",
         "torchrun (--nproc_per_node=4) sets RANK, LOCAL_RANK and WORLD_SIZE = 8\n"
         "in each process it starts", True),
        ("Pattern 2: one srun task per GPU, no torchrun",
         "Slurm sets SLURM_PROCID, SLURM_LOCALID and SLURM_NTASKS = 8 in each task;\n"
         "the script copies them to RANK, LOCAL_RANK and WORLD_SIZE", False),
    ]
    y = 14
    for title, note, torchrun in panels:
        out.append(text(20, y + 18, title, 15, weight="bold"))
        y += 32
        node_w, node_x = 312, [20, 348]
        rows_top = y + 34 + (40 if torchrun else 0)
        node_h = rows_top - y + gpus * 34 + 6
        for k in range(nodes):
            x = node_x[k]
            out.append(rect(x, y, node_w, node_h, "node", rx=8))
            out.append(text(x + 12, y + 22, f"node {k}", weight="bold"))
            out.append(text(x + 70, y + 22, "1 Slurm task" if torchrun else "4 Slurm tasks", 13, cls="mute"))
            if torchrun:
                out.append(rect(x + 12, y + 34, node_w - 24, 30, "task"))
                out.append(text(x + 22, y + 54, f"Slurm task {k} runs torchrun"))
            for i in range(gpus):
                ry = rows_top + i * 34
                rank = k * gpus + i
                if torchrun:
                    out.append(f'<path d="M{x + 22} {y + 64} L{x + 22} {ry + 14} L{x + 30} {ry + 14}" class="arrow"/>')
                    px = x + 32
                else:
                    px = x + 12
                label = f"RANK {rank}, LOCAL_RANK {i}"
                pw = node_w - (px - x) - 84
                out.append(rect(px, ry, pw, 28, "proc" if torchrun else "task"))
                out.append(text(px + 8, ry + 19, label, 13))
                out.append(arrow(px + pw + 2, ry + 14, x + node_w - 74, ry + 14))
                out.append(rect(x + node_w - 72, ry, 60, 28, "gpu"))
                out.append(text(x + node_w - 42, ry + 19, f"GPU {i}", 13, anchor="middle"))
        y += node_h + 4
        for line in note.split("\n"):
            y += 18
            out.append(text(20, y, line, 13, cls="mute"))
        y += 20
    return svg("Two nodes of 4 GPUs: torchrun per node versus one srun task per GPU",
               "Both patterns give 8 processes, RANK 0 to 7, LOCAL_RANK 0 to 3 on each node, "
               "WORLD_SIZE 8, one process per GPU.", y + 4, out)


# (b) Step 4: DistributedSampler, 10 samples over 4 ranks.
def sampler():
    out, cell, gap = [], 38, 6
    ranks, size = 4, 10
    cls = ["r0", "r1", "r2", "r3"]

    def box(x, y, i, c, extra=""):
        out.append(rect(x, y, cell, 30, c))
        if extra:
            out.append(rect(x, y, cell, 30, extra))
        out.append(text(x + cell / 2, y + 20, str(i), 14, anchor="middle", weight="bold"))

    y = 18
    out.append(text(20, y + 14, "drop_last=False (the default): pad to 12 = 3 per rank", 15, weight="bold"))
    y += 30
    out.append(text(20, y + 20, "index list", 13, cls="mute"))
    padded = list(range(size)) + [0, 1]
    x0 = 110
    for j, i in enumerate(padded):
        box(x0 + j * (cell + gap), y, i, cls[j % ranks], "pad" if j >= size else "")
    px = x0 + size * (cell + gap)
    out.append(text(px + cell + gap / 2, y + 48, "2 repeats", 13, anchor="middle", cls="warn"))
    y += 62
    for r in range(ranks):
        ry = y + r * 38
        out.append(text(20, ry + 20, f"rank {r}", 14, weight="bold"))
        for j, i in enumerate(padded[r::ranks]):
            box(x0 + j * (cell + gap), ry, i, cls[r], "pad" if r + j * ranks >= size else "")
        if r >= size % ranks:
            out.append(text(x0 + 3 * (cell + gap) + 6, ry + 20,
                            f"sample {padded[r + 2 * ranks]} read twice this epoch", 13, cls="warn"))
    y += ranks * 38 + 16
    out.append(text(20, y, "Each rank takes every 4th index, starting at its rank.", 13, cls="mute"))

    y += 30
    out.append(text(20, y + 14, "drop_last=True: cut to 8 = 2 per rank", 15, weight="bold"))
    y += 30
    out.append(text(20, y + 20, "index list", 13, cls="mute"))
    for j in range(size):
        kept = j < size - size % ranks
        box(x0 + j * (cell + gap), y, j, cls[j % ranks] if kept else "gone")
    gx = x0 + (size - 2) * (cell + gap)
    out.append(text(gx + cell + gap / 2, y + 48, "2 dropped", 13, anchor="middle", cls="warn"))
    y += 62
    for r in range(ranks):
        ry = y + r * 38
        out.append(text(20, ry + 20, f"rank {r}", 14, weight="bold"))
        for j, i in enumerate(range(r, size - size % ranks, ranks)):
            box(x0 + j * (cell + gap), ry, i, cls[r])
    out.append(text(x0 + 2 * (cell + gap) + 6, y + 20, "samples 8 and 9: read by no rank", 13, cls="warn"))
    out.append(text(x0 + 2 * (cell + gap) + 6, y + 40, "this epoch (with shuffling, other", 13, cls="warn"))
    out.append(text(x0 + 2 * (cell + gap) + 6, y + 60, "samples each epoch)", 13, cls="warn"))
    y += ranks * 38 + 14
    out.append(text(20, y, "shuffle=False here, to keep the order easy to follow.", 13, cls="mute"))
    return svg("DistributedSampler: 10 samples over 4 ranks, padded or with drop_last=True",
               "Padded: 12 indices, ranks 2 and 3 read samples 0 and 1 a second time. "
               "drop_last=True: 8 indices, samples 8 and 9 are not read this epoch.", y + 16, out)


# (c) Step 1: DDP's all-reduce of the gradients.
def allreduce():
    out, ranks = [], 4
    grads = [0.8, 0.4, 1.2, 0.0]
    mean = sum(grads) / ranks
    col, x0 = 156, 38
    y = 20
    out.append(text(W / 2, y + 12, "One training step of DDP on 4 ranks", 15, anchor="middle", weight="bold"))
    y += 30
    for r in range(ranks):
        x = x0 + r * col
        out.append(rect(x, y, 136, 48, "r%d" % r))
        out.append(text(x + 68, y + 20, f"rank {r}", 14, anchor="middle", weight="bold"))
        out.append(text(x + 68, y + 39, f"batch shard {r}", 13, anchor="middle"))
        out.append(arrow(x + 68, y + 50, x + 68, y + 74))
        out.append(rect(x, y + 76, 136, 48, "box"))
        out.append(text(x + 68, y + 96, "loss.backward()", 13, anchor="middle"))
        out.append(text(x + 68, y + 115, f"gradient {n(grads[r])}", 13, anchor="middle", weight="bold"))
        out.append(arrow(x + 68, y + 126, x + 68, y + 150))
    y += 152
    out.append(rect(x0, y, col * (ranks - 1) + 136, 56, "task", rx=8))
    out.append(text(W / 2, y + 23, "all-reduce (during backward, bucket by bucket)", 14, anchor="middle", weight="bold"))
    out.append(text(W / 2, y + 44, " + ".join(n(g) for g in grads) + f" = {n(sum(grads))},   "
                    f"divided by 4 ranks = {n(mean)}", 14, anchor="middle"))
    y += 58
    for r in range(ranks):
        x = x0 + r * col
        out.append(arrow(x + 68, y, x + 68, y + 24))
        out.append(rect(x, y + 26, 136, 48, "gpu"))
        out.append(text(x + 68, y + 46, f"gradient {n(mean)}", 13, anchor="middle", weight="bold"))
        out.append(text(x + 68, y + 65, "optimizer.step()", 13, anchor="middle"))
    y += 96
    out.append(text(W / 2, y, "Every rank takes the same step: the model copies stay identical.",
                    14, anchor="middle"))
    return svg("DDP all-reduce: each rank's gradient, averaged, the same on every rank",
               "Four ranks compute gradients 0.8, 0.4, 1.2 and 0.0 on their own batch shards; "
               "the all-reduce sums them to 2.4 and divides by 4; every rank steps with 0.6.",
               y + 18, out)


# (d) Steps 6 and 12: what each rank holds under DDP, ZeRO-1/2/3 and FSDP2.
def sharding():
    out, ranks = [], 4
    rows = [("DDP", "= ZeRO stage 0", (0, 0, 0)),
            ("ZeRO-1", "splits optimizer state", (0, 0, 1)),
            ("ZeRO-2", "+ gradients", (0, 1, 1)),
            ("ZeRO-3, FSDP2", "+ parameters", (1, 1, 1))]
    kinds = [("par", "parameters"), ("grad", "gradients"), ("opt", "optimizer state")]
    label_w, col, bar_w, bar_h = 184, 122, 102, 13
    y = 18
    out.append(text(20, y + 14, "What each of 4 ranks keeps between steps", 15, weight="bold"))
    lx = 20
    y += 30
    for c, name in kinds:
        out.append(rect(lx, y, 18, 14, c, rx=2))
        out.append(text(lx + 24, y + 12, name, 13))
        lx += 40 + len(name) * 7
    out.append(rect(lx, y, 18, 14, "empty", rx=2))
    out.append(text(lx + 24, y + 12, "held by another rank", 13))
    y += 30
    for r in range(ranks):
        out.append(text(label_w + r * col + bar_w / 2, y + 12, f"rank {r}", 14, anchor="middle", weight="bold"))
    y += 20
    for name, what, split in rows:
        out.append(rect(12, y - 4, W - 24, 3 * (bar_h + 5) + 10, "box", rx=6))
        out.append(text(22, y + 15, name, 14, weight="bold"))
        out.append(text(22, y + 34, what, 13, cls="mute"))
        for r in range(ranks):
            x = label_w + r * col
            for k, (c, _) in enumerate(kinds):
                by = y + 2 + k * (bar_h + 5)
                if split[k]:
                    out.append(rect(x, by, bar_w, bar_h, "empty", rx=2))
                    out.append(rect(x + r * bar_w / ranks, by, bar_w / ranks, bar_h, c, rx=2))
                else:
                    out.append(rect(x, by, bar_w, bar_h, c, rx=2))
        y += 3 * (bar_h + 5) + 22
    out.append(text(20, y + 2, "A full bar: the whole thing on this rank. A quarter: its 1/4 shard.", 13, cls="mute"))
    out.append(text(20, y + 22, "ZeRO-3 and FSDP2 gather a block's whole weights just for its forward and", 13, cls="mute"))
    out.append(text(20, y + 40, "backward, then free them; ZeRO-2, ZeRO-3 and FSDP2 reduce-scatter gradients.", 13, cls="mute"))
    return svg("What each rank holds: DDP, ZeRO-1, ZeRO-2, ZeRO-3 and FSDP2",
               "DDP: full parameters, gradients and optimizer state on every rank. ZeRO-1: optimizer "
               "state 1/4 per rank. ZeRO-2: gradients and optimizer state 1/4. ZeRO-3 and FSDP2: all "
               "three 1/4 per rank.", y + 56, out)


# (e) The collectives page: what each rank holds before and after each collective, 4 ranks.
# Rank r's tensor is 4 pieces, A0..A3 on rank 0, B0..B3 on rank 1 and so on, coloured by the
# rank they started on; Σj is the sum of every rank's j-th piece (grey: it mixes all ranks).
LETTERS = "ABCD"
CELL, GAP = 38, 4


def piece(r, j):
    return (f"{LETTERS[r]}{j}", f"r{r}")


def whole(r):
    return [piece(r, j) for j in range(4)]


def only(j, cell):
    return [cell if i == j else None for i in range(4)]


def summed(j):
    return (f"Σ{j}", "box")


def tensors(out, x0, y, rows):
    """Each rank's pieces in a row of cells; None: a piece this rank does not hold."""
    for r, cells in enumerate(rows):
        for j, c in enumerate(cells):
            x = x0 + j * (CELL + GAP)
            if c is None:
                out.append(rect(x, y + r * 36, CELL, 28, "empty"))
            else:
                out.append(rect(x, y + r * 36, CELL, 28, c[1]))
                out.append(text(x + CELL / 2, y + r * 36 + 19, c[0], 13, anchor="middle", weight="bold"))


def collective(title, note, stages, footer, desc):
    """Rank labels, then the stages (header, rows) left to right with an arrow between them."""
    out, y = [], 20
    out.append(text(20, y + 12, title, 15, weight="bold"))
    for k, line in enumerate(note):
        out.append(text(20, y + 36 + 18 * k, line, 13, cls="mute"))
    y += 36 + 18 * len(note) + 8
    width = 4 * (CELL + GAP) - GAP
    step = min(290, (W - 24 - 86 - width) / max(1, len(stages) - 1))  # the last ends 24 px in
    xs = [86 + k * step for k in range(len(stages))]
    for r in range(4):
        out.append(text(20, y + 30 + r * 36, f"rank {r}", 14, weight="bold"))
    for k, ((head, rows), x) in enumerate(zip(stages, xs)):
        out.append(text(x + width / 2, y, head, 13, anchor="middle", weight="bold"))
        tensors(out, x, y + 11, rows)
        if k:
            out.append(arrow(xs[k - 1] + width + 8, y + 11 + 2 * 36 - 4, x - 8, y + 11 + 2 * 36 - 4))
    y += 11 + 4 * 36 + 12
    for line in footer:
        y += 18
        out.append(text(20, y, line, 13, cls="mute"))
    return svg(title, desc, y + 18, out)


def broadcast():
    return collective(
        "broadcast: one rank's tensor to every rank",
        ["Rank 0 sends; the others' tensors are overwritten."],
        [("before", [whole(0)] + [[None] * 4] * 3), ("after broadcast", [whole(0)] * 4)],
        ["Used by: DDP copying rank 0's initial weights to every rank (step 1)."],
        "Before: rank 0 holds pieces A0 to A3, ranks 1 to 3 hold nothing that matters. "
        "After: every rank holds A0, A1, A2, A3.")


def all_gather():
    return collective(
        "all-gather: every rank's piece, to every rank",
        ["Each rank holds one piece; afterwards each holds all of them, in rank order."],
        [("before", [only(r, piece(r, r)) for r in range(4)]),
         ("after all-gather", [[piece(j, j) for j in range(4)]] * 4)],
        ["Used by: ZeRO-3 and FSDP2 gathering a block's whole weights before its forward",
         "and backward (steps 6 and 12)."],
        "Before: rank 0 holds A0, rank 1 B1, rank 2 C2, rank 3 D3. After: every rank holds "
        "A0, B1, C2, D3.")


def reduce_scatter():
    return collective(
        "reduce-scatter: sum over ranks, each rank keeps one piece",
        ["Σ0 = A0 + B0 + C0 + D0, Σ1 = A1 + B1 + C1 + D1, and so on."],
        [("before", [whole(r) for r in range(4)]),
         ("after reduce-scatter", [only(r, summed(r)) for r in range(4)])],
        ["Used by: ZeRO-2, ZeRO-3 and FSDP2 for the gradients: each rank gets the summed",
         "gradient of the parameters it updates (steps 6 and 12)."],
        "Before: rank r holds four pieces of its own. After: rank 0 holds sigma 0, the sum of "
        "every rank's piece 0, rank 1 holds sigma 1, and so on.")


def all_to_all():
    return collective(
        "all-to-all: rank i sends its j-th piece to rank j",
        ["A transpose across ranks: every rank sends a different piece to each rank."],
        [("before", [whole(r) for r in range(4)]),
         ("after all-to-all", [[piece(i, j) for i in range(4)] for j in range(4)])],
        ["Used by: mixture-of-experts, sending each token to its expert's rank, and",
         "sequence parallel (Ulysses), trading a split by sequence for a split by heads."],
        "Before: rank 0 holds A0 to A3, rank 1 B0 to B3, and so on. After: rank 0 holds A0, B0, "
        "C0, D0, rank 1 holds A1, B1, C1, D1, and so on.")


def all_reduce_parts():
    return collective(
        "all-reduce = reduce-scatter, then all-gather",
        ["The whole sum on every rank, in two halves that each move (n-1)/n of the tensor."],
        [("before", [whole(r) for r in range(4)]),
         ("after reduce-scatter", [only(r, summed(r)) for r in range(4)]),
         ("after all-gather", [[summed(j) for j in range(4)]] * 4)],
        ["Used by: DDP for the gradients (step 1), tensor parallel for partial sums (step 15).",
         "A ring all-reduce runs these two halves: 2(n-1)/n of the tensor per rank."],
        "Before: rank r holds four pieces of its own. After the reduce-scatter rank r holds "
        "sigma r; after the all-gather every rank holds sigma 0 to sigma 3, the all-reduce's result.")


DIAGRAMS = {"launch-patterns": launch, "sampler-padding": sampler,
            "ddp-allreduce": allreduce, "zero-fsdp2-per-rank": sharding,
            "collective-broadcast": broadcast, "collective-all-gather": all_gather,
            "collective-reduce-scatter": reduce_scatter, "collective-all-to-all": all_to_all,
            "collective-all-reduce": all_reduce_parts}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, draw in DIAGRAMS.items():
        (args.out / f"{name}.svg").write_text(draw(), encoding="utf-8")
        print(args.out / f"{name}.svg")


if __name__ == "__main__":
    main()
