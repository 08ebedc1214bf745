"""Step 14: read the traces of code/14_profiling.py (one file per rank): a
table per rank and traced step (step time, compute, communication, how much of
it overlaps compute, how much is exposed) and a timeline picture.

    python code/14_timeline.py runs/14-trace/default               # the table
    python code/14_timeline.py runs/14-trace/default --png d.png   # + picture

CPU traces (gloo): communication is gloo's all_reduce on gloo's own threads,
compute is the operators of the other threads but c10d's (a c10d::allreduce_
hands the work to gloo, and may wait for it). GPU traces: NCCL's kernels
against the other kernels. With the CUDA activity the profiler writes each
record_function range twice: on the CPU thread that ran it (cat
"user_annotation") and again over the kernels it launched (cat
"gpu_user_annotation", on the GPU's streams). The ranges and steps are counted
from the CPU's; a GPU trace's step is the span of its GPU copies, since a
step's kernels run after the CPU launched them.

The picture, per rank: its main thread (the ranges, and along the lane's lower
edge a thin strip where operators run), then one lane per all-reduce of a step
(the first of every step on the first lane, the second on the next, ...), so
that calls in flight at the same time or one right after the other stay apart.
Times in ms from the rank's own first traced step; dotted lines end the rank's
steps, across its own lanes only.
"""
import argparse
import glob
import json
import os
import re

MAX_MB = 50  # larger traces: open them in Perfetto (ui.perfetto.dev)
RANGES = ("data", "forward", "backward", "optimizer")


def rank_of(path):
    return int(re.findall(r"\d+", os.path.basename(path))[0])


def load(folder, max_mb=MAX_MB):
    """{rank: complete events ('X') of that rank's trace} from
    folder/rank<N>.json."""
    paths = sorted(glob.glob(os.path.join(folder, "rank*.json")), key=rank_of)
    if not paths:
        raise SystemExit(f"error: no trace files rank<N>.json in {folder}: "
                         "run code/14_profiling.py first")
    traces = {}
    for path in paths:
        if os.path.getsize(path) / 2**20 > max_mb:
            raise SystemExit(
                f"error: {path} is over {max_mb:g} MB, too large to draw "
                "here: trace fewer steps (--active), or open it in Perfetto "
                "(ui.perfetto.dev)")
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        traces[rank_of(path)] = [e for e in events if e.get("ph") == "X"
                                 and isinstance(e.get("tid"), int)]
    return traces


def is_gpu(events):
    return any(e.get("cat") == "kernel" for e in events)


def is_comm(e, gpu):
    if gpu:
        return e.get("cat") == "kernel" and "nccl" in e["name"].lower()
    return e["name"].startswith("gloo:")


def union(intervals):
    out = []
    for s, f in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], f)
        else:
            out.append([s, f])
    return out


def length(intervals):
    return sum(f - s for s, f in intervals)


def intersect(a, b):
    return [(max(s, t), min(f, g)) for s, f in a for t, g in b
            if max(s, t) < min(f, g)]


def on_cpu(e):
    """Not the GPU's copy of a range (the CPU's has cat "user_annotation",
    or "cpu_op" in older traces)."""
    return e.get("cat") != "gpu_user_annotation"


def profiler_steps(events):
    """The CPU's ProfilerStep#N ranges, in order."""
    return sorted((e for e in events if e["name"].startswith("ProfilerStep#")
                   and on_cpu(e)), key=lambda e: e["ts"])


def spans(events):
    """[(ProfilerStep#N, start, end)]: the CPU's step, or on a GPU trace the
    span of its GPU copies, from its first kernel to its last."""
    out = []
    for step in profiler_steps(events):
        s, f = step["ts"], step["ts"] + step["dur"]
        copies = [e for e in events
                  if e["name"] == step["name"] and not on_cpu(e)]
        if copies:
            s = min(e["ts"] for e in copies)
            f = max(e["ts"] + e["dur"] for e in copies)
        out.append((step, s, f))
    return out


def calls(events):
    """Per traced step, the all-reduces that started in it, in order: the
    table counts them, the picture draws each on a lane of its own."""
    gpu = is_gpu(events)
    comm = sorted((e for e in events if is_comm(e, gpu)),
                  key=lambda e: e["ts"])
    return [[e for e in comm if s <= e["ts"] < f] for _, s, f in spans(events)]


def steps(events):
    """One row per traced step (ProfilerStep#N): times in ms, counts of calls
    and ranges."""
    gpu = is_gpu(events)
    comm_events = [e for e in events if is_comm(e, gpu)]
    comm_threads = {e["tid"] for e in comm_events}
    if gpu:
        work = [e for e in events
                if e.get("cat") == "kernel" and not is_comm(e, gpu)]
    else:
        work = [e for e in events
                if e.get("cat") == "cpu_op" and e["tid"] not in comm_threads
                and not e["name"].startswith("c10d::")]
    rows = []
    for (step, s, f), started in zip(spans(events), calls(events)):
        t, u = step["ts"], step["ts"] + step["dur"]  # the CPU's: its ranges
        inside = [e for e in events if t <= e["ts"] < u and on_cpu(e)]

        def clip(es):
            return union((max(s, e["ts"]), min(f, e["ts"] + e["dur"]))
                         for e in es if e["ts"] < f and e["ts"] + e["dur"] > s)
        busy, comm = clip(work), clip(comm_events)
        overlapped = length(intersect(comm, busy))
        rows.append(dict(
            step=int(step["name"].split("#")[1]), step_ms=(f - s) / 1e3,
            compute_ms=length(busy) / 1e3, comm_ms=length(comm) / 1e3,
            overlapped_ms=overlapped / 1e3,
            exposed_ms=(length(comm) - overlapped) / 1e3,
            all_reduces=len(started),
            ranges={r: sum(1 for e in inside if e["name"] == r)
                    for r in RANGES}))
    return rows


