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


# --- Figures A (Home's path, ring all-reduce, step 14's ideal timelines, step 15's pipeline) ---

def text_width(s, size=13):
    """A rough width of text in px (system-ui: about 0.55 em per character), for laying out boxes."""
    return len(s) * size * 0.56


# (A1) Home: the tutorial's path along "Next", grouped as the navigation groups it.
PATH = [("The core path: a two-node job", "r0",
         ["Quick start", "1 DDP", "2 Equivalence", "3 Batch & LR", "4 Sharding", "5 Many nodes"]),
        ("Your script,\nyour cluster", "node", ["Your own script", "Your cluster"]),
        ("Frameworks", "r1", ["Collectives", "6 DeepSpeed", "7 Lightning", "8 Accelerate"]),
        ("In production", "r2", ["9 Reliability", "10 Performance", "11 Debugging"]),
        ("Beyond DDP,\nat scale", "r3", ["12 FSDP2", "13 Data", "14 Profiling", "15 2-D parallel",
                                   "16 Memory"]),
        (None, "node", ["A script to take home"])]


def path_boxes(out, x, y, right, pages, cls, h, gap, arrows=False, most=4):
    """A row of boxes from x to right, each as wide as its text plus an equal share of the room
    that a row of `most` boxes would leave (rows with fewer boxes leave the rest empty)."""
    widths = [text_width(s) + 16 for s in pages]
    share = max(0, (right - x - sum(widths) - gap * (len(pages) - 1)) / max(most, len(pages)))
    for k, (s, w) in enumerate(zip(pages, widths)):
        out.append(rect(x, y, w + share, h, cls))
        out.append(text(x + (w + share) / 2, y + h / 2 + 5, s, 13, anchor="middle"))
        if arrows and k:
            out.append(arrow(x - gap + 1, y + h / 2, x - 1, y + h / 2))
        x += w + share + gap


def path_map():
    out, y, box_h = [], 20, 30
    out.append(text(20, y + 12, "The tutorial's path, page after page (Next)", 15, weight="bold"))
    y += 28
    (core, core_cls, steps), rest = PATH[0], PATH[1:]
    # the core path across the whole width, in a frame of its own, an arrow from page to page
    out.append(f'<rect x="12" y="{y}" width="{W - 24}" height="{box_h + 40}" rx="8" class="{core_cls}" '
               'stroke-width="2"/>')
    out.append(text(24, y + 20, core, 14, weight="bold"))
    path_boxes(out, 24, y + 30, W - 24, steps, "card", box_h, 12, arrows=True, most=len(steps))
    y += box_h + 40
    label_w = 112
    for label, cls, pages in rest:
        out.append(arrow(W / 2, y + 2, W / 2, y + 14))
        y += 16
        if label is None:  # the last page, on its own
            w = text_width(pages[0], 14) + 30
            out.append(rect(W / 2 - w / 2, y, w, box_h, cls))
            out.append(text(W / 2, y + 20, pages[0], 14, anchor="middle", weight="bold"))
            y += box_h
            continue
        out.append(rect(12, y, W - 24, box_h + 12, "box", rx=8))
        lines = label.split("\n")
        for k, line in enumerate(lines):
            out.append(text(24, y + 26 - 8 * (len(lines) - 1) + 16 * k, line, 13, weight="bold"))
        path_boxes(out, 24 + label_w, y + 6, W - 24, pages, cls, box_h, 8)
        y += box_h + 12
    y += 24
    out.append(text(20, y, "After the core path, each part builds on it alone: read a part when you need it.",
                    13, cls="mute"))
    return svg("The tutorial's path: the core path to a two-node job, then the parts built on it",
               "Quick start and steps 1 to 5 (DDP, equivalence, batch and learning rate, sharding, many "
               "nodes) are the core path to a two-node job. Then your own script and your cluster; the "
               "collectives and steps 6 to 8 (DeepSpeed, Lightning, Accelerate); steps 9 to 11 "
               "(reliability, performance, debugging); steps 12 to 16 (FSDP2, data, profiling and scaling, "
               "2-D parallel, will it fit); and a script to take home.", y + 16, out)


# (A2) Collectives: a ring all-reduce of 4 ranks, chunk by chunk. Rank r holds its tensor in 4
# chunks (A0..A3 on rank 0, as in the collectives' pictures); at every step each rank sends one
# chunk to the next rank of the ring 0 -> 1 -> 2 -> 3 -> 0 and receives one from the previous.
def ring_steps(ranks=4):
    """The state after each step: [(phase, step, holds)], holds[r][j] = the set of ranks whose chunk
    j is summed in rank r's chunk j, and which chunk each rank just received (rank -> j).
    Reduce-scatter step t: rank r sends chunk (r - t - 1) mod n, which rank r + 1 adds to its own;
    after n - 1 steps rank r holds chunk r summed over all. All-gather step t: rank r sends the
    whole chunk (r - t) mod n, which rank r + 1 keeps."""
    holds = [[{r} for _ in range(ranks)] for r in range(ranks)]
    states = [("start", 0, [[set(c) for c in row] for row in holds], {})]
    for phase in ("reduce-scatter", "all-gather"):
        for t in range(ranks - 1):
            got, new = {}, [[set(c) for c in row] for row in holds]
            for r in range(ranks):
                j = (r - t - 1) % ranks if phase == "reduce-scatter" else (r - t) % ranks
                to = (r + 1) % ranks
                new[to][j] = (holds[to][j] | holds[r][j]) if phase == "reduce-scatter" else set(holds[r][j])
                got[to] = j
            holds = new
            states.append((phase, t + 1, [[set(c) for c in row] for row in holds], got))
    return states


