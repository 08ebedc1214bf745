"""`make gpu-check` (tools/gpu_check.py) cannot rot: the same command, in its CPU smoke mode
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
import gpu_check  # noqa: E402
import mkdocs_hooks  # noqa: E402

SAMPLE = ROOT / "tests" / "gpu-check-sample.json"


# Run for real on CPU: one entry of each kind the runner handles (a plain python process, a skip, a
# chain of torchrun commands with an expected failure and a bitwise comparison, step 10's rows).
# The other entries' scripts run in the notebooks; their command lines are checked below.
SMOKE = "01_single,02_dataparallel,09_reliability_resume@1,10_benchmark,10_benchmark_ddp@1,11_talk@1"


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
        # on CPU only the GPU-only paths may skip (DataParallel, DeepSpeed bf16, Accelerate's FSDP), and
        # the talk test with one process, which has nothing to test (it printed "all 0 tests correct")
        if e["name"] == "11_talk@1":
            assert e["status"] == "skip" and "no other rank to talk to" in e["reason"], e
            continue
        assert e["status"] == "pass" or (e["status"] == "skip" and e["gpu_only"]), e
        assert e["step"] and e["date"] and e["commands"], e
        for c in e["commands"]:
            assert c["command"] and ("exit_code" in c or e["status"] == "skip"), c
        if e["status"] == "pass" and "torch.distributed.run" in e["commands"][0]["command"]:
            assert f"--nproc_per_node={e['world_size']}" in e["commands"][0]["command"], e
    step9 = next(e for e in rep["entries"] if e["name"] == "09_reliability_resume@1")
    assert step9["figures"]["two uninterrupted runs (weights bitwise)"] == "True", step9
    assert step9["figures"]["deterministic: resumed run = uninterrupted run (weights bitwise)"] == "True", step9
    assert "--deterministic" in step9["commands"][2]["command"] and "--signal-at" in step9["commands"][3]["command"]
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
              and r.get("results") and "device" in r and not r.get("smoke")]
    ten = mkdocs_hooks.gpu_status(ROOT, "10")
    assert ('!!! success "Ran on a GPU' in ten) == bool(ladder), ten
    assert all(f"benchmarks/{p.name}" in ten for p in ladder)

    class Cfg:
        config_file_path = str(ROOT / "mkdocs.yml")

    class Page:
        class file:
            src_path = "x.md"

    page = mkdocs_hooks.on_page_markdown("# T\n\n<!-- gpu-status 03 -->\n\nText", Page, Cfg, None)
    assert "<!-- gpu-status" not in page and "!!! " in page


def test_a_claimed_property_that_fails_fails_the_entry():
    """No PASS beside a False: a pair the pages claim everywhere fails when it differs; a CPU-only
    claim fails the smoke run and is an observation ("differ") on a GPU."""
    e = gpu_check.Entry("x", "09", [], same=[("claimed", 0, 1, "always"), ("cpu only", 0, 2, "cpu")])
    rec = lambda *shas: {"commands": [{"figures": {"weights sha256": s}} for s in shas], "figures": {}}  # noqa: E731
    ok = rec("aa", "aa", "bb")
    assert gpu_check.compare_weights(ok, e, smoke=False) is None and ok["figures"] == {"claimed": "True",
                                                                                       "cpu only": "differ"}
    assert "cpu only False: aa vs bb" in gpu_check.compare_weights(rec("aa", "aa", "bb"), e, smoke=True)
    bad = rec("aa", "cc", "aa")
    assert gpu_check.compare_weights(bad, e, smoke=False) == "claimed False: aa vs cc, which the pages claim"
    assert "cannot compare" in gpu_check.compare_weights(rec("aa", None, "aa"), e, smoke=False)
    # a stored record (written by an older gpu_check) is judged again on import
    old = {"name": "09_reliability_resume@1", "status": "pass", "commands": [],
           "figures": {"resumed run = uninterrupted run (weights bitwise)": "False"}}
    new = gpu_check.rejudge(old)
    assert new["status"] == "fail" and "False" in new["reason"] and new["recorded"]["status"] == "pass"
    talk = {"name": "11_talk@1", "status": "pass", "figures": {}, "commands": [{"output": ["all 0 tests correct"]}]}
    assert gpu_check.rejudge(talk)["status"] == "skip"


def test_multi_process_entries_run_when_a_machine_has_two_gpus():
    for gpus, worlds in [(1, [1]), (2, [1, 2]), (4, [1, 4])]:
        assert gpu_check.default_worlds(gpus, smoke=False) == worlds
        todo = {name: skip for name, _, _, skip in gpu_check.instances(gpu_check.ENTRIES, worlds, gpus, False)}
        multi = [f"{e.name}@{gpus}" if gpus > 1 else f"{e.name}@2" for e in gpu_check.ENTRIES if e.worlds == "multi"]
        assert multi and all(m in todo for m in multi), (gpus, todo)
        assert all((todo[m] is None) == (gpus > 1) for m in multi), (gpus, todo)  # skipped only on one GPU
        assert ("01_ddp@1" in todo) and (f"01_ddp@{gpus}" in todo)


def test_the_stored_h100_results_are_the_imported_pieces(tmp_path):
    """benchmarks/gpu-nvidia-h100-80gb-hbm3.json is what --import makes of the two stored pieces."""
    raw = sorted(ROOT.glob("benchmarks/h100-2026-11-27/*.json"))
    assert len(raw) == 2
    stored = json.loads((ROOT / "benchmarks/gpu-nvidia-h100-80gb-hbm3.json").read_text())
    r = subprocess.run([sys.executable, "tools/gpu_check.py", "--import", *map(str, raw), "--out-dir", str(tmp_path),
                        "--note", stored["command"]], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    made = json.loads((tmp_path / "gpu-nvidia-h100-80gb-hbm3.json").read_text())
    assert made == stored
    status = {e["name"]: e["status"] for e in stored["entries"]}
    assert status["09_reliability_resume@1"] == "fail" and status["11_talk@1"] == "skip"
    assert stored["driver"] == "580.159.04" and stored["torch"] == "2.11.0+cu130" and stored["date"] == "2026-11-27"


def test_every_script_of_code_has_an_entry_or_a_reason():
    """A new script in code/ fails here until an entry runs it or NOT_COVERED says why not."""
    assert gpu_check.uncovered() == []
    assert gpu_check.uncovered(["code/01_ddp.py", "code/09_trials.py", "code/16_new.py"]) == ["code/16_new.py"]
    for script in gpu_check.NOT_COVERED:
        assert (ROOT / script).exists(), script


def test_two_process_entries_and_claims_for_at_most_two_processes():
    """15_pipeline runs 2 processes whatever the GPU count; step 9's bitwise resume is claimed (fails
    when it differs) with one or two processes only, and is an observation with more."""
    for gpus, skipped in [(1, True), (2, False), (8, False)]:
        todo = {name: (n, skip) for name, _, n, skip in gpu_check.instances(gpu_check.ENTRIES, [1, gpus], gpus, False)}
        assert todo["15_pipeline@2"][0] == 2 and (todo["15_pipeline@2"][1] is not None) == skipped, todo
    e = gpu_check.Entry("x", "09", [], same=[("resume", 0, 1, "two")])
    def rec(n):
        return {"world_size": n, "commands": [{"figures": {"weights sha256": s}} for s in "ab"], "figures": {}}
    for n in (None, 1, 2):
        assert gpu_check.compare_weights(rec(n), e, smoke=False) == \
            "resume False: a vs b, which the pages claim (for at most two processes)"
    four = rec(4)
    assert gpu_check.compare_weights(four, e, smoke=False) is None and four["figures"] == {"resume": "differ"}
    step9 = next(e for e in gpu_check.ENTRIES if e.name == "09_reliability_resume")
    assert [c for *_, c in step9.same] == ["cpu", "two"]


def trace(folder, rank, steps, calls, micro=1):
    """A fake trace file: `steps` steps of 100 us, `micro` data/forward/backward ranges each and one
    optimizer, `calls` gloo all-reduces of 10 us inside the backward range."""
    x = lambda name, tid, ts, dur, cat="user_annotation": {"ph": "X", "name": name, "tid": tid, "pid": 1,  # noqa: E731
                                                            "ts": ts, "dur": dur, "cat": cat}
    events = []
    for s in range(steps):
        t = 1000 * s
        events += [x(f"ProfilerStep#{s + 2}", 1, t, 100), x("optimizer", 1, t + 90, 10),
                   x("aten::mm", 1, t, 60, "cpu_op")]
        events += [x(r, 1, t + 20 * m + i, 5) for m in range(micro)
                   for i, r in enumerate(("data", "forward", "backward"))]
        events += [x("gloo:all_reduce", 2, t + 50 + 10 * c, 10) for c in range(calls)]
    (folder / f"rank{rank}.json").parent.mkdir(parents=True, exist_ok=True)
    (folder / f"rank{rank}.json").write_text(json.dumps({"traceEvents": events}))


def test_step14_structure_judges_what_the_page_claims(tmp_path):
    def make(no_sync_calls):
        for rank in (0, 1):
            trace(tmp_path / "trace/default", rank, 3, 1)
            trace(tmp_path / "trace/small-buckets", rank, 3, 4)
            trace(tmp_path / "trace/no-sync", rank, 3, no_sync_calls, micro=4)
    make(1)
    figures, reason = gpu_check.step14_structure(tmp_path, 2, False)
    assert reason is None and figures["small-buckets: all-reduces per step"] == "[4]", figures
    assert figures["no-sync: ranges per step (data, forward, backward, optimizer)"] == "[(4, 4, 4, 1)]"
    make(2)  # no_sync() that all-reduces twice per optimizer step: the page says once
    assert "no-sync: all-reduces per step [2], the page says 1" in gpu_check.step14_structure(tmp_path, 2, False)[1]
    assert gpu_check.step14_structure(tmp_path, 1, False)[1] is None  # one process: the counts are shown, not claimed