def table(traces):
    """Lines of the per-rank, per-step table (the times vary from run to
    run)."""
    lines = [f"{'rank':>4} {'step':>4} {'step ms':>8} {'compute':>8} "
             f"{'comm':>8} {'overlap':>8} {'exposed':>8}"]
    for rank, events in traces.items():
        for r in steps(events):
            lines.append(
                f"{rank:>4} {r['step']:>4} {r['step_ms']:>8.2f} "
                f"{r['compute_ms']:>8.2f} {r['comm_ms']:>8.2f} "
                f"{r['overlapped_ms']:>8.2f} {r['exposed_ms']:>8.2f}")
    return lines


COLORS = {"data": "#8c8c8c", "forward": "#4f81bd", "backward": "#f79646",
          "optimizer": "#9bbb59", "all-reduce": "#c0504d",
          "operators": "#222222"}


def lanes(traces):
    """[(rank, label, [(event, kind)])], top to bottom: each rank's main
    thread with its ranges and the spans where operators run, then a lane per
    all-reduce of a step: the k-th all-reduce of every step on lane k."""
    out = []
    for rank, events in traces.items():
        main = profiler_steps(events)[0]["tid"]
        ops = union((e["ts"], e["ts"] + e["dur"]) for e in events
                    if e["tid"] == main and e.get("cat") == "cpu_op")
        bars = [(e, e["name"]) for e in events
                if e["tid"] == main and e["name"] in RANGES and on_cpu(e)]
        bars += [({"ts": s, "dur": f - s}, "operators") for s, f in ops]
        out.append((rank, f"rank {rank} main thread", bars))
        per_step = calls(events)
        most = max(map(len, per_step), default=0)
        for k in range(most):
            name = f"all-reduce {k + 1}" if most > 1 else "all-reduce"
            out.append((rank, f"rank {rank} {name}", [
                (c[k], "all-reduce") for c in per_step if len(c) > k]))
    return out


def draw(traces, title, ax):
    """The lanes on `ax`, each rank's times in ms from its first traced step,
    its step ends dotted across its lanes. Every bar's collection has its
    kind as gid, the step ends "step ends, rank N" (tests read them back)."""
    rows = lanes(traces)
    ys, y = [], 0.0
    for i, (rank, _, _) in enumerate(rows):
        if i and rank != rows[i - 1][0]:
            y -= 0.5  # a gap between ranks
        ys.append(y)
        y -= 1
    for (rank, _, bars), y in zip(rows, ys):
        t0 = profiler_steps(traces[rank])[0]["ts"]
        for kind, color in COLORS.items():  # operators last: on top
            xs = [((e["ts"] - t0) / 1e3, e["dur"] / 1e3)
                  for e, k in bars if k == kind]
            if xs:
                height = 0.18 if kind == "operators" else 0.7
                ax.broken_barh(xs, (y - 0.35, height), color=color, gid=kind)
    for rank, events in traces.items():
        own = [y for (r, _, _), y in zip(rows, ys) if r == rank]
        ours = profiler_steps(events)
        ends = [(e["ts"] + e["dur"] - ours[0]["ts"]) / 1e3 for e in ours]
        ax.vlines(ends, min(own) - 0.45, max(own) + 0.45, colors="black",
                  lw=0.8, linestyles=":", gid=f"step ends, rank {rank}")
    ax.set_yticks(ys, [label for _, label, _ in rows])
    ax.set_ylim(min(ys) - 0.6, 0.6)
    ax.set_xlabel("ms since the rank's first traced step")
    ax.set_title(title, loc="left")
    ax.set_xlim(left=0)
    return len(rows)


def figure(traces, title):
    """A figure of its own: the lanes and a legend of the colours."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    n = len(lanes(traces))
    height = 2.2 + 0.45 * n
    # 1000 px wide: 12 pt stays >= 11 px on a page 690 px wide
    with plt.rc_context({"font.size": 12}):
        fig, ax = plt.subplots(figsize=(10, height))
        draw(traces, title, ax)
        keys = [plt.Rectangle((0, 0), 1, 1, color=c, label=(
            "operators running" if k == "operators" else k))
            for k, c in COLORS.items()]
        keys.append(Line2D([], [], color="black", lw=0.8, ls=":",
                           label="end of the rank's step"))
        fig.legend(handles=keys, loc="lower center", ncol=4, frameon=False)
        fig.tight_layout(rect=(0, 0.6 / height, 1, 1))
    return fig


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("folder", help="a folder of rank<N>.json traces, "
                   "e.g. runs/14-trace/default")
    p.add_argument("--png", help="draw the timeline into this file")
    p.add_argument("--max-mb", type=float, default=MAX_MB,
                   help="refuse to read larger trace files")
    args = p.parse_args()
    traces = load(args.folder, args.max_mb)
    print("\n".join(table(traces)))
    if args.png:
        import chart_file  # code/chart_file.py: every text >= 11 px on a page
        chart_file.save(figure(traces, args.folder), args.png)
        print(f"timeline: {args.png}")