def ring():
    ranks = 4
    states = ring_steps(ranks)
    assert all(states[ranks - 1][2][r][r] == set(range(ranks)) for r in range(ranks))  # Σr on rank r
    assert all(c == set(range(ranks)) for row in states[-1][2] for c in row)  # every sum everywhere
    out, y = [], 20
    cell, gap, group_gap, x0 = 30, 2, 18, 102
    group = ranks * cell + (ranks - 1) * gap
    gx = [x0 + r * (group + group_gap) for r in range(ranks)]
    out.append(text(20, y + 12, "A ring all-reduce on 4 ranks, chunk by chunk", 15, weight="bold"))
    for k, line in enumerate(["Each rank's tensor of S bytes is cut into 4 chunks of S/4. At every step each rank",
                              "sends one chunk to the next rank of the ring (0 → 1 → 2 → 3 → 0) and receives one."]):
        out.append(text(20, y + 36 + 18 * k, line, 13, cls="mute"))
    y += 76
    for r in range(ranks):
        out.append(text(gx[r] + group / 2, y + 4, f"rank {r}", 14, anchor="middle", weight="bold"))
        if r:
            out.append(arrow(gx[r - 1] + group / 2 + 30, y, gx[r] + group / 2 - 30, y))
    out.append(text(gx[-1] + group / 2 + 30, y + 4, "→ 0", 14, weight="bold", cls="mute"))
    y += 14

    def row(label, holds, got):
        out.append(text(20, y + 20, label, 13, weight="bold"))
        for r in range(ranks):
            for j in range(ranks):
                x, who = gx[r] + j * (cell + gap), sorted(holds[r][j])
                if len(who) == ranks:  # the whole sum: grey, as in the collectives' pictures
                    out.append(rect(x, y, cell, 28, "box"))
                    label_ = f"Σ{j}"
                elif len(who) == 1:
                    out.append(rect(x, y, cell, 28, f"r{who[0]}"))
                    label_ = f"{'ABCD'[who[0]]}{j}"
                else:  # a partial sum: one stripe per rank summed in it
                    for k, q in enumerate(who):
                        out.append(rect(x + k * cell / len(who), y, cell / len(who), 28, f"r{q}", rx=0))
                    label_ = str(j)
                out.append(text(x + cell / 2, y + 19, label_, 13, anchor="middle", weight="bold"))
                if got.get(r) == j:  # the chunk this rank just received
                    out.append(f'<rect x="{n(x - 1.5)}" y="{n(y - 1.5)}" width="{n(cell + 3)}" height="31" '
                               'rx="4" class="ink" stroke-width="2.5"/>')

    y += 6
    for phase, t, holds, got in states:
        if t == 1:
            y += 8
            head = (f"reduce-scatter: {ranks - 1} steps, each rank adds the chunk it receives to its own"
                    if phase == "reduce-scatter" else
                    f"all-gather: {ranks - 1} steps, each rank keeps the summed chunk it receives")
            out.append(text(20, y + 14, head, 13, cls="mute"))
            y += 22
        row("start" if phase == "start" else f"step {t}", holds, got)
        y += 34
    steps = 2 * (ranks - 1)
    y += 10
    for line in ["Framed: the chunk a rank received in that step. Striped: a partial sum, one stripe per",
                 "rank summed in it so far; Σj: chunk j summed over all 4 ranks.",
                 f"Each rank sends 2(n−1) = {steps} chunks of S/n, that is 2(n−1)/n × S = {n(steps / ranks)} S;",
                 "under 2 S for any n: the bytes per rank hardly grow with the ring."]:
        y += 18
        out.append(text(20, y, line, 13, cls="mute"))
    return svg("A ring all-reduce on 4 ranks: 3 reduce-scatter steps, then 3 all-gather steps",
               f"Four ranks, each with 4 chunks. In each of {ranks - 1} reduce-scatter steps every rank sends "
               "one chunk to the next rank, which adds it to its own; afterwards rank r holds chunk r summed "
               f"over all ranks. In each of {ranks - 1} all-gather steps every rank passes a summed chunk on; "
               f"afterwards every rank holds all 4 sums. Each rank sends 2(n-1)/n x S = {n(steps / ranks)} S.",
               y + 18, out)


# (A3) Step 14: the GPU timeline each traced CPU timeline stands for, from a model, not a trace.
# One optimizer step on one GPU: forward F, backward B, optimizer O (time units); backward makes
# its gradients at an even rate, the last layer's first, so with k equal buckets bucket i is full
# at F + (i + 1) B / k; its all-reduce then takes LATENCY + C / k (C: all the gradients at the
# bus bandwidth, 2(n-1)/n x bytes / bandwidth), on the communication stream, one at a time,
# beside backward; the optimizer starts when backward and the last all-reduce are both done.
F_, B_, O_, C_, LATENCY = 1.0, 2.0, 0.5, 1.2, 0.15
# all-reduces per optimizer step and micro-batches per step, as the traced run of step 14 counted
# them (notebooks/14-profiling.ipynb, cell "structure"; tests/test_diagrams.py compares)
STEP14_CALLS = {"default": (1, 1), "small-buckets": (4, 1), "no-sync": (1, 4)}


def ideal_step(buckets, micro):
    """[(lane, start, end, label, class)] of one optimizer step: lane 0 computes, lane 1 (the
    communication stream) all-reduces; with micro > 1 the first micro - 1 run under no_sync()."""
    spans, t, comm = [], 0.0, 0.0  # comm: when the communication stream is free again
    f, b = F_ / micro, B_ / micro  # a micro-batch is its share of the batch
    for mb in range(micro):
        tag, last = (str(mb) if micro > 1 else ""), mb == micro - 1
        spans.append((0, t, t + f, f"F{tag}" if tag else "forward", "r0"))
        t += f
        k = buckets if last else 1  # under no_sync() the gradients only add up: no all-reduce
        for i in range(k):  # the part of backward that fills bucket i, then its all-reduce
            end = t + b * (i + 1) / k
            spans.append((0, t + b * i / k, end, f"b{i}" if k > 1 else f"B{tag}" if tag else "backward", "r1"))
            if last:
                start = max(end, comm)
                comm = start + LATENCY + C_ / k
                spans.append((1, start, comm, f"AR {i}" if k > 1 else "all-reduce", "r3"))
        t += b
    opt = max(t, comm)
    return spans + [(0, opt, opt + O_, "opt.", "r2")]


