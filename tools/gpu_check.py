"""One command for the day a GPU machine is lent: every step's script on nccl + CUDA,
step 10's whole ladder, one results file and a one-screen summary.

    make gpu-check                         # = python3 tools/gpu_check.py: everything, on the GPUs
    python3 tools/gpu_check.py --list      # the entries and their commands (and results so far)
    python3 tools/gpu_check.py --only 12_fsdp2_bf16_compile_dcp@1,10_benchmark
    python3 tools/gpu_check.py --missing   # only what has not passed yet (the next 10-minute piece)
    python3 tools/gpu_check.py --cpu-smoke --out-dir /tmp/x   # CPU: gloo, tiny sizes (tests/test_gpu_check.py)
    python3 tools/gpu_check.py --out-dir DIR   # a machine you only borrow: the file is rewritten after
                                               # every entry, so a call cut short keeps what ran
    python3 tools/gpu_check.py --import A.json B.json --note "how"   # pieces of one machine, merged
                                               # into benchmarks/ and judged again by these rules

Each entry runs the scripts as a reader would (torchrun = python -m torch.distributed.run), with
world size 1 and with as many processes as the machine has GPUs, and passes when they exit as
expected, say `backend nccl, device cuda` where they print their backend, and every property the
pages claim holds (Entry.same: a PASS never stands beside a False). The results go to
benchmarks/gpu-<device>.json: the device, driver, torch, and per entry its commands, exit codes,
figures, the end of its output and pass/fail/skip with the reason. Entries run again replace their
old result, so a check can be done in pieces of under 10 minutes (--budget stops starting entries).
The file's "results" are step 10's rows in code/10_benchmark.py's own format, so the step-10
notebook builds its table and plot from it. Standard library only: it runs with the GPU
machine's own Python and torch (no project venv); DeepSpeed, Lightning and Accelerate entries say
'not installed' where the packages are missing.
"""
import argparse
import concurrent.futures
import datetime
import fnmatch
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = "python -m torch.distributed.run --standalone --nproc_per_node={n}"


class Entry:
    """One path to check: commands (a list of (command, expected exit: 0 or 'nonzero', must match)),
    for every world size in `worlds` ('each': 1 and the GPU count; 'multi': only >= 2; 'two':
    exactly 2, for a script that runs 2 processes only; 'one': a plain python process). `smoke`
    replaces arguments on CPU: {gpu argument string: cpu string}.
    `same`: (label, i, j, claimed) pairs of commands whose `weights sha256` lines are compared:
    claimed "always" (the pages say so everywhere: a difference fails the entry, figure True/False),
    "two" (the pages say so for at most two processes: beyond, an observation) or "cpu" (the pages
    say so for CPU only: fails the smoke run; on a GPU an observation, figure "equal"/"differ", so
    that no entry shows PASS beside False). `judge(tmp, n, smoke)`: after the commands passed, the
    claims read from the files they left in tmp: (figures, the reason to fail or None)."""

    def __init__(self, name, step, commands, worlds="each", needs=(), gpu_only=None, smoke=None,
                 says_backend=True, estimate=20, env=None, setup=None, smoke_env=None, timeout=150, same=(),
                 judge=None):
        self.name, self.step, self.commands, self.worlds = name, step, commands, worlds
        self.needs, self.gpu_only, self.smoke = needs, gpu_only, smoke or {}
        self.says_backend, self.estimate, self.env, self.setup = says_backend, estimate, env or {}, setup
        self.smoke_env, self.timeout = smoke_env or {}, timeout  # timeout: seconds per command on a GPU
        self.same, self.judge = same, judge


def ds_bf16_config(tmp):
    """DeepSpeed's bf16 on GPUs: the step's own ds_config with "bf16": {"enabled": true}."""
    cfg = json.loads((ROOT / "code/06_ds_config.json").read_text())
    cfg["bf16"] = {"enabled": True}
    (Path(tmp) / "ds_bf16.json").write_text(json.dumps(cfg))


