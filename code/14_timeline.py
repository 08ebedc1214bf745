"""Step 14: read the traces of code/14_profiling.py (one file per rank): a table per rank and
traced step (step time, compute, communication, how much of it overlaps compute, how much is
exposed) and a timeline picture, one lane per thread, the all-reduce on its own lane.

    python code/14_timeline.py runs/14-trace/default                  # the table
    python code/14_timeline.py runs/14-trace/default --png default.png # and the picture

CPU traces (gloo): communication is gloo's all_reduce on gloo's own threads, compute is the
operators of the other threads. GPU traces: NCCL's kernels against the other kernels. With the
CUDA activity the profiler writes each record_function range twice: on the CPU thread that ran
it (cat "user_annotation") and again over the kernels it launched (cat "gpu_user_annotation",
on the GPU's streams). The ranges and steps are counted from the CPU's; a GPU trace's step is
the span of its GPU copies, since a step's kernels run after the CPU launched them.
"""
import argparse
import glob
import json
import os
import re

MAX_MB = 50  # larger traces: open them in Perfetto (ui.perfetto.dev), which reads GBs
RANGES = ("data", "forward", "backward", "optimizer")


def load(folder, max_mb=MAX_MB):
    """{rank: complete events ('X') of that rank's trace} from folder/rank<N>.json."""
    paths = sorted(glob.glob(os.path.join(folder, "rank*.json")),
                   key=lambda p: int(re.findall(r"\d+", os.path.basename(p))[0]))
    if not paths:
        raise SystemExit(f"error: no trace files rank<N>.json in {folder}: run code/14_profiling.py first")
    traces = {}
    for path in paths:
        mb = os.path.getsize(path) / 2**20
        if mb > max_mb:
            raise SystemExit(f"error: {path} is over {max_mb:g} MB, too large to draw here: trace "
                             f"fewer steps (--active), or open it in Perfetto (ui.perfetto.dev)")
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        rank = int(re.findall(r"\d+", os.path.basename(path))[0])
        traces[rank] = [e for e in events if e.get("ph") == "X" and isinstance(e.get("tid"), int)]
    return traces


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
    return [(max(s, t), min(f, g)) for s, f in a for t, g in b if max(s, t) < min(f, g)]


def on_cpu(e):
    """Not the GPU's copy of a range (the CPU's has cat "user_annotation", or "cpu_op" in older traces)."""
    return e.get("cat") != "gpu_user_annotation"


def profiler_steps(events):
    """The CPU's ProfilerStep#N ranges, in order."""
    return sorted((e for e in events if e["name"].startswith("ProfilerStep#") and on_cpu(e)), key=lambda e: e["ts"])


def steps(events):
    """One row per traced step (ProfilerStep#N): times in ms, counts of calls and ranges."""
    gpu = any(e.get("cat") == "kernel" for e in events)
    comm_events = [e for e in events if is_comm(e, gpu)]
    comm_threads = {e["tid"] for e in comm_events}
    work = [e for e in events if (e.get("cat") == "kernel" and not is_comm(e, gpu) if gpu
                                  else e.get("cat") == "cpu_op" and e["tid"] not in comm_threads)]
    rows = []
    for step in profiler_steps(events):
        s, f = step["ts"], step["ts"] + step["dur"]
        inside = [e for e in events if s <= e["ts"] < f and on_cpu(e)]
        copies = [e for e in events if e["name"] == step["name"] and not on_cpu(e)]
        if copies:  # GPU trace: the step as the GPU ran it, from its first kernel to its last
            s, f = min(e["ts"] for e in copies), max(e["ts"] + e["dur"] for e in copies)

        def clip(es):
            return union((max(s, e["ts"]), min(f, e["ts"] + e["dur"])) for e in es
                         if e["ts"] < f and e["ts"] + e["dur"] > s)
        busy, comm = clip(work), clip(comm_events)
        overlapped = length(intersect(comm, busy))
        rows.append(dict(step=int(step["name"].split("#")[1]), step_ms=(f - s) / 1e3,
                         compute_ms=length(busy) / 1e3, comm_ms=length(comm) / 1e3,
                         overlapped_ms=overlapped / 1e3, exposed_ms=(length(comm) - overlapped) / 1e3,
                         all_reduces=sum(1 for e in comm_events if s <= e["ts"] < f),
                         ranges={r: sum(1 for e in inside if e["name"] == r) for r in RANGES}))
    return rows