def ideal_timeline(variant, title):
    buckets, micro = STEP14_CALLS[variant]
    spans = ideal_step(buckets, micro)
    backward_end = max(end for _, _, end, _, cls in spans if cls == "r1")
    opt_start = max(start for _, start, _, _, cls in spans if cls == "r2")
    comm = sum(end - start for lane, start, end, _, _ in spans if lane == 1)
    exposed = opt_start - backward_end
    out, y, x0, scale = [], 20, 150, 100  # px per time unit: the longest step, 4.85, fits 680
    out.append(text(20, y + 12, title, 15, weight="bold"))
    y += 30
    for k, lane in enumerate(["compute", "communication"]):
        out.append(text(20, y + k * 38 + 20, lane, 13, weight="bold"))
    for lane, s, e, label, cls in spans:
        x, w = x0 + s * scale, (e - s) * scale
        out.append(rect(x, y + lane * 38, w, 30, cls, rx=3))
        out.append(text(x + w / 2, y + lane * 38 + 20, label, 13, anchor="middle"))
    if micro > 1:
        out.append(text(x0 + 4, y + 38 + 20, "no all-reduce: gradients add up locally", 13, cls="mute"))
    y += 2 * 38 + 4
    if exposed > 1e-9:  # the wait between the end of backward and the optimizer
        x1, x2 = x0 + backward_end * scale, x0 + opt_start * scale
        out.append(f'<path d="M{n(x1)} {y} L{n(x1)} {y + 6} L{n(x2)} {y + 6} L{n(x2)} {y}" '
                   'class="ink" stroke-width="1.5"/>')
        out.append(text((x1 + x2) / 2, y + 22, f"exposed {exposed:.2f}", 13, anchor="middle", cls="warn"))
    y += 36
    calls = sum(1 for lane, *_ in spans if lane == 1)
    out.append(text(20, y + 6, f"step {opt_start + O_:.2f} = compute {F_ + B_ + O_:.2f} + exposed {exposed:.2f}; "
                    f"{calls} all-reduce{'s' if calls > 1 else ''}, {comm:.2f} in all", 13, cls="mute"))
    y += 24
    out.append(text(20, y, f"Model, in time units: forward {n(F_)}, backward {n(B_)}, optimizer {n(O_)}; "
                    f"all-reduce {LATENCY} + {C_} × share.", 13, cls="mute"))
    return svg(title,
               f"A model, not a measurement: forward {F_}, backward {B_} split evenly over {buckets} bucket(s), "
               f"{micro} micro-batch(es), optimizer {O_} time units; the all-reduce of a bucket takes "
               f"{LATENCY} plus {C_} times its share of the gradients (bytes over bandwidth) and starts on the "
               f"communication stream when its gradients are ready. Exposed: {exposed:.2f}.", y + 18, out)


def ideal_default():
    return ideal_timeline("default", "On a GPU, default buckets: one all-reduce, after backward")


def ideal_small_buckets():
    return ideal_timeline("small-buckets", "On a GPU, small buckets: all-reduces beside backward")


def ideal_no_sync():
    return ideal_timeline("no-sync", "On a GPU, no_sync(): one all-reduce per optimizer step")


# (A4) Step 15: the pipeline schedules code/15_pipeline.py records, as stages x time slots.
PIPE_P, PIPE_M = 2, 4  # stages, micro-batches: the notebook's first run (tests/test_diagrams.py compares)


def pipeline_order(schedule, stage, p, m):
    """The order of a stage's actions: ("F", i) forward, ("B", i) backward of micro-batch i.
    GPipe: every forward, then every backward. 1F1B: p - stage - 1 forwards to fill the pipe,
    then one forward and one backward in turn, then the backwards left."""
    if schedule == "GPipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warm = min(p - stage - 1, m)
    order = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        order += [("F", warm + i), ("B", i)]
    return order + [("B", i) for i in range(m - warm, m)]


def pipeline_slots(orders):
    """{(stage, action): slot} with every action one time slot (equal stages, the formula's
    assumption): an action starts when its stage is free and its input exists: stage s's F i
    after stage s - 1's F i, stage s's B i after stage s + 1's B i."""
    p, at, free = len(orders), {}, [0] * len(orders)
    todo = [list(o) for o in orders]
    while any(todo):
        for s in range(p):
            while todo[s]:
                kind, i = todo[s][0]
                need = (s - 1, (kind, i)) if kind == "F" and s > 0 else \
                       (s + 1, (kind, i)) if kind == "B" and s < p - 1 else None
                if need and need not in at:
                    break  # it waits for the other stage
                at[(s, todo[s].pop(0))] = max(free[s], at[need] + 1 if need else 0)
                free[s] = at[(s, (kind, i))] + 1
    return at


def pipeline():
    p, m = PIPE_P, PIPE_M
    out, y, x0 = [], 20, 112
    out.append(text(20, y + 12, f"Pipeline schedules: {p} stages, {m} micro-batches", 15, weight="bold"))
    out.append(text(20, y + 34, "Every action one time slot. F i: forward of micro-batch i; B i: its backward.",
                    13, cls="mute"))
    y += 50
    for schedule, what in [("GPipe", "every forward, then every backward"),
                           ("1F1B", "a forward and a backward in turn")]:
        orders = [pipeline_order(schedule, s, p, m) for s in range(p)]
        at = pipeline_slots(orders)
        slots = max(at.values()) + 1
        idle, total = p * slots - 2 * p * m, p * slots
        assert abs(idle / total - (p - 1) / (m + p - 1)) < 1e-12  # the formula's bubble, for this order too
        cell = (W - 24 - x0) / slots
        out.append(text(20, y + 14, f"{schedule}: {what}", 14, weight="bold"))
        y += 22
        out.append(text(20, y + 12, "time slot", 13, cls="mute"))
        for t in range(slots):
            out.append(text(x0 + t * cell + cell / 2, y + 12, str(t), 13, anchor="middle", cls="mute"))
        y += 18
        for s in range(p):
            out.append(text(20, y + 20, f"stage {s}", 14, weight="bold"))
            busy = {slot: a for (st, a), slot in at.items() if st == s}
            for t in range(slots):
                x = x0 + t * cell
                if t in busy:
                    kind, i = busy[t]
                    out.append(rect(x + 1, y, cell - 2, 28, "r0" if kind == "F" else "r1"))
                    out.append(text(x + cell / 2, y + 19, f"{kind}{i}", 13, anchor="middle", weight="bold"))
                else:
                    out.append(rect(x + 1, y, cell - 2, 28, "pad"))
                    out.append(text(x + cell / 2, y + 19, "idle", 13, anchor="middle", cls="warn"))
            y += 34
        # activations kept for backward: forwards done minus backwards done, at most (as the script counts)
        held = max(sum(1 if k == "F" else -1 for k, _ in orders[0][:j + 1]) for j in range(len(orders[0])))
        out.append(text(20, y + 10, f"Stage 0 keeps the activations of up to {held} micro-batches at once.",
                        13, cls="mute"))
        y += 30
    share = idle / (2 * p * m)  # the same idle against the ideal time, m forwards and m backwards per stage
    bubble = idle / total
    for line in [f"Idle: {idle} of {total} stage-slots in both, (p−1)/(m+p−1) = {bubble:.2f} of the total time;",
                 f"against the ideal time, 2m = {2 * m} slots per stage, the same idle is (p−1)/m = {share:.2f}."]:
        out.append(text(20, y + 4, line, 13, cls="mute"))
        y += 18
    return svg(f"GPipe and 1F1B on {p} stages with {m} micro-batches: the same bubble",
               f"Two Gantt charts, stages as rows, time slots as columns, every forward or backward one slot. "
               f"GPipe runs F0 to F{m - 1} then B0 to B{m - 1}; 1F1B alternates. Both take {slots} slots with "
               f"{idle} idle stage-slots: a bubble of (p-1)/(m+p-1) = {bubble:.2f} of the total time, "
               f"(p-1)/m = {share:.2f} of the ideal time.", y + 14, out)