def step14_structure(tmp, n, smoke):
    """Step 14's claims on the traces (the page's and notebook 14's checks, code/14_timeline.py's
    reader): the same ranges in every traced step (no-sync: data, forward, backward 4 times, the
    optimizer once), 0 <= exposed <= communication <= step, and all-reduces per step: 1 with the
    default buckets and with no_sync(), more with small buckets. The page claims the counts for 2
    or more processes; with one (one NCCL rank may sum in place without a kernel) they are shown."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("timeline", ROOT / "code/14_timeline.py")
    tl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tl)
    figures, problems = {}, []
    for v, calls_claim, ranges_claim in [("default", "1", (1, 1, 1, 1)), ("small-buckets", ">1", (1, 1, 1, 1)),
                                         ("no-sync", "1", (4, 4, 4, 1))]:
        rows = [r for events in tl.load(Path(tmp) / "trace" / v).values() for r in tl.steps(events)]
        calls = sorted({r["all_reduces"] for r in rows})
        ranges = sorted({tuple(r["ranges"][k] for k in tl.RANGES) for r in rows})
        ordered = all(0 <= r["exposed_ms"] <= r["comm_ms"] <= r["step_ms"] + 1e-9 for r in rows)
        figures[f"{v}: all-reduces per step"] = str(calls)
        figures[f"{v}: ranges per step (data, forward, backward, optimizer)"] = str(ranges)
        figures[f"{v}: 0 <= exposed <= communication <= step"] = str(ordered)
        if not rows:
            problems.append(f"{v}: no traced step")
        if ranges != [ranges_claim] or not ordered:
            problems.append(f"{v}: ranges {ranges}, expected {list(ranges_claim)}; ordered {ordered}")
        counted = calls == [1] if calls_claim == "1" else bool(calls) and calls[0] > 1
        if (n or 1) >= 2 and not counted:
            problems.append(f"{v}: all-reduces per step {calls}, the page says {calls_claim}")
    return figures, "; ".join(problems) or None


T = TORCHRUN
ENTRIES = [
    Entry("01_single", "01", [("python code/01_single.py --save {tmp}/single.pt", 0, r"device {device}, ")],
          worlds="one", says_backend=False, smoke={"--save": "--epochs 1 --save"}),
    Entry("01_ddp", "01", [(f"{T} code/01_ddp.py --save {{tmp}}/ddp.pt", 0, "test accuracy")],
          smoke={"--save": "--epochs 1 --save"}),
    Entry("02_equivalence", "02", [(f"{T} code/02_equivalence.py", 0, "result")], worlds="multi",
          smoke={"code/02_equivalence.py": "code/02_equivalence.py --cases baseline,sync-bn,accum-no-sync"}),
    Entry("02_dataparallel", "02", [("python code/02_dataparallel.py", 0, "DataParallel")], worlds="one",
          says_backend=False, gpu_only="DataParallel compares 2 or more GPUs with one"),
    Entry("03_lr_scaling", "03", [(f"{T} code/03_lr_scaling.py --optimizer sgd,adam --reference", 0, "")],
          smoke={"--reference": "--reference --epochs 1"}),
    Entry("04_sharding", "04", [(f"{T} code/04_sharding.py --num-workers 2", 0, "test accuracy")],
          smoke={"--num-workers 2": "--epochs 1"}),
    Entry("04_sharding_uneven_join", "04", [(f"{T} code/04_sharding_uneven.py --join --timeout 60", 0,
                                             "replicas equal")], says_backend=False),
    Entry("05_multinode", "05", [(f"{T} code/05_multinode.py --epochs 2", 0, "test accuracy")],
          smoke={"--epochs 2": "--epochs 1"}),
    Entry("06_deepspeed_zero2_resume", "06", [
        (f"{T} code/06_deepspeed.py --zero-stage 2 --epochs 2 --ckpt-dir {{tmp}}/ds", 0, "test accuracy"),
        (f"{T} code/06_deepspeed.py --zero-stage 2 --epochs 3 --ckpt-dir {{tmp}}/ds --resume", 0, "test accuracy")],
        needs=("deepspeed",), smoke={"--epochs 2": "--epochs 1", "--epochs 3": "--epochs 2"}, estimate=60, timeout=300),
    Entry("06_deepspeed_bf16", "06", [(f"{T} code/06_deepspeed.py --deepspeed_config {{tmp}}/ds_bf16.json "
                                        f"--epochs 2", 0, "test accuracy")],
          needs=("deepspeed",), gpu_only="DeepSpeed's bf16 needs a GPU", setup=ds_bf16_config, estimate=60,
          timeout=300),
    Entry("07_lightning", "07", [(f"{T} code/07_lightning.py --devices {{n}} --epochs 2", 0, "test accuracy")],
          needs=("lightning",), smoke={"--epochs 2": "--epochs 1"}, estimate=45),
    Entry("08_accelerate", "08", [(f"{T} code/08_accelerate.py --epochs 2", 0, "test accuracy")],
          needs=("accelerate",), smoke={"--epochs 2": "--epochs 1"}, estimate=45),
    Entry("08_accelerate_fsdp", "08", [("python -m accelerate.commands.launch --config_file "
                                        "code/08_accelerate_fsdp.yaml --num_processes {n} code/08_accelerate.py "
                                        "--epochs 2", 0, "test accuracy")],
          needs=("accelerate",), gpu_only="Accelerate's FSDP needs GPUs", estimate=45,
          worlds="multi"),  # one process: Accelerate starts no process group, so no FSDP
    Entry("09_reliability_resume", "09", [  # the default twice (is the path deterministic?), then
        (f"{T} code/09_reliability.py --epochs 3 --checkpoint {{tmp}}/full.pt", 0, "weights sha256"),
        (f"{T} code/09_reliability.py --epochs 3 --checkpoint {{tmp}}/again.pt", 0, "weights sha256"),
        # the deterministic mode: uninterrupted, signalled at step 20, resumed (the page's claim)
        (f"{T} code/09_reliability.py --epochs 3 --deterministic --checkpoint {{tmp}}/det.pt", 0, "weights sha256"),
        (f"{T} code/09_reliability.py --epochs 3 --deterministic --checkpoint {{tmp}}/resume.pt --signal-at 20",
         "nonzero", "stopped in epoch"),
        (f"{T} code/09_reliability.py --epochs 3 --deterministic --checkpoint {{tmp}}/resume.pt", 0, "resumed from")],
        smoke={"--epochs 3": "--epochs 1", "--signal-at 20": "--signal-at 5"}, estimate=100,
        # bitwise with at most two processes (the page: more add the gradients in another order)
        same=[("two uninterrupted runs (weights bitwise)", 0, 1, "cpu"),
              ("deterministic: resumed run = uninterrupted run (weights bitwise)", 2, 4, "two")]),
    Entry("10_benchmark", "10", [("python code/10_benchmark.py --out {tmp}/bench.json", 0, "wrote")],
          worlds="one", says_backend=False, smoke={"--out": "--smoke --batch-sizes 16 32 --out"}, estimate=150,
          timeout=420),
    Entry("10_benchmark_ddp", "10", [(f"{T} code/10_benchmark.py --out {{tmp}}/bench.json", 0, "wrote")],
          says_backend=False, smoke={"--out": "--smoke --batch-sizes 32 --out"}, estimate=40, timeout=240),
    Entry("11_debugging", "11", [(f"{T} code/11_debugging.py --epochs 2", 0, "test accuracy")],
          smoke={"--epochs 2": "--epochs 1"}),
    Entry("11_debugging_bug", "11", [(f"{T} code/11_debugging.py --epochs 1 --bug --timeout 10", "nonzero",
                                      r"(?i)time[d ]*out|watchdog")], worlds="multi", estimate=60,
          smoke={"--timeout 10": "--timeout 3"}),
    Entry("11_mismatch", "11", [(f"{T} code/11_mismatch.py", 0, "mean loss")], says_backend=False,
          env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}),
    Entry("11_talk", "11", [(f"{T} code/11_talk.py", 0, "")],
          smoke={"code/11_talk.py": "code/11_talk.py --sizes 8K,64K --iters 2"}),
    Entry("12_fsdp2", "12", [(f"{T} code/12_fsdp2.py --epochs 2", 0, "test accuracy")],
          smoke={"--epochs 2": "--epochs 1"}),
    Entry("12_fsdp2_bf16_compile_dcp", "12", [
        (f"{T} code/12_fsdp2.py --mp bf16 --compile --epochs 2 --save {{tmp}}/ckpt", 0, "compiled"),
        (f"{T} code/12_fsdp2.py --mp bf16 --compile --epochs 3 --resume {{tmp}}/ckpt/epoch-2", 0, "resumed epoch-"),
        ("python code/12_fsdp2_convert.py {tmp}/ckpt/epoch-2 {tmp}/converted.pt", 0, "test accuracy")],
        smoke={"--epochs 2": "--epochs 1", "--epochs 3": "--epochs 2", "epoch-2": "epoch-1"}, estimate=90, timeout=300,
        # CPU: torch.compile builds C++ kernels for a minute, and the GPU path (Triton) is another one:
        # the smoke run checks these commands with compile switched off (notebook 12 compiles on CPU)
        smoke_env={"TORCH_COMPILE_DISABLE": "1"}),
    Entry("12_fsdp2_ddp_bf16", "12", [(f"{T} code/12_fsdp2.py --mode ddp --mp bf16 --epochs 2", 0, "test accuracy")],
          smoke={"--epochs 2": "--epochs 1"}),
    Entry("12_fsdp2_rules", "12", [(f"{T} code/12_fsdp2_rules.py", 0, "reshard_after_forward")],
          says_backend=False),
    Entry("13_data", "13", [(f"{T} code/13_data.py --prepare rank0 --data-dir {{tmp}}/data", 0, "test accuracy")],
          smoke={"--data-dir": "--epochs 1 --data-dir"}),
    Entry("13_data_sync_bn", "13", [(f"{T} code/13_data.py --prepare rank0 --data-dir {{tmp}}/data --sync-bn "
                                      f"--drop-last", 0, "statistics over all ranks")],
          worlds="multi", gpu_only="nn.SyncBatchNorm refuses CPU tensors"),
    # Step 14: the three variants' traces (on GPUs with the CUDA activity: NCCL's kernels on their
    # own stream), the per-step table from them, and one point of the scaling benchmark.
    Entry("14_profiling", "14", [
        (f"{T} code/14_profiling.py --trace-dir {{tmp}}/trace", 0, "no-sync: bucket_cap_mb"),
        *[(f"python code/14_timeline.py {{tmp}}/trace/{v}", 0, "exposed") for v in ("default", "small-buckets", "no-sync")]],
        estimate=40, judge=step14_structure),
    Entry("14_scaling", "14", [(f"{T} code/14_scaling.py --out {{tmp}}/scaling.json", 0, r"strong \(global batch")],
          smoke={"--out": "--batch 48 --steps 5 --out"}, estimate=80),
    # the envelope's FLOPs, compute time and FLOP/s (the talk test measures the bandwidth: 11_talk)
    Entry("14_envelope", "14", [(f"{T} code/14_envelope.py", 0, "GFLOP/s")]),
    # Step 15: one GPU and more with FSDP2 only (tp 1), saved and resumed; then the 2-D mesh
    # (tp 2) with its collectives counted, resharded to tp 1, and the data-split mistake.
    Entry("15_two_dimensions", "15", [
        (f"{T} code/15_two_dimensions.py --tp 1 --save {{tmp}}/ckpt", 0, r"largest \|loss difference\|"),
        (f"{T} code/15_two_dimensions.py --tp 1 --resume {{tmp}}/ckpt/step-4", 0, "resumed step-4")], estimate=40),
    Entry("15_two_dimensions_tp", "15", [
        (f"{T} code/15_two_dimensions.py --tp 2 --comm --save {{tmp}}/ckpt", 0, "collectives of one training step"),
        (f"{T} code/15_two_dimensions.py --tp 1 --resume {{tmp}}/ckpt/step-4", 0, r"saved on mesh \(dp \d+, tp 2\)"),
        (f"{T} code/15_two_dimensions.py --tp 2 --data-over world", 0, r"largest \|loss difference\|")],
        worlds="multi", estimate=60),
    Entry("15_pipeline", "15", [(f"{T} code/15_pipeline.py", 0, r"largest \|loss difference\|")], worlds="two",
          smoke={"code/15_pipeline.py": "code/15_pipeline.py --width 64 --microbatches 4"}, estimate=40),
    # Step 16: the bytes each rank holds, measured against code/memory_formula.py; on a GPU each
    # layout's torch.cuda.max_memory_allocated between the formula and formula + activations +
    # 2 x the weights + 64 MiB (the allocator's tolerance, stated on the page): the script asserts it.
    Entry("16_memory", "16", [(f"{T} code/16_memory.py --part layouts activations --tp 1", 0,
                               "every row: measured = formula")], estimate=40),
    Entry("16_memory_tp_zero", "16", [
        (f"{T} code/16_memory.py --part layouts --tp 2", 0, "every row: measured = formula"),
        (f"{T} code/16_memory.py --part zero", 0, "every row: measured = formula")],
        worlds="multi", needs=("deepspeed",), estimate=90, timeout=300),
    Entry("take_home_resume", "take-home", [
        (f"{T} code/take_home.py --checkpoint {{tmp}}/full.pt", 0, "weights sha256"),
        (f"{T} code/take_home.py --checkpoint {{tmp}}/resume.pt --signal-at 20", "nonzero", "stopped in epoch"),
        (f"{T} code/take_home.py --checkpoint {{tmp}}/resume.pt", 0, "resumed from")],
        smoke={"--checkpoint": "--epochs 2 --checkpoint"}, estimate=60,
        same=[("resumed run = uninterrupted run (weights bitwise)", 0, 2, "cpu")]),
    Entry("own_script", "own", [("python code/own_script.py", 0, r"^device {device}, ")], worlds="one",
          says_backend=False, smoke={"code/own_script.py": "code/own_script.py --epochs 1"}),
    Entry("own_script_ddp", "own", [(f"{T} code/own_script_ddp.py --epochs 5", 0, "test accuracy")],
          smoke={"--epochs 5": "--epochs 1"}),
    Entry("own_script_checked", "own", [(f"{T} code/own_script_checked.py --epochs 2", 0, "test accuracy")],
          smoke={"--epochs 2": "--epochs 1"}),
    # under torchrun here (RANK set): the srun mapping itself runs on the practice cluster
    Entry("own_script_srun", "own", [(f"{T} code/own_script_srun.py --epochs 2", 0, "test accuracy")],
          smoke={"--epochs 2": "--epochs 1"}),
    # pytorch/examples' MNIST script, plain and under DDP, on the offline MNIST-format files (data/MNIST)
    Entry("mnist_main", "own", [("python code/mnist_offline_data.py", 0, "test images"),
                                ("python code/mnist_main.py --epochs 1", 0, "Test set: Average loss")],
          worlds="one", says_backend=False),
    Entry("mnist_ddp", "own", [("python code/mnist_offline_data.py", 0, "test images"),
                               (f"{T} code/mnist_ddp.py --epochs 1", 0, "Test set: Average loss")],
          says_backend=False),
    Entry("collectives", "collectives", [(f"{T} code/collectives.py", 0, "every rank holds what each line claims")]),
    Entry("own_tokens", "own", [(f"{T} code/own_tokens.py --check --data {{tmp}}/tokens.bin", 0, r"^loss \S+ -> ")],
          smoke={"--check": "--check --steps 4"}),
    Entry("own_tokens_single", "own", [("python code/own_tokens_single.py --data {tmp}/tokens.bin", 0, r"^loss \S+ -> ")],
          worlds="one", says_backend=False, smoke={"--data": "--steps 4 --data"}),
    Entry("own_script_requeue", "own", [("python code/mnist_offline_data.py", 0, "test images"),
                                        (f"{T} code/own_script_requeue.py --epochs 1 --checkpoint {{tmp}}/mnist.pt",
                                         0, "Test set: Average loss")], says_backend=False),
]
# Scripts of the steps that no entry runs, and why (shown by --list and kept in the results file).
NOT_COVERED = {
    "code/09_lightning_requeue.py": "needs a Slurm job step (SLURMEnvironment, scontrol requeue): notebook 9 "
                                    "runs it on the practice cluster",
    "code/09_trials.py": "counts how gloo processes end on CPU (step 9's measurements), not a GPU path",
    "code/11_stacks.py": "needs a running Slurm job and py-spy",
    "code/09_workers.py": "one process and its DataLoader workers on CPU (how signals reach them), no GPU path",
    "code/13_data_bench.py": "one process, no GPU: it times DataLoader workers reading files",
    "code/14_sweep.py": "submits a chain of Slurm jobs (sbatch); the benchmark each job runs is 14_scaling",
}


def uncovered(scripts=None):
    """The runnable scripts of code/ that no entry runs and NOT_COVERED does not name. A module
    that other files of code/ import (ddp_helpers, ddp_check) is not a script of its own."""
    files = sorted((ROOT / "code").glob("*.py"))
    modules = {m for f in files for m in re.findall(r"^\s*(?:from|import)\s+(\w+)", f.read_text(), re.M)}
    scripts = [f"code/{f.name}" for f in files if f.stem not in modules] if scripts is None else scripts
    run = {w for e in ENTRIES for cmd, *_ in e.commands for w in shlex.split(cmd) if w.startswith("code/")}
    return [s for s in scripts if s not in run and s not in NOT_COVERED]
FIGURES = [  # (label, pattern): numbers the scripts print, kept with the command that printed them
    ("test accuracy", r"^test accuracy (\d\.\d+)$"),
    ("last loss", r"^epoch \d+ loss (\d+\.\d+)"),
    ("weights sha256", r"^weights sha256 (\w+)"),
    ("compiled", r"^(compiled \d+ graph.*)$"),
    ("max|dparam|", r"DataParallel on \d+ GPUs vs 1 GPU: max\|dparam\| (\S+)"),
    ("equivalence cases", r"^(\S+ .*(?:  equal|  DIFFERENT|not run on \w+:.*))$"),
    ("all_reduce", r"^(.* GB/s)$"),
    # code/14_timeline.py's table: rank, step, step ms, compute, comm, overlap, exposed (one row per line)
    ("step table", r"^( *\d+ +\d+ +\d+\.\d+ +\d+\.\d+ +\d+\.\d+ +\d+\.\d+ +\d+\.\d+)$"),
]


def probe(python):
    """The machine as the scripts will see it: torch, CUDA, GPUs, the optional packages."""
    code = ("import importlib.util, importlib.metadata as md, json, sys, torch\n"
            "def v(m):\n"
            "    try: return md.version(m)\n"
            "    except md.PackageNotFoundError: return None\n"
            "n = torch.cuda.device_count()\n"
            "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, 'hip': torch.version.hip,"
            " 'gpus': n, 'device': torch.cuda.get_device_name(0) if n else None,"
            " 'python': sys.version.split()[0],"
            " 'packages': {m: v(m) if importlib.util.find_spec(m) else None for m in"
            " ('deepspeed', 'lightning', 'accelerate', 'torchvision', 'sklearn')}}))")
    r = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    if r.returncode:
        raise SystemExit(f"error: {python} cannot import torch: {r.stderr.strip().splitlines()[-1:]}")
    info = json.loads(r.stdout.strip().splitlines()[-1])
    info["driver"] = None
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.split()
        info["driver"] = out[0] if out else None
    return info


def instances(entries, worlds, gpus, smoke):
    """(name, entry, world size or None, skip reason or None) for every entry and world size.
    CPU smoke: the multi-process paths with 2 gloo processes, the others with `worlds` (1)."""
    out = []
    for e in entries:
        if e.worlds == "one":
            out.append((e.name, e, None, None))
            continue
        if e.worlds == "two":  # exactly 2 processes, whatever the GPU count
            out.append((f"{e.name}@2", e, 2, None if smoke or gpus >= 2 else
                        f"needs 2 GPUs (one process per GPU), this machine has {gpus}"))
            continue
        sizes = [w for w in worlds if e.worlds == "each" or w >= 2] or ([2] if smoke else [])
        if not sizes:  # a multi-process path on a one-GPU machine
            out.append((f"{e.name}@2", e, 2, f"needs 2 GPUs (one process per GPU), this machine has {gpus}"))
        out += [(f"{e.name}@{w}", e, w, None) for w in sizes]
    return out


def command_text(cmd, e, n, tmp, smoke):
    if smoke:
        for old, new in e.smoke.items():
            cmd = cmd.replace(old, new)
    return cmd.format(n=n or 1, tmp=tmp)


def run_one(name, e, n, smoke, python, timeout, info):  # timeout: None = the entry's own
    """Run an entry's commands in order; return its record."""
    tmp = tempfile.mkdtemp(prefix=f"gpu-check-{name.replace('@', '-')}-")
    timeout = timeout or (120 if smoke else e.timeout)
    rec = {"name": name, "step": e.step, "world_size": n, "commands": [], "figures": {},
           "date": datetime.date.today().isoformat(), "torch": info["torch"]}
    tag = uuid.uuid4().hex  # in the environment of every process the entry starts: finds leftovers
    env = {**os.environ, **e.env, "GPU_CHECK_TAG": tag}
    if smoke:
        env.setdefault("OMP_NUM_THREADS", "1")
        env.update(e.smoke_env)
        if e.smoke_env:
            rec["env"] = e.smoke_env
    backend, device = ("gloo", "cpu") if smoke else ("nccl", "cuda")  # ROCm: RCCL, named nccl too
    try:
        if e.setup:
            e.setup(tmp)
        start = time.perf_counter()
        for cmd, expect, must in e.commands:
            text = command_text(cmd, e, n, tmp, smoke)
            argv = shlex.split(text)
            if argv[0] == "python":
                argv[0] = python
            t0 = time.perf_counter()
            log = Path(tmp) / "output.txt"  # a file, not a pipe: a leftover process cannot block the runner
            with open(log, "w") as f:
                proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    kill_tagged(tag)
                    proc.kill()
                    proc.wait()
                    proc.returncode = None
            left = tagged(tag, wait=5)  # torchrun's workers live in sessions of their own
            kill_tagged(tag)
            out = log.read_text(errors="replace").replace(tmp, "$TMP")
            lines = out.splitlines()
            rec["commands"].append({"command": text.replace(tmp, "$TMP"), "exit_code": proc.returncode,
                                    "seconds": round(time.perf_counter() - t0, 1), "output": lines[-40:]})
            figures = rec["commands"][-1]["figures"] = {}
            for label, pattern in FIGURES:
                found = re.findall(pattern, out, re.M)
                if found and label == "step table":  # one table per command: each under its command's folder
                    figures[f"{label} {argv[-1].replace(tmp, '$TMP')}"] = found
                elif found:
                    figures[label] = found if label in ("equivalence cases", "all_reduce") else found[-1]
            rec["figures"].update(figures)
            reason = None
            if proc.returncode is None:
                reason = f"timed out after {timeout} s (a hang?): {text.replace(tmp, '$TMP')}"
            elif left:
                reason = (f"{len(left)} of its processes still ran 5 s after it ended, exit code {proc.returncode} "
                          f"(killed): {text.replace(tmp, '$TMP')}")
            elif (expect == 0) != (proc.returncode == 0):
                # the script's own "error: ..." line, else the last exception line that is not torchrun's summary
                err = [ln for ln in lines if re.match(r"(\[rank\d+\]:\s*)?error: ", ln)] or [
                    ln for ln in lines if re.search(r"\w+(Error|Exception)\b", ln) and "ChildFailedError" not in ln
                    and not ln.lstrip().startswith(("File ", "raise ", "Traceback"))]
                why = (err or lines or ["(no output)"])[-1].strip()
                reason = (f"exit code {proc.returncode}, expected {expect}: {why}" if expect == 0
                          else f"exit code 0, expected a failure: {text.replace(tmp, '$TMP')}")
            elif must and not re.search(must.replace("{device}", device), out, re.M):
                reason = f"no line matches {must!r} in the output of: {text.replace(tmp, '$TMP')}"
            elif e.says_backend and expect == 0 and "torch.distributed.run" in text:
                said = re.search(r"backend (\w+), device (\w+)", out)
                if not said or said.groups() != (backend, device):
                    reason = (f"expected 'backend {backend}, device {device}', it said "
                              f"{said.group(0)!r}" if said else f"it did not say its backend: {text.replace(tmp, '$TMP')}")
            bench = Path(tmp) / "bench.json"  # rewritten after every rung: a timed-out run keeps its rows
            if name.startswith("10_benchmark") and bench.exists():
                report = json.loads(bench.read_text())
                rows = report["results"]
                ran = [r for r in rows if "images_per_s" in r]
                rec["report"] = report
                rec["figures"]["images/s"] = {f"batch {r['batch']}: {r['variant']}": round(r["images_per_s"])
                                              for r in ran}
            if name.startswith("10_benchmark") and not reason:
                report = rec["report"]
                rows = report["results"]
                ran = [r for r in rows if "images_per_s" in r]
                if not smoke and not (report["cuda"] or report["hip"]):
                    reason = f"the benchmark ran without a GPU: {report['device']}"
                elif not smoke and len(ran) != len(rows):
                    reason = "skipped on the GPU: " + ", ".join(
                        f"{r['variant']} ({r['skipped']})" for r in rows if "skipped" in r)
            if reason:
                rec.update(status="fail", reason=reason)
                break
        else:
            # a script that skips itself (02_dataparallel on one GPU, 11_talk with one process)
            skipped = re.search(r"^.*: skipped, .*$", out, re.M)
            claim = compare_weights(rec, e, smoke)  # what the pages claim: a difference fails
            if e.judge and not claim:
                figures, claim = e.judge(tmp, n, smoke)
                rec["figures"].update(figures)
            if claim:
                rec.update(status="fail", reason=claim)
            else:
                rec.update(status="skip", reason=skipped.group(0)) if skipped else rec.update(status="pass")
        rec["seconds"] = round(time.perf_counter() - start, 1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rec


def compare_weights(rec, e, smoke):
    """Figures for the entry's `same` pairs (see Entry); the reason to fail when a pair the pages
    claim differs, or cannot be compared. None: every claim holds."""
    shas = [c["figures"].get("weights sha256") for c in rec["commands"]]
    for label, i, j, claimed in e.same:
        a, b = (shas[i] if i < len(shas) else None), (shas[j] if j < len(shas) else None)
        few = (rec.get("world_size") or 1) <= 2
        claim = claimed == "always" or (claimed == "two" and few) or (claimed == "cpu" and smoke)
        if not (a and b):
            if claim:
                return f"{label}: cannot compare, a run printed no 'weights sha256' line"
            continue
        rec["figures"][label] = str(a == b) if claim else ("equal" if a == b else "differ")
        if claim and a != b:
            where = {"always": "", "two": " (for at most two processes)", "cpu": " (on CPU)"}[claimed]
            return f"{label} False: {a} vs {b}, which the pages claim{where}"
    return None


def tagged(tag, wait=0.0):
    """Pids of the processes with GPU_CHECK_TAG=tag in their environment, after up to `wait` s."""
    end = time.time() + wait
    while True:
        pids = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if f"GPU_CHECK_TAG={tag}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    pids.append(int(pid))
            except OSError:  # gone, or not ours to read
                pass
        if not pids or time.time() >= end:
            return pids
        time.sleep(0.2)


def kill_tagged(tag):
    for pid in tagged(tag):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def results_path(args, info):
    if args.cpu_smoke:
        slug = "cpu-smoke"
    else:
        slug = re.sub(r"[^a-z0-9]+", "-", (info["device"] or "none").lower()).strip("-")
    return Path(args.out_dir or ("runs" if args.cpu_smoke else "benchmarks")) / f"gpu-{slug}.json"


def default_worlds(gpus, smoke):
    """Process counts: 1, and one process per GPU (the multi-process entries run when gpus >= 2)."""
    return [1] if smoke else sorted({1, gpus or 1})


ROW = re.compile(r"^batch\s+(\d+)\s+(.+?)\s{2,}([\d,]+) images/s$")


def rejudge(rec):
    """A stored record judged again by this version's rules: never PASS beside a False figure; a
    talk test with one process checked nothing (skip); step 10's rows printed before a timeout
    are kept (the old benchmark wrote its JSON only at the end). The old status stays in "recorded"."""
    out = [ln for c in rec.get("commands", []) for ln in c.get("output", [])]
    new = dict(rec)
    false = [k for k, v in rec["figures"].items() if v == "False"]
    if rec["status"] == "pass" and false:
        new.update(status="fail", reason="; ".join(f"{k}: False" for k in false))
    elif rec["status"] == "pass" and "all 0 tests correct" in out:
        new.update(status="skip", reason="one process: no other rank to talk to, nothing was tested")
    rows = [m.groups() for m in map(ROW.match, out) if m]
    if rec["name"].startswith("10_benchmark") and "report" not in rec and rows:
        new["report"] = {"complete": False, "results": [
            {"variant": v, "batch": int(b), "images_per_s": float(n.replace(",", "")), "gpu_util_percent": None}
            for b, v, n in rows], "note": "rows parsed from the printed lines of a run that did not finish",
            "seconds_per_variant": 3.0, "n_images": 60000}  # code/10_benchmark.py's defaults, as run
    if new != rec:
        new["recorded"] = {k: rec.get(k) for k in ("status", "reason")}
    return new


def import_results(files, out_dir, note):
    """Merge results files written in pieces by one machine (later files win), judged again."""
    reps = [json.loads(Path(f).read_text()) for f in files]
    info = {k: reps[-1][k] for k in ("device", "gpus", "driver", "torch", "cuda", "hip", "python", "packages")}
    records = {e["name"]: rejudge(e) for r in reps for e in r["entries"]}
    path = Path(out_dir or "benchmarks") / f"gpu-{re.sub(r'[^a-z0-9]+', '-', info['device'].lower()).strip('-')}.json"
    rep = write(path, info, records, False, date=max(r["date"] for r in reps), command=note)
    summary(rep, path, [])
    return 0


def write(path, info, records, smoke, date=None, command="make gpu-check (tools/gpu_check.py)"):
    """Merge `records` into the results file (entries by name) and rebuild step 10's rows."""
    old = json.loads(path.read_text()) if path.exists() else {}
    order = [n for n, *_ in instances(ENTRIES, [1, 2, 4, 8, 16], 0, smoke)]
    entries = {e["name"]: e for e in old.get("entries", [])}
    entries.update(records)
    entries = sorted(entries.values(), key=lambda e: (order.index(e["name"]) if e["name"] in order else 999,
                                                      e["name"]))
    bench = [e for e in entries if e["name"].startswith("10_benchmark") and "report" in e]
    one = [e["report"] for e in bench if e["world_size"] is None]
    rep = {"kind": "gpu-check", "device": info["device"] or "CPU (smoke)", "gpus": info["gpus"],
           "driver": info["driver"], "torch": info["torch"], "cuda": info["cuda"], "hip": info["hip"],
           "python": info["python"], "packages": info["packages"], "smoke": smoke,
           "date": date or datetime.date.today().isoformat(), "command": old.get("command", command),
           "runs": (old.get("runs") or []) + ([command] if command not in (old.get("runs") or [])[-1:] else []),
           "seconds_per_variant": one[0].get("seconds_per_variant") if one else None,
           "n_images": one[0].get("n_images") if one else None,
           # step 10's rows, code/10_benchmark.py's format (DDP rows carry "gpus"): notebook 10's table
           "results": [{**r, **({} if e["report"].get("complete", True) else {"partial": e.get("reason", "incomplete")})}
                       for e in bench for r in e["report"]["results"]],
           "not_covered": NOT_COVERED, "entries": entries}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rep, indent=1) + "\n")
    return rep


