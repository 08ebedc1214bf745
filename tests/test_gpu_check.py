"""`make gpu-check` (tools/gpu_check.py, issue 27) cannot rot: the same command, in its CPU smoke mode
(gloo, tiny sizes), runs one entry of each kind and writes the results file the GPU run will write;
every entry's commands name scripts that exist and options those scripts declare; and
the site's `<!-- gpu-status NN -->` mark renders from such a file (a sample in tests/, not benchmarks/)."""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import gpu_check  # noqa: E402
import mkdocs_hooks  # noqa: E402

SAMPLE = ROOT / "tests" / "gpu-check-sample.json"


# Run for real on CPU: one entry of each kind the runner handles (a plain python process, a skip, a
# chain of torchrun commands with an expected failure and a bitwise comparison, step 10's rows).
# The other entries' scripts run in the notebooks; their command lines are checked below.
SMOKE = "01_single,02_dataparallel,09_reliability_resume@1,10_benchmark,10_benchmark_ddp@1"


def test_cpu_smoke_runs_one_entry_of_each_kind(tmp_path):
    r = subprocess.run([sys.executable, "tools/gpu_check.py", "--cpu-smoke", "--jobs", "2", "--out-dir", str(tmp_path),
                        "--only", SMOKE], cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    rep = json.loads((tmp_path / "gpu-cpu-smoke.json").read_text())
    assert rep["smoke"] and rep["torch"] and rep["python"] and "driver" in rep and rep["device"]
    expected = [(name, n) for name, _, n, _ in gpu_check.instances(gpu_check.ENTRIES, [1], 0, True)
                if name in SMOKE.split(",")]
    assert [(e["name"], e["world_size"]) for e in rep["entries"]] == expected  # each asked entry, in order, once
    for e in rep["entries"]:
        # on CPU only the GPU-only paths may skip (DataParallel, DeepSpeed bf16, Accelerate's FSDP)
        assert e["status"] == "pass" or (e["status"] == "skip" and e["gpu_only"]), e
        assert e["step"] and e["date"] and e["commands"], e
        for c in e["commands"]:
            assert c["command"] and ("exit_code" in c or e["status"] == "skip"), c
        if e["status"] == "pass" and "torch.distributed.run" in e["commands"][0]["command"]:
            assert f"--nproc_per_node={e['world_size']}" in e["commands"][0]["command"], e
    step9 = next(e for e in rep["entries"] if e["name"] == "09_reliability_resume@1")
    assert step9["figures"]["resumed run = uninterrupted run (weights bitwise)"] == "True", step9
    # step 10's rows in code/10_benchmark.py's own format: notebook 10 builds its table from them
    rows = rep["results"]
    assert {r["batch"] for r in rows} == {16, 32} and all(r["images_per_s"] > 0 for r in rows if "skipped" not in r)
    assert any(r.get("gpus") == 1 for r in rows)  # the DDP ladder (torchrun), 1 process
    assert rep["seconds_per_variant"] and "10_benchmark" in r.stdout and "passed" in r.stdout


def declared_options(script):
    """The --options a script's argparse declares (DeepSpeed's add_config_arguments adds its own)."""
    src = (ROOT / script).read_text()
    opts = set(re.findall(r"""add_argument\(\s*["'](--[\w-]+)["']""", src))
    if "add_config_arguments" in src:
        opts |= {"--deepspeed", "--deepspeed_config"}
    return opts


@pytest.mark.parametrize("smoke", [False, True], ids=["gpu", "cpu-smoke"])
def test_every_entry_runs_scripts_with_options_they_declare(smoke):
    """Every command of every entry, as the GPU run and the smoke run write it: its scripts exist and
    declare each option given to them (a renamed option fails here, not on the day of the GPU)."""
    checked = 0
    for name, e, n, _ in gpu_check.instances(gpu_check.ENTRIES, [1, 4], 4, smoke):
        for cmd, _, _ in e.commands:
            argv = shlex.split(gpu_check.command_text(cmd, e, n, "/tmp/x", smoke))
            scripts = [i for i, a in enumerate(argv) if a.startswith("code/") and a.endswith(".py")]
            assert len(scripts) == 1, (name, argv)
            script = argv[scripts[0]]
            assert (ROOT / script).exists(), (name, script)
            given = {a.split("=")[0] for a in argv[scripts[0] + 1:] if a.startswith("--")}
            assert given <= declared_options(script), (name, script, given - declared_options(script))
            for a in argv[scripts[0] + 1:]:
                if a.startswith("code/"):
                    assert (ROOT / a).exists(), (name, a)  # a config file named after the script
            checked += 1
    assert checked >= len(gpu_check.ENTRIES)


def test_without_a_gpu_it_says_so_and_lists_the_gpu_commands(tmp_path):
    r = subprocess.run([sys.executable, "tools/gpu_check.py", "--out-dir", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "error: no GPU visible" in r.stderr and "--cpu-smoke" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "tools/gpu_check.py", "--list", "--only", "12_*,10_benchmark"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "12_fsdp2_bf16_compile_dcp@1" in r.stdout and "--mp bf16 --compile" in r.stdout and "--resume" in r.stdout
    assert "code/10_benchmark.py --out" in r.stdout and "--smoke" not in r.stdout


def test_hook_renders_the_gpu_mark_from_a_results_file():
    none = mkdocs_hooks.gpu_status(ROOT, "01", results=[])
    assert none.startswith('!!! note "GPU results: not yet measured"') and "CPU runs" in none
    ran = mkdocs_hooks.gpu_status(ROOT, "01", results=[SAMPLE])
    assert ran.startswith('!!! success "Ran on a GPU: NVIDIA H100 80GB HBM3, 2026-11-20"')
    assert "`01_single`, `01_ddp@1` passed" in ran and "driver 570.86.15" in ran
    failed = mkdocs_hooks.gpu_status(ROOT, "06", results=[SAMPLE])
    assert failed.startswith('!!! warning "GPU check on NVIDIA H100 80GB HBM3, 2026-11-21: 1 of 2 paths passed"')
    assert "`06_deepspeed_bf16@1`: exit code 1, expected 0: error: a sample failure" in failed
    skipped = mkdocs_hooks.gpu_status(ROOT, "02", results=[SAMPLE])
    assert skipped.startswith('!!! note "GPU results: not yet measured"') and "needs 2 GPUs" in skipped
    assert mkdocs_hooks.gpu_status(ROOT, "03", results=[SAMPLE]) == none  # no entry of step 3 there
    # step 10: the benchmark's own reports in benchmarks/ count as a GPU run of that step (and only of it)
    ladder = [p for p in ROOT.glob("benchmarks/*.json") if "entries" not in (r := json.loads(p.read_text()))
              and r.get("results") and not r.get("smoke")]
    ten = mkdocs_hooks.gpu_status(ROOT, "10")
    assert ten.startswith('!!! success "Ran on a GPU') == bool(ladder), ten
    assert all(f"benchmarks/{p.name}" in ten for p in ladder)

    class Cfg:
        config_file_path = str(ROOT / "mkdocs.yml")

    class Page:
        class file:
            src_path = "x.md"

    page = mkdocs_hooks.on_page_markdown("# T\n\n<!-- gpu-status 03 -->\n\nText", Page, Cfg, None)
    assert "<!-- gpu-status" not in page and "!!! " in page