# (A5) Step 15: the 2-D mesh of the Roihu job, (dp 2, tp 4) on 2 nodes of 4 GPUs.
MESH_DP, MESH_TP = 2, 4


def mesh():
    dp, tp = MESH_DP, MESH_TP
    out, y = [], 20
    out.append(text(20, y + 12, f"init_device_mesh(..., (dp {dp}, tp {tp})) on {dp} nodes of {tp} GPUs", 15,
                    weight="bold"))
    out.append(text(20, y + 34, "rank = dp index × tp + tp index: the last dimension varies fastest, as torchrun",
                    13, cls="mute"))
    out.append(text(20, y + 52, "numbers the processes of a node, so each TP group is one node.", 13, cls="mute"))
    y += 66
    col, x0, box_w, row_h = 118, 150, 100, 96
    for t in range(tp):
        out.append(text(x0 + t * col + box_w / 2, y + 14, f"tp index {t}", 13, anchor="middle", cls="mute"))
    y += 22
    for d in range(dp):
        ny = y + d * row_h
        out.append(rect(12, ny, W - 24, 62, "node", rx=8))
        out.append(text(24, ny + 26, f"node {d}", 14, weight="bold"))
        out.append(text(24, ny + 46, f"dp index {d}", 13, cls="mute"))
        out.append(rect(x0 - 8, ny + 8, tp * col - col + box_w + 16, 46, "task", rx=6))
        for t in range(tp):
            x = x0 + t * col
            out.append(rect(x, ny + 14, box_w, 34, "gpu"))
            out.append(text(x + box_w / 2, ny + 36, f"rank {d * tp + t}", 13, anchor="middle", weight="bold"))
            if d:  # the FSDP2 peers: the same tp index on every node
                out.append(f'<path d="M{n(x + box_w / 2)} {ny - row_h + 50} L{n(x + box_w / 2)} {ny + 12}" '
                           'class="ink" stroke-width="2" stroke-dasharray="5 4"/>')
    y += (dp - 1) * row_h + 62 + 24
    for k, line in enumerate([
            f"Blue band, one TP group: {tp} ranks, an all-reduce in every block, forward and backward,",
            "on activations: on the node's own GPU links.",
            f"Dashed, one FSDP2 group: {dp} ranks with the same tp index, an all-gather and a",
            "reduce-scatter per block and step, on weights and gradients: across the network."]):
        out.append(text(20, y + 18 * k, line, 13, cls="mute"))
    y += 4 * 18
    return svg(f"A (dp {dp}, tp {tp}) mesh on {dp} nodes: tensor parallel inside a node, FSDP2 across",
               f"Ranks 0 to {tp - 1} on node 0 and {tp} to {dp * tp - 1} on node 1 form one tensor-parallel group "
               f"per node; ranks with the same position on each node (0 and {tp}, 1 and {tp + 1}, ...) form the "
               "FSDP2 groups across the nodes.", y + 6, out)


# --- Figures B (steps 9 and 11) ---
import json  # figures B read files of the repository: a notebook's stored output, a batch script
import re

MONO = "ui-monospace, SFMono-Regular, Menlo, Consolas, 'Liberation Mono', monospace"


def mono(x, y, s, size=13, cls=None):
    """Code text: an inline style, since the stylesheet's `text` font beats a font-family attribute."""
    attrs = f' font-size="{size}"' + (f' class="{cls}"' if cls else "")
    return f'<text x="{n(x)}" y="{n(y)}"{attrs} style="font-family: {MONO}">{esc(s)}</text>'


def numbered(out, x, y, k, line):
    out.append(f'<circle cx="{n(x + 10)}" cy="{n(y - 5)}" r="10" class="task"/>')
    out.append(text(x + 10, y, str(k), 13, anchor="middle", weight="bold"))
    out.append(text(x + 28, y, line, 13))


def sbatch_option(path, name):
    return re.search(rf"^#SBATCH --{name}=(\S+)$", path.read_text(), re.M).group(1)