def summary(rep, path, left):
    counts = {s: sum(e["status"] == s for e in rep["entries"]) for s in ("pass", "fail", "skip")}
    where = f"{rep['device']} x {rep['gpus']}, driver {rep['driver']}" if rep["gpus"] else rep["device"]
    print(f"\n{where}, torch {rep['torch']}, CUDA {rep['cuda']}: "
          f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped -> {path}")
    for e in rep["entries"]:
        if e["status"] != "pass":
            print(f"  {e['status'].upper():4} {e['name']}: {e['reason']}"[:300])
    ladder = [r for r in rep["results"] if "images_per_s" in r]
    if ladder:
        print("  step 10 (images/s): " + "; ".join(
            f"{r['batch']} {r['variant'].split(' (')[0]}{' x%d' % r['gpus'] if 'gpus' in r else ''} "
            f"{r['images_per_s']:,.0f}" for r in ladder))
    if left:
        print(f"  out of time for {len(left)} entries: run them with --only {','.join(left)}  (or --missing)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--list", action="store_true", help="print the entries and their commands, run nothing")
    p.add_argument("--only", help="comma-separated entry names or patterns (12_*, *@1)")
    p.add_argument("--missing", action="store_true", help="only entries without a pass in the results file")
    p.add_argument("--cpu-smoke", action="store_true", help="no GPU: gloo + CPU, tiny sizes (the tests)")
    p.add_argument("--worlds", help="process counts, comma-separated (default: 1 and the GPU count; "
                                    "smoke: 1, and 2 for the paths that need 2)")
    p.add_argument("--out-dir", help="where gpu-<device>.json goes (default benchmarks/; smoke: runs/)")
    p.add_argument("--python", default=sys.executable, help="the Python with torch that runs the scripts")
    p.add_argument("--timeout", type=int, help="seconds per command (default: the entry's, 150 to 420; smoke 120)")
    p.add_argument("--jobs", type=int, default=1, help="entries at a time (CPU smoke only: 2 on 2 cores)")
    p.add_argument("--budget", type=float, default=540,
                   help="seconds: start no entry that would likely end later (a device call is 10 minutes)")
    p.add_argument("--import", dest="imports", nargs="+", metavar="FILE",
                   help="merge results files of one machine, written in pieces, into --out-dir (judged again)")
    p.add_argument("--note", default="make gpu-check (tools/gpu_check.py)", help="with --import: how they were made")
    args = p.parse_args()
    if args.imports:
        return import_results(args.imports, args.out_dir, args.note)

    info = probe(args.python)
    if not args.cpu_smoke and not info["gpus"] and not args.list:
        raise SystemExit(f"error: no GPU visible to torch {info['torch']} (CUDA {info['cuda']}): run this on a "
                         f"GPU machine, or check the runner on CPU with --cpu-smoke")
    if args.cpu_smoke:
        info.update(gpus=0, device=None, driver=None)
    worlds = (sorted({int(w) for w in args.worlds.split(",")}) if args.worlds else
              default_worlds(info["gpus"], args.cpu_smoke))
    todo = instances(ENTRIES, worlds, info["gpus"], args.cpu_smoke)
    path = results_path(args, info)
    old = {e["name"]: e for e in json.loads(path.read_text())["entries"]} if path.exists() else {}
    if args.only:
        pats = args.only.split(",")
        bad = [q for q in pats if not any(fnmatch.fnmatch(n, q) or n.split("@")[0] == q for n, *_ in todo)]
        if bad:
            raise SystemExit(f"error: no entry matches {', '.join(bad)}; entries: {', '.join(n for n, *_ in todo)}")
        todo = [t for t in todo if any(fnmatch.fnmatch(t[0], q) or t[0].split("@")[0] == q for q in pats)]
    if args.missing:
        todo = [t for t in todo if old.get(t[0], {}).get("status") != "pass"]
    if args.list:
        for name, e, n, skip in todo:
            state = old.get(name, {}).get("status", "not run")
            print(f"{name:34} {state:7} " + " && ".join(command_text(c, e, n, "$TMP", args.cpu_smoke)
                                                         for c, *_ in e.commands) + (f"  [skip: {skip}]" if skip else ""))
        for script, why in NOT_COVERED.items():
            print(f"{'(not covered)':34} {script}: {why}")
        for script in uncovered():  # tests/test_gpu_check.py fails on these
            print(f"{'(no entry)':34} {script}: no entry runs it and NOT_COVERED gives no reason")
        print(f"results file: {path}" if info["gpus"] or args.cpu_smoke else
              "results file: benchmarks/gpu-<device>.json (no GPU here: the commands a one-GPU machine runs)")
        return 0

    if args.jobs > 1 and not args.cpu_smoke:
        raise SystemExit("error: --jobs is for --cpu-smoke: on the GPU the entries and their timings need it alone")
    timeout = args.timeout  # None: each entry's own (smoke: 120 s)
    print(f"{'CPU smoke run (gloo, tiny sizes)' if args.cpu_smoke else info['device']}: torch {info['torch']}, "
          f"{len(todo)} entries, process counts {worlds}, results -> {path}", flush=True)
    def check(name, e, n, skip):
        missing = [m for m in e.needs if not info["packages"].get(m)]
        if skip or missing or (args.cpu_smoke and e.gpu_only):
            why = skip or (f"{', '.join(missing)} not installed ({args.python})" if missing else
                           f"needs a GPU: {e.gpu_only}")
            return {"name": name, "step": e.step, "world_size": n, "status": "skip", "reason": why,
                    "gpu_only": bool(e.gpu_only), "commands": [{"command": command_text(c, e, n, "$TMP", args.cpu_smoke)}
                                                              for c, *_ in e.commands],
                    "figures": {}, "date": datetime.date.today().isoformat()}
        try:
            rec = run_one(name, e, n, args.cpu_smoke, args.python, timeout, info)
        except Exception as err:  # the runner's own failure on this entry: say so, go on with the next
            rec = {"name": name, "step": e.step, "world_size": n, "status": "fail", "commands": [],
                   "reason": f"gpu_check.py itself: {type(err).__name__}: {err}", "figures": {},
                   "date": datetime.date.today().isoformat()}
        rec["gpu_only"] = bool(e.gpu_only)
        return rec

    t_start, records, left, running = time.perf_counter(), {}, [], set()
    # --jobs 2: two entries at a time, for the CPU smoke run only (GPU timings need the GPU alone)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        pending = list(todo)
        while pending or running:
            while pending and len(running) < args.jobs:
                name, e, n, skip = pending.pop(0)
                if time.perf_counter() - t_start + (10 if args.cpu_smoke else e.estimate) > args.budget:
                    left.append(name)  # would likely end after the call's time: the next piece runs it
                    continue
                running.add(pool.submit(check, name, e, n, skip))
            if not running:
                break
            done, running = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
            for f in done:
                rec = f.result()
                records[rec["name"]] = rec
                shown = ", ".join(f"{k} {v}" for k, v in rec["figures"].items() if isinstance(v, str))
                print(f"{rec['status'].upper():4} {rec['name']:34} {rec.get('seconds', 0):6.1f} s  "
                      f"{rec.get('reason') or shown}"[:200], flush=True)
                write(path, info, {rec["name"]: rec}, args.cpu_smoke)  # a killed call keeps what it did
    rep = write(path, info, {}, args.cpu_smoke) if records or path.exists() else None
    if rep:
        summary(rep, path, left)
    return 1 if any(r["status"] == "fail" for r in records.values()) or left else 0


if __name__ == "__main__":
    sys.exit(main())
