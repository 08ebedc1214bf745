"""How much the printed numbers depend on the CPU's numeric path.

Runs a few of the tutorial's real commands under several CPU paths and records what they
print: the pinned path that the notebooks use (tools/jobs.py), this machine's own unpinned path,
and the paths of other machines, reproduced here by capping the instruction sets the libraries
may use (an AVX2-only CPU such as an older AMD EPYC; no vectorisation at all) or by another
thread count. Writes benchmarks/cpu-paths.json and the table benchmarks/cpu-paths.md that the
practice-cluster page includes.

    .venv/bin/python benchmarks/cpu_paths.py        # about 2 minutes on 2 cores
"""
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from jobs import PINNED_CPU_PATH  # noqa: E402

UNSET = {k: None for k in PINNED_CPU_PATH}
PATHS = {  # name: the variables of that path (None: unset, the library's own choice)
    "pinned (the notebooks' path)": PINNED_CPU_PATH,
    "this CPU's own path, 1 thread": {**UNSET, "OMP_NUM_THREADS": "1"},
    "an AVX2-only CPU, 1 thread": {**UNSET, "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                                   "MKL_ENABLE_INSTRUCTIONS": "AVX2", "OMP_NUM_THREADS": "1"},
    "no vectorisation, 1 thread": {**UNSET, "ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
                                   "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "OMP_NUM_THREADS": "1"},
    "pinned, but 2 threads": {**PINNED_CPU_PATH, "OMP_NUM_THREADS": "2"},
}
RUNS = {  # what the pages show, and the command that prints it
    "step 1, one process": "python code/01_single.py",
    "step 1, DDP on 2 processes": "torchrun --standalone --nproc_per_node=2 code/01_ddp.py",
    "step 9, 2 processes": "torchrun --standalone --nproc_per_node=2 code/09_reliability.py --checkpoint runs/cpu-paths.pt",
    "step 2, long run": "torchrun --standalone --nproc_per_node=2 code/02_equivalence.py --cases long-run",
    "step 3, 405 steps": "torchrun --standalone --nproc_per_node=2 code/03_lr_scaling.py --optimizer sgd --batch-size 32 "
                         "--base-batch 32 --lr 0.01 --scale none --warmup-steps 5 --accum 2 --epochs 9 --seed 0",
}


def run(cmd, variables):
    env = {k: v for k, v in os.environ.items() if k not in variables}
    env.update({k: v for k, v in variables.items() if v is not None})
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    (ROOT / "runs" / "cpu-paths.pt").unlink(missing_ok=True)
    out = subprocess.run(cmd, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    if out.returncode:
        raise SystemExit(f"error: {cmd} failed ({out.returncode}):\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    text = out.stdout
    return {"losses": [float(x) for x in re.findall(r"loss (\d+\.\d+)", text)],
            "accuracy": [float(x) for x in re.findall(r"accuracy (\d\.\d+)", text)],
            "sha256": re.findall(r"weights sha256 ([0-9a-f]+)", text),
            "dparam": [float(x) for x in re.findall(r"^long-run +(\S+)", text, re.M)]}


def main():
    (ROOT / "runs").mkdir(exist_ok=True)
    results = {name: {what: run(cmd, variables) for what, cmd in RUNS.items()} for name, variables in PATHS.items()}
    pinned = results[next(iter(PATHS))]
    rows = []
    for name, by_run in results.items():
        cells = []
        for what in RUNS:
            r, p = by_run[what], pinned[what]
            if r["sha256"]:
                cells.append("same weights" if r["sha256"] == p["sha256"] else "other weights")
            elif r["dparam"]:
                cells.append(f"{r['dparam'][0]:.0e}")
            else:
                d = max([abs(a - b) for a, b in zip(r["losses"] + r["accuracy"], p["losses"] + p["accuracy"])] or [0])
                cells.append("every digit" if d == 0 else f"differs by {d:.4f}")
        rows.append((name, cells))
    info = {"cpu": cpu_name(), "capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "machine": platform.machine(), "paths": {k: {n: v for n, v in p.items() if v is not None}
                                                     for k, p in PATHS.items()},
            "commands": RUNS, "results": results}
    (ROOT / "benchmarks" / "cpu-paths.json").write_text(json.dumps(info, indent=1) + "\n")
    head = ["CPU path"] + list(RUNS)
    md = [f"Measured on {info['cpu']} ({info['capability']}), torch {info['torch']}, "
          "by benchmarks/cpu_paths.py. Each cell compares with the pinned path: the printed losses and "
          "accuracy (steps 1 and 3), the weights' SHA-256 (step 9), max |Δparam| between DDP and one "
          "process after 135 steps (step 2).", "",
          "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    md += ["| " + " | ".join([name, *cells]) + " |" for name, cells in rows]
    (ROOT / "benchmarks" / "cpu-paths.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


def cpu_name():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()