# (B1) Step 9: the requeue, from slurm/09-requeue.sbatch and code/09_reliability.py as they are.
def requeue():
    batch, script = ROOT / "slurm" / "09-requeue.sbatch", ROOT / "code" / "09_reliability.py"
    limit = sbatch_option(batch, "time")                     # 00:15:00
    sig, warn = sbatch_option(batch, "signal").split("@")    # USR1, 120
    h, m, s = map(int, limit.split(":"))
    total, warn = 3600 * h + 60 * m + s, int(warn)
    code = re.search(r"^STOPPED = (\d+)", script.read_text(), re.M).group(1)
    ckpt = re.search(r'^ckpt="([^"]+)"', batch.read_text(), re.M).group(1).replace("$SLURM_JOB_ID", "<jobid>")
    assert 'echo "run ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID"' in batch.read_text()
    assert 'scontrol requeue "$SLURM_JOB_ID"' in batch.read_text() and '"$ckpt.requeue"' in batch.read_text()

    def clock(t):
        return f"{t // 60}:{t % 60:02d}"

    out, x0, x1 = [], 80, 650
    px = (x1 - x0) / total
    xw = x0 + (total - warn) * px
    y = 20
    out.append(text(20, y + 12, "A requeue: Slurm's warning, one checkpoint, the same job again", 15, weight="bold"))
    out.append(text(20, y + 34, f"slurm/09-requeue.sbatch: --time={limit}, --signal={sig}@{warn}, runs "
                    "code/09_reliability.py", 13, cls="mute"))
    y += 76
    out.append(text(xw - 6, y - 8, f"{sig}, {warn} s before the limit", 13, anchor="end", cls="warn"))
    out.append(text(x1, y - 8, "time limit", 13, anchor="end", cls="mute"))
    out.append(text(20, y + 21, "run 0", 14, weight="bold"))
    out.append(rect(x0, y, xw - x0 + 14, 32, "r0"))
    out.append(text(x0 + 10, y + 21, "training, step after step, on every rank", 13))
    out.append(rect(xw + 14, y, x1 - xw - 14, 32, "gone"))
    out.append(f'<path d="M{n(xw)} {n(y - 4)} L{n(xw)} {n(y + 36)}" class="ink" stroke-width="2"/>')
    out.append(text(x0, y + 50, "0:00", 13, anchor="middle", cls="mute"))
    out.append(text(xw - 4, y + 50, clock(total - warn), 13, anchor="end", cls="mute"))
    out.append(text(x1, y + 50, clock(total), 13, anchor="end", cls="mute"))
    y += 58
    panel = [f"Slurm sends {sig} to every process of the job's steps: the handlers only note it",
             "after the step it is in, an all_reduce (MAX) of the stop flag: every rank stops there",
             f"rank 0 writes the checkpoint {ckpt} and then its .requeue marker",
             f"every rank exits with code {code}; srun returns to the batch script",
             "the batch script finds the marker and runs scontrol requeue <jobid>"]
    out.append(f'<path d="M{n(xw)} {n(y - 4)} L20 {n(y + 6)} M{n(xw + 14)} {n(y - 4)} L{W - 20} {n(y + 6)}" '
               'class="ink" stroke-dasharray="3 3"/>')
    out.append(rect(20, y + 6, W - 40, 30 + 26 * len(panel), "box", rx=8))
    out.append(text(34, y + 26, "the seconds after the warning, zoomed in", 13, weight="bold"))
    for k, line in enumerate(panel, 1):
        numbered(out, 34, y + 30 + 26 * k, k, line)
    y += 36 + 26 * len(panel) + 8
    out.append(arrow(W / 2, y, W / 2, y + 22))
    y += 26
    out.append(text(20, y + 21, "queue", 14, weight="bold"))
    out.append(rect(x0, y, x1 - x0, 32, "gone"))
    out.append(text(x0 + 10, y + 21, "PENDING: the same job, the same id, waits to start again", 13))
    y += 34
    out.append(arrow(W / 2, y, W / 2, y + 22))
    y += 26
    out.append(text(20, y + 21, "run 1", 14, weight="bold"))
    out.append(rect(x0, y, x1 - x0, 52, "r2"))
    out.append(text(x0 + 10, y + 20, "SLURM_RESTART_COUNT=1: the batch script prints \"run 1 of job <jobid>\"", 13))
    out.append(text(x0 + 10, y + 40, f"resumes from {ckpt} at the next step, trains to the end, exit 0", 13))
    y += 52
    return svg("Step 9's requeue: Slurm's warning, one checkpoint, the same job again",
               f"Run 0 trains until Slurm sends {sig} {warn} s before the {clock(total)} time limit. Every "
               f"rank stops after the same step, rank 0 writes the checkpoint and the requeue marker, "
               f"the ranks exit with code {code} and the batch script runs scontrol requeue. The job "
               "waits in the queue, and run 1, with the same job id and SLURM_RESTART_COUNT=1, "
               "resumes from the checkpoint.", y + 20, out)


def stored_output(notebook, tag):
    """The printed text of a notebook cell, found by its tag: a figure drawn from what ran."""
    for cell in json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]:
        if tag in cell["metadata"].get("tags", []):
            return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))
    raise KeyError(f"{notebook}: no cell tagged {tag}")


