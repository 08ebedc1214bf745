"""What a process start costs, and how many the tests make: where the suite's time goes.

    .venv/bin/python benchmarks/process_starts.py measure
    # as root: a full run under Linux's process accounting (acct(2)), every process counted
    .venv/bin/python benchmarks/process_starts.py account "where" -- \
        .venv/bin/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder

`measure` times, on the pinned CPU path the tests use, the CPU seconds of `import torch` in a
fresh process, of step 1's training alone, and of a 2-process torchrun of step 1 for 1 and 5
epochs. `account` runs the command with process accounting on: the kernel writes one record for
every process that ends, however it ends (a rank that torchrun or srun kills, a loader worker),
with its CPU seconds. Beside it, /proc is read every 0.2 s for each new process's command, the
test that started it (PYTEST_CURRENT_TEST, which a job's processes inherit through sbatch) and
whether it imported torch (libtorch in its memory map, and not running its parent's command,
as a forked loader worker does). Both write into
benchmarks/process-starts.json; the .md is made from it.
"""
import ctypes
import json
import os
import re
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
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
            # the same with the garbage collector off while torch imports, then its objects frozen (never scanned)
            cpu_of(f"{py} -c 'import gc; gc.disable(); import torch; gc.freeze(); gc.enable()'"),
            # the first optimizer: add_param_group's wrapper imports torch._dynamo on its first call
            cpu_of(f"{py} -c 'import torch; torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)'"),
            cpu_of(f"{py} code/01_single.py"),
            cpu_of("torchrun --standalone --nproc_per_node=2 code/01_ddp.py --epochs 1"),
            cpu_of("torchrun --standalone --nproc_per_node=2 code/01_ddp.py")]
    return {"measured": time.strftime("%Y-%m-%d"), "cpu": jobs.platform.processor() or jobs.platform.machine(),
            "cores": os.cpu_count(), "torch_import": rows[1]["cpu_s"], "rows": rows}


OUTSIDE = "(no test seen: set-up, workers, short commands)"


def _watch(seen, stop):
    """Every 0.2 s: each new process's command and test, keyed by (pid, start in epoch seconds),
    read again over its first 2 s (a fork runs its parent's command until it execs); a Python
    process is looked at again, at most once a second, until libtorch is in its map. A process
    that runs its parent's command and has torch is a fork of it (a loader worker): not an import."""
    tick, boot = os.sysconf("SC_CLK_TCK"), next(float(l.split()[1]) for l in open("/proc/stat") if l.startswith("btime"))
    pending, latest = {}, {}
    while not stop.is_set():
        now = time.time()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                key = (int(pid), boot + int(fields[19]) / tick)
                known = seen.get(key)
                if known is None or now - known["first"] < 2:
                    cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")[:200]
                    if known is None or cmd != known["cmd"]:  # new, or it exec'd another program
                        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                        test = next((e[20:].decode().split("::")[0] for e in env if e.startswith(b"PYTEST_CURRENT_TEST=")), "")
                        seen[key] = {"cmd": cmd, "test": test, "torch": False, "parent": int(fields[1]),
                                     "first": known["first"] if known else now}
                        latest[int(pid)] = key
                        if "python" in cmd or "torchrun" in cmd:
                            pending[key] = 0.0
                if key in pending and now - pending[key] >= 1:
                    pending[key] = now
                    if "libtorch" in open(f"/proc/{pid}/maps").read():
                        parent = seen.get(latest.get(seen[key]["parent"]), {})
                        seen[key]["torch"] = parent.get("cmd") != seen[key]["cmd"]
                        del pending[key]
            except (OSError, IndexError, ValueError):
                continue  # ended meanwhile
        stop.wait(0.2)


def _records(path):
    """acct(5) version 3 records: (pid, start in epoch seconds, CPU seconds)."""
    comp = lambda c: (c & 0x1FFF) << (3 * (c >> 13))  # noqa: E731 (comp_t: 13-bit mantissa, base-8 exponent)
    data = Path(path).read_bytes()
    for i in range(0, len(data) - 63, 64):
        version, pid, btime, utime, stime = struct.unpack_from("<xBxx12xI4xI4xHH", data, i)
        assert version == 3, f"acct record version {version}, not 3"
        yield pid, btime, (comp(utime) + comp(stime)) / 100