def table(traces):
    """Lines of the per-rank, per-step table (the times vary from run to run)."""
    lines = [f"{'rank':>4} {'step':>4} {'step ms':>8} {'compute':>8} {'comm':>8} {'overlap':>8} {'exposed':>8}"]
    for rank, events in traces.items():
        for r in steps(events):
            lines.append(f"{rank:>4} {r['step']:>4} {r['step_ms']:>8.2f} {r['compute_ms']:>8.2f} "
                         f"{r['comm_ms']:>8.2f} {r['overlapped_ms']:>8.2f} {r['exposed_ms']:>8.2f}")
    return lines


COLORS = {"data": "#8c8c8c", "forward": "#4f81bd", "backward": "#f79646", "optimizer": "#9bbb59",
          "all-reduce": "#c0504d", "operators": "#222222"}


def lanes(traces):
    """[(label, [(event, kind)], t0)]: each rank's main thread with its ranges, then its
    communication threads (gloo) or streams (NCCL) with their all-reduces."""
    out = []
    for rank, events in traces.items():
        gpu = any(e.get("cat") == "kernel" for e in events)
        first = profiler_steps(events)[0]
        t0, main = first["ts"], first["tid"]
        busy = [{"ts": s, "dur": f - s} for s, f in union((e["ts"], e["ts"] + e["dur"]) for e in events
                                                          if e["tid"] == main and e.get("cat") == "cpu_op")]
        out.append((f"rank {rank} main thread", [(e, e["name"]) for e in events
                                                 if e["tid"] == main and e["name"] in RANGES and on_cpu(e)]
                    + [(e, "operators") for e in busy], t0))
        for i, tid in enumerate(sorted({e["tid"] for e in events if is_comm(e, gpu)})):
            out.append((f"rank {rank} {'NCCL stream' if gpu else 'gloo thread'} {i + 1}",
                        [(e, "all-reduce") for e in events if e["tid"] == tid and is_comm(e, gpu)], t0))
    return out


def draw(traces, title, ax):
    """The lanes on `ax`, times in ms from each rank's first traced step, step boundaries dotted."""
    rows = lanes(traces)
    for y, (label, bars, t0) in enumerate(reversed(rows)):
        for kind, color in COLORS.items():  # operators: a dark strip under the ranges; where it stops, the thread waits
            spans = [((e["ts"] - t0) / 1e3, e["dur"] / 1e3) for e, k in bars if k == kind]
            if spans:
                ax.broken_barh(spans, (y - 0.35, 0.18) if kind == "operators" else (y - 0.35, 0.7), color=color)
    for rank, events in traces.items():
        t0 = profiler_steps(events)[0]["ts"]
        for e in profiler_steps(events):
            ax.axvline((e["ts"] + e["dur"] - t0) / 1e3, color="black", lw=0.8, ls=":")
        break  # rank 0's boundaries: the ranks' steps line up within the all-reduce's wait
    ax.set_yticks(range(len(rows)), [label for label, _, _ in reversed(rows)])
    ax.set_xlabel("ms since the first traced step")
    ax.set_title(title, loc="left")
    ax.set_xlim(left=0)
    return len(rows)


def figure(traces, title):
    """A figure of its own: the lanes and a legend of the colours."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with plt.rc_context({"font.size": 12}):  # 1000 px wide: 12 pt stays >= 11 px on a page 690 px wide
        fig, ax = plt.subplots(figsize=(10, 1.6 + 0.45 * len(lanes(traces))))
        draw(traces, title, ax)
        fig.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c, label="operators running" if k == "operators"
                                          else k) for k, c in COLORS.items()], loc="lower center", ncol=6, frameon=False)
        fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("folder", help="a folder of rank<N>.json traces, e.g. runs/14-trace/default")
    p.add_argument("--png", help="draw the timeline into this file")
    p.add_argument("--max-mb", type=float, default=MAX_MB, help="refuse to read larger trace files")
    args = p.parse_args()
    traces = load(args.folder, args.max_mb)
    print("\n".join(table(traces)))
    if args.png:
        import chart_file  # code/chart_file.py: a chart whose every text is >= 11 px on the page
        chart_file.save(figure(traces, args.folder), args.png)
        print(f"timeline: {args.png}")