# (B2) Step 11: the --bug hang, with the stacks py-spy printed for it (notebook 11, hang-pyspy).
def hang():
    shown = stored_output("11-debugging.ipynb", "hang-pyspy")
    stacks = {}
    for who, body in re.findall(r"^(ranks? [\d, ]+):\n((?:    .*\n?)+)", shown, re.M):
        ranks = [int(r) for r in re.findall(r"\d+", who)]
        stacks[ranks[0]] = (ranks, [l.strip() for l in body.splitlines()])
    lines = (ROOT / "code" / "11_debugging.py").read_text().splitlines()
    where = {r: int(re.search(r":(\d+)\)$", frames[-1]).group(1)) for r, (_, frames) in stacks.items()}
    epoch_line = next(i for i, l in enumerate(lines, 1) if l.lstrip().startswith("print0(f\"epoch"))
    assert "mean_over_ranks" in lines[where[0] - 1] and "rank == 0" in lines[where[0] - 2]
    assert "assert_replicas_equal(model)" == lines[where[1] - 1].strip()
    timeout = re.search(r'"--timeout", type=int, default=(\d+)', "\n".join(lines)).group(1)
    others = stacks[1][0]

    out, y = [], 20
    out.append(text(20, y + 12, "A hang: rank 0 waits in all_reduce, rank 1 in broadcast", 15, weight="bold"))
    out.append(text(20, y + 34, "code/11_debugging.py --bug, after the last epoch: no error, each rank waits "
                    "for the other", 13, cls="mute"))
    y += 56
    col, xs = 310, (20, 350)
    for k, x in enumerate(xs):
        out.append(text(x + col / 2, y + 12, f"rank {k}", 14, anchor="middle", weight="bold"))
    y += 22
    out.append(rect(20, y, W - 40, 30, "task"))
    out.append(text(W / 2, y + 20, f"line {epoch_line}: the epoch's loss, mean_over_ranks: both call all_reduce, "
                    "it completes", 13, anchor="middle"))
    y += 40
    rows = [(f"line {where[0] - 1}: if args.bug and rank == 0: true", f"line {where[0] - 1}: false, skips line {where[0]}"),
            (f"line {where[0]}: mean_over_ranks: all_reduce", f"line {where[1]}: assert_replicas_equal: broadcast")]
    for i, pair in enumerate(rows):
        for k, (x, label) in enumerate(zip(xs, pair)):
            out.append(rect(x, y, col, 30, f"r{k}"))
            if i:
                out.append(rect(x, y, col, 30, "pad"))
            out.append(text(x + 10, y + 20, label, 13))
        y += 38
    out.append(text(W / 2, y + 8, f"each waits for the other: a hang until --timeout "
                    f"({timeout} s by default)", 13, anchor="middle", cls="warn"))
    y += 28
    out.append(text(20, y + 12, "What py-spy dump shows for each, innermost frame first:", 13, weight="bold"))
    y += 24
    for k in (0, 1):
        ranks, frames = stacks[k]
        head = f"rank {k}" if len(ranks) == 1 else (f"rank {k} (in the {len(ranks) + 1}-process job, ranks "
                                                    f"{ranks[0]} to {ranks[-1]} show this stack)")
        out.append(rect(20, y, W - 40, 28 + 19 * len(frames), f"r{k}", rx=6))
        out.append(text(32, y + 19, head, 13, weight="bold"))
        for j, frame in enumerate(frames):
            out.append(mono(44 if j else 32, y + 38 + 19 * j, frame))
        y += 28 + 19 * len(frames) + 10
    return svg("A hang: rank 0 waits in all_reduce, rank 1 in broadcast",
               f"With --bug, after the last epoch rank 0 enters the all_reduce of mean_over_ranks on line "
               f"{where[0]}, inside if rank == 0, while rank 1 skips it and enters the broadcast of "
               f"assert_replicas_equal on line {where[1]}. py-spy shows rank 0's stack ending in "
               f"all_reduce and rank 1's, like ranks {others[1]} to {others[-1]}, in broadcast.", y + 10, out)

# (B3) Step 10: the ladder of code/10_benchmark.py, each rung named as the script names its row.
LADDER = [  # (the row's name in the script, what it does, which cost it goes after)
    ("DataLoader (tutorial baseline)", "one image at a time, main process", "r1"),
    ("+ workers, pinned, non_blocking", "batches prepared in parallel", "r1"),
    ("data resident on the device", "no input pipeline left", "r1"),
    ("+ bf16 autocast", "half the bytes, extra casting kernels", "r2"),
    ("+ channels_last", "cuDNN's layout for convolutions", "r2"),
    ("+ torch.compile", "fused kernels, launched one by one", "r0"),
    ('+ torch.compile(mode="reduce-overhead")', "forward and backward as CUDA graphs", "r0"),
    ("+ CUDA graph of the whole step", "one launch per step", "r0"),
]


def ladder():
    script = (ROOT / "code" / "10_benchmark.py").read_text()
    filled = {"+ workers, pinned, non_blocking": "workers}} workers, pinned, non_blocking",  # f-strings
              "+ bf16 autocast": "'bf16' if AUTOCAST == torch.bfloat16 else 'fp16'}} autocast"}
    for name, _, _ in LADDER:
        quoted = [filled[name].replace("}}", "}")] if name in filled else [f'"{name}"', f"'{name}'"]
        assert any(q in script for q in quoted), f"code/10_benchmark.py has no row {name}"
    out, y = [], 20
    out.append(text(20, y + 12, "The ladder: one GPU's step, one cost at a time", 15, weight="bold"))
    out.append(text(20, y + 34, "code/10_benchmark.py times each rung for a few seconds and prints images/s",
                    13, cls="mute"))
    y += 60
    h, gap, lgap, xl, lcol, xr, rcol = 44, 10, 18, 20, 270, 330, 330
    out.append(text(xl, y + 12, "rungs 1 to 3: the input pipeline", 13, weight="bold"))
    out.append(text(xr, y + 12, "rungs 4 to 8: rung 3 plus one change", 13, weight="bold"))
    y += 24
    left = y + (5 * h + 4 * gap - (3 * h + 2 * lgap)) / 2  # rungs 1-3 centred on rungs 4-8
    for k, (name, what, cls) in enumerate(LADDER):
        x, top, col = (xl, left + k * (h + lgap), lcol) if k < 3 else (xr, y + (k - 3) * (h + gap), rcol)
        out.append(rect(x, top, col, h, cls))
        out.append(text(x + 10, top + 18, str(k + 1), 13, weight="bold"))
        out.append(text(x + 24, top + 18, name, 13))
        out.append(text(x + 24, top + 36, what, 13, cls="mute"))
        if 0 < k < 3:
            out.append(arrow(x + col / 2, top - lgap, x + col / 2, top - 1))
        if k >= 3:
            y3 = left + 2 * (h + lgap) + h / 2
            out.append(arrow(xl + lcol + 2, y3, x - 2, top + h / 2))
    y += 5 * (h + gap) + 8
    for k, (cls, what) in enumerate([("r1", "getting the batch to the GPU"), ("r2", "arithmetic and memory"),
                                     ("r0", "launching kernels")]):
        x = [20, 260, 460][k]
        out.append(rect(x, y, 18, 14, cls, rx=2))
        out.append(text(x + 24, y + 12, what, 13))
    y += 36
    out.append(text(20, y, "More GPUs multiply what one GPU does, idle time included: climb it on one GPU first.",
                    13, cls="mute"))
    return svg("The ladder of code/10_benchmark.py: eight rungs, each after one cost of a training step",
               "Rungs 1 to 3 shorten the input pipeline: the tutorial's DataLoader, then workers with pinned "
               "memory, then the data resident on the device. Rungs 4 to 8 each add one change to rung 3: "
               "bf16 autocast and channels_last go after arithmetic and memory; torch.compile, its "
               "reduce-overhead mode and a CUDA graph of the whole step go after the cost of launching "
               "kernels.", y + 20, out)


