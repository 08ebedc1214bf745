"""What a process start costs, and how many the tests make (issue 35: where the suite's time goes).

    .venv/bin/python benchmarks/process_starts.py measure
    # a full run with every Python process logging itself at exit (benchmarks/process_starts_hook):
    mkdir -m 1777 /work/pystarts
    PYTHONPATH=$PWD/benchmarks/process_starts_hook .venv/bin/python -m pytest -n 2 --dist loadfile ...
    .venv/bin/python benchmarks/process_starts.py count /work/pystarts "where"

`measure` times, on the pinned CPU path the tests use, the CPU seconds of `import torch` in a
fresh process, of step 1's training alone, and of a 2-process torchrun of step 1 for 1 and 5
epochs. `count` sums the log: Python processes, those that imported torch, their CPU seconds,
per test file. Both write into benchmarks/process-starts.json; the .md is made from it.
"""
import json
import os
import resource
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import jobs  # noqa: E402
OUT = ROOT / "benchmarks" / "process-starts.json"


def cpu_of(cmd, repeat=3):
    """Median CPU seconds (user + system, all child processes) and wall seconds of a command."""
    runs = []
    env = jobs._env(local=True)
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, shell=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        runs.append((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, time.perf_counter() - t0))
    runs.sort()
    return {"command": cmd, "cpu_s": round(runs[len(runs) // 2][0], 2), "wall_s": round(runs[len(runs) // 2][1], 2)}


def measure():
    py = sys.executable
    rows = [cpu_of(f"{py} -c pass"), cpu_of(f"{py} -c 'import torch'"),
            cpu_of(f"{py} -c 'import torch, os; os._exit(0)'"),  # the same, without the interpreter's tear-down
            cpu_of(f"{py} code/01_single.py"),
            cpu_of("torchrun --standalone --nproc_per_node=2 code/01_ddp.py --epochs 1"),
            cpu_of("torchrun --standalone --nproc_per_node=2 code/01_ddp.py")]
    return {"measured": time.strftime("%Y-%m-%d"), "cpu": jobs.platform.processor() or jobs.platform.machine(),
            "cores": os.cpu_count(), "torch_import": rows[1]["cpu_s"], "rows": rows}


def count(folder, where):
    procs = [l.rstrip("\n").split("\t") for f in Path(folder).glob("*.tsv") for l in f.read_text().splitlines()]
    per_file, starts, torch_starts = defaultdict(float), Counter(), Counter()
    for pid, t0, alive, cpu, torch, test, cmd in procs:
        name = test or "(outside a test: the run's set-up, workers)"
        per_file[name] += float(cpu)
        starts[name] += 1
        torch_starts[name] += torch == "torch"
    return {"where": where, "processes": len(procs), "with_torch": sum(torch_starts.values()),
            "cpu_s": round(sum(per_file.values())),
            "files": {k: {"processes": starts[k], "with_torch": torch_starts[k], "cpu_s": round(v)}
                      for k, v in sorted(per_file.items(), key=lambda kv: -kv[1])}}


def markdown(data):
    m = data.get("measure")
    md = []
    if m:
        imp = m["torch_import"]
        md += [f"Measured {m['measured']} on {m['cores']} cores, the tests' pinned CPU path, median of 3:", "",
               "| command | CPU s | wall s |", "|---|---:|---:|"]
        md += [f"| `{r['command'].replace(sys.executable, 'python')}` | {r['cpu_s']:.2f} | {r['wall_s']:.2f} |"
               for r in m["rows"]]
        ddp5 = m["rows"][-1]["cpu_s"]
        md += ["", f"A 2-process torchrun starts 3 Python processes that import torch (the agent and 2 workers): "
               f"{3 * imp:.1f} of step 1's {ddp5:.1f} CPU seconds ({3 * imp / ddp5:.0%}) are process starts."]
    c = data.get("count")
    if c:
        md += ["", f"One full `make test` ({c['where']}): {c['processes']} Python processes, {c['with_torch']} of "
               f"them imported torch; {c['cpu_s'] / 60:.1f} CPU minutes in Python processes"
               + (f", of which about {c['with_torch'] * m['torch_import'] / 60:.1f} importing torch" if m else "")
               + ". The test files that start most:", "",
               "| test file | processes | with torch | CPU s |", "|---|---:|---:|---:|"]
        md += [f"| `{k}` | {v['processes']} | {v['with_torch']} | {v['cpu_s']} |"
               for k, v in list(c["files"].items())[:15]]
    return "\n".join(md) + "\n"


if __name__ == "__main__":
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    if sys.argv[1] == "measure":
        data["measure"] = measure()
    elif sys.argv[1] == "count":
        data["count"] = count(sys.argv[2], sys.argv[3])
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    OUT.with_suffix(".md").write_text(markdown(data))
    print(markdown(data))
