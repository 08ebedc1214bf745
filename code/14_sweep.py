"""Step 14: the scaling sweep. One command submits the same short benchmark (a
batch script that runs code/14_scaling.py) at several sizes, each job after the
previous one, waits for the last, and writes the report CSC asks for before it
opens Roihu's gpularge partition: node counts, wall times, efficiency, GPU
utilisation, the batch script, and a pass/fail line.

    python code/14_sweep.py  # Roihu gputest: 1, 2, 4 GPUs; 2 nodes
    python code/14_sweep.py --partition gpularge --sizes 1x4,2x4,4x4
        # CSC's test, in its trial access
    python code/14_sweep.py --sbatch slurm/14-scaling-lumi.sbatch \
        --sizes 1x1,1x2,1x8,2x8
    python code/14_sweep.py ... -- --seconds 120  # options of the benchmark
    python code/14_sweep.py --no-wait ...;
    python code/14_sweep.py --collect  # later

--sizes lists NODESxGPUS_PER_NODE. The batch script's resource lines are scaled
per GPU: cores (and memory, where it has a --mem line) in proportion to the
GPUs of each size. More than 4 GPUs on Roihu need gpularge (gputest: at most 2
nodes; gpumedium: at most 4 GPUs per job), which a project gets for 30 days to
run this test by clicking "Apply for trial access" in MyCSC.

Every number of the report but the job's elapsed time comes from the
benchmark's timed steps (no start-up), and every efficiency, in the table and
in the verdict, is against one baseline: the run with the fewest GPUs (with
whole nodes only, as CSC's test runs: the fewest nodes).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

# CSC: >= 75 % parallel efficiency, >= 3 node counts
CSC_EFFICIENCY, CSC_NODE_COUNTS = 0.75, 3

p = argparse.ArgumentParser()
p.add_argument("--sbatch", default="slurm/14-scaling.sbatch")
p.add_argument("--sizes", default="1x1,1x2,1x4,2x4",
               help="NODESxGPUS_PER_NODE, comma-separated")
p.add_argument("--partition", help="instead of the batch script's")
p.add_argument("--out", default="runs/14-sweep",
               help="where the jobs write and the report goes")
p.add_argument("--no-wait", action="store_true",
               help="submit only; --collect later")
p.add_argument("--collect", action="store_true",
               help="only write the report of the last chain")
p.add_argument("bench", nargs=argparse.REMAINDER,
               help="after --: options of code/14_scaling.py")
args = p.parse_args()
bench = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
sizes = []
for s in args.sizes.split(","):
    m = re.fullmatch(r"(\d+)x(\d+)", s.strip())
    if not m or "0" in (m.group(1), m.group(2)):
        raise SystemExit(f"error: --sizes: {s!r} is not NODESxGPUS_PER_NODE, "
                         f"e.g. 2x4")
    sizes.append((int(m.group(1)), int(m.group(2))))
if not os.path.isfile(args.sbatch):
    raise SystemExit(f"error: --sbatch {args.sbatch}: no such file "
                     f"(run from the repository root)")
script = open(args.sbatch).read()
os.makedirs(args.out, exist_ok=True)
chain = os.path.join(args.out, "jobs.json")
if args.collect and not os.path.exists(chain):
    raise SystemExit(f"error: --collect: no sweep submitted to {args.out} "
                     f"({chain} missing)")


def resources(nodes, gpus):
    """sbatch options for this size: the script's own per-GPU shares of cores
    and memory."""
    line = lambda name: re.search(  # noqa: E731
        rf"^#SBATCH --{name}=(\S+)", script, re.M)
    gres, per_node = line("gres"), line("gpus-per-node")
    have = (int(gres.group(1).rsplit(":", 1)[1]) if gres
            else int(per_node.group(1)))
    opts = [f"--nodes={nodes}",
            f"--gres={gres.group(1).rsplit(':', 1)[0]}:{gpus}" if gres
            else f"--gpus-per-node={gpus}",
            f"--cpus-per-task="
            f"{int(line('cpus-per-task').group(1)) * gpus // have}"]
    if line("mem"):
        opts.append(
            f"--mem={int(line('mem').group(1).rstrip('G')) * gpus // have}G")
    return opts + ([f"--partition={args.partition}"] if args.partition else [])


def slurm(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        # no Slurm here (sacct on a machine without accounting, say): a
        # failed call
        return subprocess.CompletedProcess(cmd, 127, "",
                                           f"{cmd[0]}: command not found")


# submit the chain: each job waits for the one before (afterany)
if not args.collect:
    jobs = []
    for nodes, gpus in sizes:
        after = [f"--dependency=afterany:{jobs[-1]['job']}"] if jobs else []
        r = slurm("sbatch", "--parsable", f"--output={args.out}/job-%j.out",
                  f"--export=ALL,SWEEP_OUT={args.out}",
                  *resources(nodes, gpus),
                  *after, args.sbatch, *bench)
        # Slurm's own reason, and nothing of the chain left behind
        if r.returncode:
            if jobs:
                slurm("scancel", *[j["job"] for j in jobs])
            reason = (r.stderr.strip().splitlines()[-1]
                      .replace("sbatch: error: ", "")
                      if r.stderr.strip() else "?")
            raise SystemExit(f"error: sbatch refused {nodes} node(s) x "
                             f"{gpus} GPU(s): {reason}"
                             + (f" (cancelled the {len(jobs)} job(s) "
                                f"submitted before it)" if jobs else ""))
        jobs.append(dict(job=r.stdout.strip().split(";")[0], nodes=nodes,
                         gpus_per_node=gpus))
    with open(chain, "w") as f:
        json.dump(dict(sbatch=args.sbatch, bench=bench, jobs=jobs), f)
    print(f"submitted {len(jobs)} jobs of {args.sbatch}, "
          f"each after the previous one: "
          + ", ".join(f"{j['nodes']}x{j['gpus_per_node']}" for j in jobs)
          + " (nodes x GPUs per node)")
    if args.no_wait:
        raise SystemExit(0)
    while slurm("squeue", "-h", "-j",
                ",".join(j["job"] for j in jobs)).stdout.strip():
        time.sleep(1)

with open(chain) as f:
    run = json.load(f)


def wall_time(job):
    """(elapsed, state) from sacct; from scontrol where there is no accounting
    database."""
    r = slurm("sacct", "-n", "-X", "-P", "-j", job, "-o", "Elapsed,State")
    if r.returncode == 0 and r.stdout.strip():
        elapsed, state = r.stdout.strip().splitlines()[0].split("|")
        return elapsed, state.split()[0]
    r = slurm("scontrol", "show", "job", job)
    m = re.search(r"JobState=(\S+).*?RunTime=(\S+)", r.stdout, re.S)
    return (m.group(2), m.group(1)) if m else ("?", "?")


SOCKETS = ("multi-node rows ran over TCP sockets, not the fast network: "
           "not to be trusted")
UNNAMED = ("multi-node rows name no network (their logs lack NCCL's INFO "
           "lines): not to be trusted")


def transport(log, backend):
    """The network the job's collectives used: (the report's words, the
    figure's table's, what is wrong with it across nodes or None). NCCL (and
    RCCL) name it once per communicator in `NCCL INFO Using network <name>`
    (IB, Socket, or a plugin's: aws-ofi's AWS Libfabric). Its NET/ lines come
    first and name what it tried, not what it chose (NET/Plugin, "NET/IB : No
    device found." before it falls back to NET/Socket). Any communicator over
    Socket counts."""
    used = sorted(
        set(re.findall(r"INFO Using network (\S.*?)\s*$", log, re.M)),
        key=lambda n: n != "Socket")
    if not used:
        # no INIT line: the last NET/<name> line that says "Using", never
        # NET/Plugin's
        used = [n for n in re.findall(r"NET/(\w+)\s*:?\s*Using\b", log)
                if n != "Plugin"][-1:]
    if used:
        return ("NCCL network " + ", ".join(used), ", ".join(used),
                SOCKETS if "Socket" in used else None)
    if backend == "gloo":
        return "gloo over TCP", "gloo over TCP", SOCKETS
    return ("NCCL (no 'Using network' line: set NCCL_DEBUG=INFO)",
            "NCCL, no network named", UNNAMED)


def utilisation(text, windows):
    """Mean GPU use (%) of the samples taken inside the timed windows. Each
    line of the batch script's file is `EPOCH_SECONDS,PERCENT` (nvidia-smi) or
    `EPOCH_SECONDS,cardN,PERCENT` (rocm-smi), one per GPU of the first node,
    once a second."""
    samples = [
        int(v) for t, v in re.findall(
            r"^(\d+(?:\.\d+)?),(?:card\d+,)?(\d+)\s*$", text, re.M)
        if any(start <= float(t) <= end for start, end in windows)]
    return (f"{statistics.mean(samples):.0f} %" if samples
            else "no sample in the timed steps")


rows = []
for j in run["jobs"]:
    path = os.path.join(args.out, f"{j['job']}.json")
    elapsed, state = wall_time(j["job"])
    if not os.path.exists(path):
        raise SystemExit(f"error: job {j['job']} "
                         f"({j['nodes']}x{j['gpus_per_node']}) wrote no "
                         f"result ({state}): read "
                         f"{args.out}/job-{j['job']}.out")
    with open(path) as f:
        row = {**json.load(f), **j, "elapsed": elapsed, "state": state}
    log = open(os.path.join(args.out, f"job-{j['job']}.out"),
               errors="replace").read()
    row["transport"], row["network"], problem = transport(log, row["backend"])
    # across nodes, only a named network that is not TCP: NVLink and shared
    # memory need none within a node
    row["problem"] = None if row["nodes"] == 1 else problem
    row["trusted"] = row["problem"] is None
    util = os.path.join(args.out, f"util-{j['job']}.txt")
    row["utilisation"] = (
        utilisation(open(util).read(),
                    [row[m]["window"] for m in ("strong", "weak")])
        if os.path.exists(util) else "no GPU")
    rows.append(row)

# One baseline for the table, the figure and the verdict: the run with the
# fewest GPUs (then the fewest nodes). Efficiency is CSC's p_b T_b / (p_N T_N)
# for the same work, i.e. the images/s per GPU at N against the baseline's,
# from the timed steps only.
base = min(rows, key=lambda r: (r["gpus"], r["nodes"]))
BASE = (f"job {base['job']}, {base['nodes']} node(s) x "
        f"{base['gpus_per_node']} GPU(s)")
for r in rows:
    for mode in ("strong", "weak"):
        r[mode]["efficiency"] = (
            (r[mode]["images_per_s"] / r["gpus"])
            / (base[mode]["images_per_s"] / base["gpus"]))

# CSC's test counts whole nodes: the rows with the most GPUs per node, each
# against the baseline.
full = max(r["gpus_per_node"] for r in rows)
by_nodes = sorted((r for r in rows if r["gpus_per_node"] == full),
                  key=lambda r: r["nodes"])
reasons = []
if len({r["nodes"] for r in by_nodes}) < CSC_NODE_COUNTS:
    reasons.append(f"{len({r['nodes'] for r in by_nodes})} node count(s) "
                   f"({', '.join(str(r['nodes']) for r in by_nodes)}), "
                   f"CSC asks for at least {CSC_NODE_COUNTS}")
reasons += [problem for problem in (SOCKETS, UNNAMED)
            if any(r["problem"] == problem for r in rows)]
for mode in ("strong", "weak"):
    low = [r for r in by_nodes if r[mode]["efficiency"] < CSC_EFFICIENCY]
    if low:
        reasons.append(f"{mode} scaling below {CSC_EFFICIENCY:.0%} of the "
                       f"baseline's images/s per GPU at "
                       + ", ".join(f"{r['nodes']} node(s) "
                                   f"({r[mode]['efficiency']:.0%})"
                                   for r in low))
verdict = "PASS" if not reasons else "FAIL: " + "; ".join(reasons)

import matplotlib  # noqa: E402 (only the report needs it)
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams["font.size"] = 12
# 1000 px: 12 pt >= 11 px on the page
fig = plt.figure(figsize=(10, 4.8 + 0.35 * len(rows)))
grid = fig.add_gridspec(2, 2, height_ratios=[3.2, 0.9 + 0.35 * len(rows)])
a, b, t = (fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1]),
           fig.add_subplot(grid[1, :]))
gpus = sorted({r["gpus"] for r in rows})
for mode, marker in (("strong", "o"), ("weak", "s")):
    pts = sorted((r["gpus"], r[mode]["images_per_s"], r[mode]["efficiency"])
                 for r in rows)
    a.plot([g for g, _, _ in pts], [v for _, v, _ in pts], marker + "-",
           label=mode)
    b.plot([g for g, _, _ in pts], [100 * e for _, _, e in pts], marker + "-",
           label=mode)
a.plot(gpus, [base["weak"]["images_per_s"] / base["gpus"] * g for g in gpus],
       "k--", label="ideal")
a.set(xlabel="GPUs (processes)", ylabel="images / s", title="throughput",
      xticks=gpus, ylim=(0, None))
b.axhline(100 * CSC_EFFICIENCY, color="#c0504d", ls="--", label="CSC's 75 %")
b.set(xlabel="GPUs (processes)", ylabel="images/s per GPU, % of baseline",
      xticks=gpus, ylim=(0, 110),
      title=f"efficiency against {base['nodes']}x{base['gpus_per_node']}")
for ax in (a, b):
    ax.legend()
t.axis("off")
cells = [[r["nodes"], r["gpus"], f"{r['strong']['seconds']:.1f}",
          f"{r['strong']['efficiency']:.0%}",
          f"{r['weak']['seconds']:.1f}", f"{r['weak']['efficiency']:.0%}",
          r["utilisation"].replace("no sample in the timed steps",
                                   "no sample"),
          r["network"] + ("" if r["trusted"] else " (untrusted)")]
         for r in sorted(rows, key=lambda r: (r["gpus"], r["nodes"]))]
table = t.table(cells, colLabels=["nodes", "GPUs", "strong s", "strong eff.",
                                  "weak s", "weak eff.", "GPU use",
                                  "transport"],
                loc="upper center", cellLoc="center",
                colWidths=[0.07, 0.06, 0.1, 0.11, 0.09, 0.1, 0.14, 0.33])
table.auto_set_font_size(False)
table.set_fontsize(12)
table.scale(1, 1.6)
t.set_title(f"timed steps only; efficiency against {BASE}; "
            f"verdict: {'PASS' if not reasons else 'FAIL'}")
cpu = (" (CPU: these numbers say nothing about GPUs)"
       if rows[0]["device"] == "cpu" else "")
fig.suptitle(f"{len(rows)} jobs of {run['sbatch']}, "
             f"backend {rows[0]['backend']}{cpu}", fontsize=12)
fig.tight_layout()
# code/chart_file.py: a chart whose every text is >= 11 px on the page
import chart_file  # noqa: E402
chart_file.save(fig, os.path.join(args.out, "scaling.png"))
plt.close(fig)

lines = ["# Scalability report", "",
         f"Benchmark: code/14_scaling.py (DDP, ConvNet, "
         f"{rows[0]['image_size']}x{rows[0]['image_size']} random images on "
         f"the device; strong: a global batch of "
         f"{base['strong']['global_batch']} split over the GPUs, weak: "
         f"{base['weak']['global_batch'] // base['gpus']} per GPU), "
         f"options: {' '.join(run['bench']) or '(defaults)'}",
         f"Versions: torch {base['torch']}, CUDA {base['cuda']}, "
         f"HIP {base['hip']}, NCCL {base['nccl']}, Python {base['python']}",
         "",
         "Timed: steps, seconds, step time, images/s and GPU utilisation are "
         "those of the timed steps (after start-up and 5 warm-up steps); job "
         "elapsed is the whole job, start-up included.", "",
         f"Baseline: {BASE}. Efficiency = images/s per GPU against the "
         f"baseline's, in the table and in the verdict.", "",
         "| job | nodes | GPUs | job elapsed | state | strong: steps "
         "| timed s | step ms | images/s | efficiency "
         "| weak: steps | timed s | step ms | images/s | efficiency "
         "| GPU utilisation (timed) | transport |",
         "|---|---|---|---|---|---|"
         "---|---|---|---|---|---|---|---|---|---|---|"]
for r in sorted(rows, key=lambda r: (r["gpus"], r["nodes"])):
    s, w = r["strong"], r["weak"]
    lines.append(f"| {r['job']} | {r['nodes']} | {r['gpus']} "
                 f"| {r['elapsed']} | {r['state']} "
                 f"| {s['steps']} | {s['seconds']:.2f} "
                 f"| {1e3 * s['step_s']:.2f} | {s['images_per_s']:.0f} "
                 f"| {s['efficiency']:.0%} | {w['steps']} "
                 f"| {w['seconds']:.2f} | {1e3 * w['step_s']:.2f} "
                 f"| {w['images_per_s']:.0f} | {w['efficiency']:.0%} "
                 f"| {r['utilisation']} | {r['transport']}"
                 f"{'' if r['trusted'] else ' (not to be trusted)'} |")
lines += ["", f"Verdict (CSC's gpularge test): {verdict}", "",
          "Figure: scaling.png", "",
          f"Batch script ({run['sbatch']}; each job's --nodes, GPUs, cores "
          f"and memory set by code/14_sweep.py):",
          "", "```bash", script.rstrip(), "```"]
with open(os.path.join(args.out, "report.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
print(f"report: {args.out}/report.md, figure: {args.out}/scaling.png "
      f"({len(rows)} jobs: {', '.join(str(r['gpus']) for r in rows)} GPUs on "
      f"{', '.join(str(r['nodes']) for r in rows)} node(s))")
print(f"verdict: {'PASS' if not reasons else 'FAIL: ' + reasons[0]}")
sys.exit(0)