# --- Figures C (steps 1 to 5) ---
# (C1) Step 2: the mean of equal shards' mean gradients is the whole batch's mean gradient, and
# three settings that break it. The numbers are computed here, and the figure stops if they do
# not say what its text says.
EQUAL_GRADS = [1, 3, 2, 6, 4, 0, 5, 7]  # one weight's gradient for each of 8 images


def equivalence():
    g, ranks = EQUAL_GRADS, 2
    shard = len(g) // ranks
    shards = [g[r * shard:(r + 1) * shard] for r in range(ranks)]
    mean = sum(g) / len(g)
    means = [sum(s) / shard for s in shards]
    ddp = sum(means) / ranks
    sums = [sum(s) for s in shards]
    ddp_sum = sum(sums) / ranks
    short = g[:-1]  # 7 images: the sampler repeats the first to give each rank 4
    padded = short + short[:1]
    pad_means = [sum(padded[r * shard:(r + 1) * shard]) / shard for r in range(ranks)]
    pad_ddp = sum(pad_means) / ranks
    short_mean = sum(short) / len(short)
    if ddp != mean or ddp_sum * ranks != sum(g) or pad_ddp == short_mean:
        raise SystemExit("equivalence: the numbers no longer show what the figure says")

    out, cell, gap = [], 60, 6
    y = 18
    out.append(text(W / 2, y + 14, "Why DDP's averaged gradient is the whole batch's gradient", 15,
                    anchor="middle", weight="bold"))
    y += 34
    out.append(text(W / 2, y + 10, f"{len(g)} images, each with its gradient of one weight; "
                    f"{ranks} ranks, {shard} images each", 13, anchor="middle", cls="mute"))
    y += 20
    x0 = (W - (len(g) * (cell + gap) - gap)) / 2
    for i, v in enumerate(g):
        x = x0 + i * (cell + gap)
        out.append(rect(x, y, cell, 34, f"r{i // shard}"))
        out.append(text(x + cell / 2, y + 23, n(v), 14, anchor="middle", weight="bold"))
    for r in range(ranks):
        mid = x0 + (r * shard + shard / 2) * (cell + gap) - gap / 2
        out.append(text(mid, y + 54, f"shard of rank {r}", 13, anchor="middle"))
    y += 70
    half = (W - 60) / 2
    boxes = [("One process: the batch's mean",
              [f"({' + '.join(n(v) for v in g)}) / {len(g)}", f"= {n(mean)}"]),
             (f"DDP: rank means, all-reduced / {ranks}",
              [", ".join(f"rank {r}: {n(sums[r])} / {shard} = {n(means[r])}" for r in range(ranks)),
               f"({' + '.join(n(m) for m in means)}) / {ranks} = {n(ddp)}"])]
    for k, (head, lines) in enumerate(boxes):
        x = 20 + k * (half + 20)
        out.append(rect(x, y, half, 78, "box" if k == 0 else "task", rx=8))
        out.append(text(x + half / 2, y + 22, head, 13, anchor="middle", weight="bold"))
        for i, line in enumerate(lines):
            out.append(text(x + half / 2, y + 45 + i * 20, line, 14, anchor="middle"))
    y += 100
    out.append(text(W / 2, y, "Equal whenever every rank's loss is a mean over the same number of "
                    "images:", 14, anchor="middle"))
    out.append(text(W / 2, y + 22, "(1/K) · Σ over ranks of mean(shard)  =  mean(batch)", 14,
                    anchor="middle", weight="bold"))
    y += 46
    out.append(text(20, y + 4, "What breaks it, and the fix:", 14, weight="bold"))
    y += 16
    w3 = (W - 40 - 2 * 12) / 3
    breaks = [("reduction='sum'",
               [f"each rank sums: {', '.join(n(s) for s in sums)}",
                f"DDP: ({' + '.join(n(s) for s in sums)}) / {ranks} = {n(ddp_sum)}",
                f"one process: {n(sum(g))}",
                f"steps {ranks} times too small"],
               "fix: lr × K, or the mean"),
              ("Uneven shards",
               [f"{len(short)} images; the sampler",
                f"repeats the first: {shard} + {shard}",
                f"({' + '.join(f'{m:g}' for m in pad_means)}) / {ranks} = {pad_ddp:g}",
                f"mean of the {len(short)}: {short_mean:g}"],
               "fix: drop_last=True"),
              ("BatchNorm",
               ["each rank normalises",
                "with its own shard's",
                "mean and variance:",
                "other gradients"],
               "fix: SyncBatchNorm")]
    for k, (head, lines, fix) in enumerate(breaks):
        x = 20 + k * (w3 + 12)
        out.append(rect(x, y, w3, 148, "box", rx=8))
        out.append(text(x + 10, y + 22, head, 14, weight="bold", cls="warn"))
        for i, line in enumerate(lines):
            out.append(text(x + 10, y + 44 + i * 19, line, 13))
        out.append(text(x + 10, y + 44 + len(lines) * 19 + 6, fix, 13, weight="bold"))
    y += 166
    return svg("DDP equals one process when each rank's loss is a mean over equal shards",
               f"Eight per-image gradients {', '.join(n(v) for v in g)}: one process averages them "
               f"to {n(mean)}; two ranks average their four each to {n(means[0])} and {n(means[1])}, "
               f"and the all-reduce's mean is {n(ddp)} again. A sum loss gives {n(ddp_sum)} instead "
               f"of {n(sum(g))}; a padded shard gives {pad_ddp:g} instead of {short_mean:g}; "
               "BatchNorm with per-shard statistics changes the gradients themselves.", y, out)