def account(where, cmd):
    """Runs cmd with process accounting on; every process that ended meanwhile, per test file."""
    if os.geteuid() != 0:
        sys.exit("error: process accounting (acct(2)) needs root")
    libc = ctypes.CDLL(None, use_errno=True)
    log = Path(tempfile.mkdtemp()) / "pacct"
    log.touch()
    seen, stop = {}, threading.Event()
    if libc.acct(str(log).encode()) != 0:
        sys.exit(f"error: acct(2): {os.strerror(ctypes.get_errno())}")
    watcher = threading.Thread(target=_watch, args=(seen, stop))  # started once it can be stopped
    watcher.start()
    t0, own0 = time.time(), resource.getrusage(resource.RUSAGE_SELF)
    try:
        rc = subprocess.run(cmd).returncode
    finally:
        libc.acct(None)
        stop.set()
        watcher.join()
    own1 = resource.getrusage(resource.RUSAGE_SELF)
    by_pid = defaultdict(list)
    for (pid, start), info in seen.items():
        by_pid[pid].append((start, info))
    per_file, starts, torch_starts, torch_cpu = defaultdict(float), Counter(), Counter(), 0.0
    records = list(_records(log))
    shutil.rmtree(log.parent)
    for pid, btime, cpu in records:
        near = [(abs(start - btime), info) for start, info in by_pid.get(pid, ()) if abs(start - btime) < 2]
        info = min(near, key=lambda x: x[0])[1] if near else {"test": "", "torch": False}  # ended before a look
        name = info["test"] or OUTSIDE
        per_file[name] += cpu
        starts[name] += 1
        torch_starts[name] += info["torch"]
        torch_cpu += cpu if info["torch"] else 0
    return {"where": where, "exit_code": rc, "wall_s": round(time.time() - t0), "processes": sum(starts.values()),
            "with_torch": sum(torch_starts.values()), "cpu_s": round(sum(per_file.values())),
            "torch_processes_cpu_s": round(torch_cpu),
            # the /proc watcher's own CPU (this process: not in its accounting records)
            "watcher_cpu_s": round(own1.ru_utime + own1.ru_stime - own0.ru_utime - own0.ru_stime),
            "files": {k: {"processes": starts[k], "with_torch": torch_starts[k], "cpu_s": round(v)}
                      for k, v in sorted(per_file.items(), key=lambda kv: -kv[1])}}


def markdown(data):
    m = data.get("measure")
    md = []
    if m:
        imp, gc_off, opt = m["torch_import"], m["rows"][3]["cpu_s"], m["rows"][4]["cpu_s"]
        md += [f"Measured {m['measured']} on {m['cores']} cores, the tests' pinned CPU path, median of 3:", "",
               "| command | CPU s | wall s |", "|---|---:|---:|"]
        md += [f"| `{re.sub(r'[^ ]*/bin/python3?', 'python', r['command'])}` | {r['cpu_s']:.2f} | {r['wall_s']:.2f} |"
               for r in m["rows"]]
        ddp5 = m["rows"][-1]["cpu_s"]
        start = 3 * imp + 2 * (opt - imp)  # 3 imports; the 2 workers build an optimizer
        md += ["", f"Of an import's {imp:.2f}, {imp - gc_off:.2f} is Python's garbage collector scanning torch's "
               f"objects, during the import and at exit (the fourth row). The first optimizer costs another "
               f"{opt - imp:.2f} (the fifth row): `Optimizer.add_param_group` is wrapped in "
               f"`torch._disable_dynamo`, whose first call imports `torch._dynamo` (with sympy and triton), "
               f"so every rank of every step pays it, here as on a cluster. A 2-process torchrun starts 3 "
               f"Python processes that import torch (the agent and 2 workers), and the 2 workers build an "
               f"optimizer: measured one by one, those come to {start:.1f} CPU seconds; step 1's whole run takes "
               f"{ddp5:.1f} (the last row)."]
    c = data.get("account")
    if c:
        imports = c["with_torch"] * m["torch_import"] if m else None
        md += ["", f"One full `make test` ({c['where']}), every process counted by Linux's process accounting: "
               f"{c['processes']:,} processes, {c['with_torch']} of which imported torch. Those used "
               f"{c['torch_processes_cpu_s']:,} of the run's {c['cpu_s']:,} CPU seconds "
               f"({c['torch_processes_cpu_s'] / c['cpu_s']:.0%})"
               + (f"; importing torch and tearing it down alone comes to about {imports:,.0f} "
                  f"({c['with_torch']} x {m['torch_import']:.2f}, the second row above)" if m else "")
               + ". The test files that use most:"
               + (f" (the count's own watcher, reading /proc every 0.2 s, used {c['watcher_cpu_s']:,} CPU seconds "
                  "more)" if "watcher_cpu_s" in c else ""), "",
               "| test file | processes | imported torch | CPU s |", "|---|---:|---:|---:|"]
        md += [f"| `{k}` | {v['processes']} | {v['with_torch']} | {v['cpu_s']} |"
               for k, v in list(c["files"].items())[:15]]
        if m:
            saved, budget = c["with_torch"] * (imp - gc_off), 25 * 60 * m["cores"]
            md += ["", f"The budget, 25 minutes on {m['cores']} cores, is {budget:,} core-seconds; these imports of "
                   f"torch alone take {imports / budget:.0%} of it, before any optimizer. "
                   f"The garbage collector's share of the imports, about {saved:,.0f} CPU seconds here, is not "
                   "saved: that needs a hook in every Python the tests start (a `.pth` file in the venv), and a "
                   "reader's Python has none."]
    return "\n".join(md) + "\n"


if __name__ == "__main__":
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    if sys.argv[1] == "measure":
        data["measure"] = measure()
    elif sys.argv[1] == "account" and sys.argv[3] == "--":
        data.pop("count", None)  # the earlier at-exit log's count, which missed every killed process
        data["account"] = account(sys.argv[2], sys.argv[4:])
    else:
        sys.exit(__doc__)
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    OUT.with_suffix(".md").write_text(markdown(data))
    print(markdown(data))