# --- Figures D (steps 6 to 8, 12 and 13) ---
# (D1) Steps 7 and 8: what step 1's DDP script writes by hand, and what Lightning and Accelerate
# take over. Each cell names a string of the script it stands for: present where the script
# writes it (by hand or as one call), absent where the framework does it (step 1's own line).
TAKE_OVER_SCRIPTS = ["code/01_ddp.py", "code/07_lightning.py", "code/08_accelerate.py"]
TAKE_OVER = [  # (job, [(lines, style, needle) for step 1, 7, 8])
    ("process group,\ndevice", [("setup_distributed()", "proc", "setup_distributed("),
                                ("Trainer(devices,\nnum_nodes, strategy)", "task", "L.Trainer("),
                                ("Accelerator()", "task", "Accelerator(")]),
    ("model to device,\nDDP wrap", [(".to(device),\nDDP(model)", "proc", "DDP(model"),
                                    ("fit() wraps it\nin DDP", "gpu", "DDP(model"),
                                    ("prepare(model,\nopt, loader)", "task", "prepare(model, opt, loader)")]),
    ("sampler,\nset_epoch", [("DistributedSampler,\nsampler.set_epoch()", "proc", "sampler.set_epoch("),
                             ("fit() inserts it,\ncalls set_epoch", "gpu", "set_epoch("),
                             ("prepare(loader);\nloader.set_epoch()", "task", "loader.set_epoch(")]),
    ("batches to device", [("x.to(device)", "proc", "x.to(device)"),
                           ("fit() moves them", "gpu", "x.to(device)"),
                           ("the prepared loader\nmoves them", "gpu", "x.to(device)")]),
    ("zero_grad,\nbackward, step", [("loss.backward()\nin your loop", "proc", "loss.backward()"),
                                    ("fit() runs the loop\naround training_step", "gpu", "backward("),
                                    ("accelerator\n.backward(loss)", "task", "accelerator.backward(loss)")]),
    ("loss averaged\nover ranks", [("mean_over_ranks()", "proc", "mean_over_ranks("),
                                   ("self.log(...,\nsync_dist=True)", "task", "sync_dist=True"),
                                   ('accelerator.reduce(\n..., "mean")', "task", "accelerator.reduce(")]),
    ("print, save\non rank 0", [("print0(),\nif rank == 0:", "proc", "if rank == 0:"),
                                ("self.print(); the\nlogger on rank 0", "task", "self.print("),
                                ("print0(),\nis_main_process", "proc", "accelerator.is_main_process")]),
    ("starts the\nprocesses", [("torchrun, or srun\none task per GPU", "box", None),
                               ("torchrun, or srun\none task per GPU", "box", None),
                               ("accelerate launch,\none per node", "box", None)]),
]


def take_over():
    sources = [(ROOT / path).read_text() for path in TAKE_OVER_SCRIPTS]
    for _, cells in TAKE_OVER:  # the figure says what the scripts do: stop if they no longer do
        for (lines, style, needle), source, path in zip(cells, sources, TAKE_OVER_SCRIPTS):
            if needle is not None and (needle in source) != (style != "gpu"):
                raise SystemExit(f"take_over: {path} {'lacks' if style != 'gpu' else 'has'} {needle!r}")
    out, label_w, col, cell_w, row_h = [], 150, 164, 158, 44
    y = 18
    out.append(text(20, y + 14, "What your DDP script writes, and what the frameworks take over", 15,
                    weight="bold"))
    y += 30
    legend = [("proc", "by hand"), ("task", "one call to the framework"),
              ("gpu", "done by the framework"), ("box", "the launcher, outside the script")]
    for k, (c, name) in enumerate(legend):
        lx, ly = 20 + (k % 2) * 300, y + (k // 2) * 22
        out.append(rect(lx, ly, 18, 14, c, rx=2))
        out.append(text(lx + 24, ly + 12, name, 13))
    y += 54
    x0 = 20 + label_w
    for k, head in enumerate(["Step 1: DDP", "Step 7: Lightning", "Step 8: Accelerate"]):
        out.append(text(x0 + k * col + cell_w / 2, y, head, 14, anchor="middle", weight="bold"))
    y += 10
    for job, cells in TAKE_OVER:
        for i, line in enumerate(job.split("\n")):
            out.append(text(20, y + 24 + (i - job.count("\n") / 2) * 16, line, 13, weight="bold"))
        for k, (lines, style, _) in enumerate(cells):
            x = x0 + k * col
            out.append(rect(x, y, cell_w, row_h - 6, style))
            parts = lines.split("\n")
            for i, line in enumerate(parts):
                out.append(text(x + cell_w / 2, y + 24 + (i - (len(parts) - 1) / 2) * 16, line, 13,
                                anchor="middle"))
        y += row_h
    return svg("What step 1's DDP script writes by hand, and what Lightning and Accelerate take over",
               "Process group and device: setup_distributed() by hand; Lightning's Trainer(...) and "
               "Accelerate's Accelerator() as one call. Model to device and DDP: by hand; Lightning's "
               "fit() does it; Accelerate's prepare(). Sampler: by hand; inserted by fit(); prepare() "
               "with loader.set_epoch(). Backward: loss.backward() by hand; fit() runs the loop; "
               "accelerator.backward(loss). The loss over ranks: mean_over_ranks(); self.log with "
               "sync_dist; accelerator.reduce. Printing on rank 0: print0(); self.print(); print0(). "
               "The processes are started by torchrun or srun, or by accelerate launch.", y + 8, out)


DIAGRAMS = {"launch-patterns": launch, "sampler-padding": sampler,
            "ddp-allreduce": allreduce, "zero-fsdp2-per-rank": sharding,
            "collective-broadcast": broadcast, "collective-all-gather": all_gather,
            "collective-reduce-scatter": reduce_scatter, "collective-all-to-all": all_to_all,
            "collective-all-reduce": all_reduce_parts}
DIAGRAMS_A = {"path-map": path_map, "ring-all-reduce": ring, "ideal-step-default": ideal_default,
              "ideal-step-small-buckets": ideal_small_buckets, "ideal-step-no-sync": ideal_no_sync,
              "pipeline-schedules": pipeline, "mesh-2d": mesh}
DIAGRAMS_B = {"requeue-timeline": requeue, "hang-two-collectives": hang, "benchmark-ladder": ladder}
DIAGRAMS_C = {"equivalence-mean-of-means": equivalence}
DIAGRAMS_D = {"ddp-by-hand-vs-frameworks": take_over}
DIAGRAMS.update(DIAGRAMS_A | DIAGRAMS_B | DIAGRAMS_C | DIAGRAMS_D)


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
