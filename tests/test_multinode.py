"""Step 5: code/05_multinode.py under srun without torchrun, torchrun's --numa-binding, and a rank
that dies at start-up."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from practice_cluster import config

ROOT = Path(__file__).resolve().parent.parent


def test_srun_without_master_addr_is_a_clear_error():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(SLURM_PROCID="0", SLURM_NTASKS="2", SLURM_LOCALID="0")  # what srun sets
    r = subprocess.run([sys.executable, "code/05_multinode.py"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith(
        "error: started by srun without torchrun, but MASTER_ADDR/MASTER_PORT are not set")


# torchrun's --numa-binding binds each worker near its GPU (slurm/05-multinode-torchrun*.sbatch).
# The practice cluster's nodes have no GPU, where torchrun would stop; its module and container
# stand-ins put tools/launchers-practice.in first on PATH, which drops the option with a notice.
NOTICE = "practice cluster: --numa-binding=exclusive ignored (no GPUs on this node)"
STEP = "python -m torch.distributed.run --standalone --nproc_per_node=2 --numa-binding=exclusive"
LUMI_STEP = "torchrun --standalone --nproc_per_node=2 --numa-binding exclusive"


def test_numa_binding_on_the_practice_cluster_is_a_notice_not_a_crash(cluster):
    sif = config.CLUSTERS["lumi"]["containers"][0]
    for srun, step in [
            ("srun -p gputest -A project_2001234 --gres=gpu:gh200:2 -t 2 bash -c 'module load python-pytorch && ", STEP),
            ("srun -p small-g -A project_462000000 --gpus-per-node=2 -t 2 bash -c 'module use "
             "/appl/local/laifs/modules && module load lumi-aif-singularity-bindings && "
             f"singularity run {sif} ", LUMI_STEP)]:
        r = subprocess.run(f"{srun}{step} code/05_multinode.py --epochs 1'", shell=True, cwd=ROOT,
                           env={**os.environ, **cluster}, capture_output=True, text=True, timeout=180)
        out = r.stdout + r.stderr
        assert r.returncode == 0, out
        assert out.splitlines().count(NOTICE) == 1, out
        assert "2 processes on 1 node, started by torchrun" in out and "cpu binding: " in out, out


# A rank that dies while the world is still forming (before or in init_process_group). Without
# `srun --kill-on-bad-exit=1` the other node's ranks wait for it until init_process_group's
# timeout (300 s, setup_distributed) and the job holds its nodes for five minutes; with it, Slurm
# ends the whole step as soon as one task fails. docs/05-multinode.md promises this time:
STARTUP_DEATH_ENDS_JOB_WITHIN_S = 30


def job_processes(job_id):
    """{pid: environment} of the job's training processes (not torchrun, not srun)."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            env = dict(x.split("=", 1) for x in (proc / "environ").read_text().split("\0") if "=" in x)
            cmd = (proc / "cmdline").read_text()
        except (OSError, ValueError):
            continue
        if env.get("SLURM_JOB_ID") == job_id and "05_multinode.py" in cmd and "torch.distributed.run" not in cmd:
            found[int(proc.name)] = env
    return found


@pytest.mark.parametrize("path", ["slurm/05-multinode-torchrun.sbatch", "slurm/05-multinode-srun.sbatch"])
def test_a_rank_that_dies_at_start_up_ends_the_job(cluster, path, tmp_path):
    env = {**os.environ, **cluster}
    out = tmp_path / "job.out"
    r = subprocess.run(["sbatch", "--parsable", f"--output={out}", path], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    job = r.stdout.strip()
    assert job.isdigit(), r.stderr
    try:
        # Rank 5, on the second node: torchrun's worker (RANK=5) or srun's task 5 (SLURM_PROCID=5).
        deadline = time.monotonic() + 600  # the job may wait in the queue for others' jobs
        victim = None
        while victim is None:
            assert time.monotonic() < deadline, "rank 5 never started"
            victim = next((pid for pid, e in job_processes(job).items()
                           if e.get("RANK", e.get("SLURM_PROCID")) == "5"), None)
            time.sleep(0.05)
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        while time.monotonic() - killed < STARTUP_DEATH_ENDS_JOB_WITHIN_S:
            state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env,
                                   capture_output=True, text=True).stdout.strip()
            if state in ("", "COMPLETED", "FAILED", "CANCELLED"):
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"{path}: the job still ran {STARTUP_DEATH_ENDS_JOB_WITHIN_S} s after rank 5 died")
    finally:
        subprocess.run(["scancel", job], env=env)
    text = out.read_text()
    assert "r01g02: task" in text and "processes on 2 nodes" not in text, text


# torchrun's --numa-binding needs the numactl command where torchrun runs (PyTorch 2.10 stops
# without it: "numactl CLI is required for NUMA binding"). The scripts that bind ask torchrun's
# own Python (the module's, or the container's) and leave the option out, with a notice, if not.
# Every batch file that names the option, read from the files, so that a new one is checked too.
NUMA_SCRIPTS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "slurm").glob("*.sbatch")
                      if "--numa-binding" in p.read_text())


def test_numa_scripts_are_the_steps_the_page_names():
    # docs/05-multinode.md: "Steps 1, 5 and 15 bind"; also keeps the list below from being empty
    assert {Path(p).name[:2] for p in NUMA_SCRIPTS} == {"01", "05", "15"}, NUMA_SCRIPTS


@pytest.mark.parametrize("path", NUMA_SCRIPTS)
def test_numa_binding_only_where_torchrun_finds_numactl(path, tmp_path):
    text = (ROOT / path).read_text()
    guard = text[text.index("numa=()\n"):text.index("\nfi\n") + 4]
    assert '"${numa[@]}"' in text and "--numa-binding=exclusive \\" not in text, path
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "numactl").write_text("#!/bin/sh\n")
    (fake / "numactl").chmod(0o755)
    # The LUMI files ask inside the container: the practice cluster's stand-in runs the command as is.
    script = f'singularity() {{ shift 2; "$@"; }}\n{guard}echo "numa: ${{numa[*]}}"\n'
    for extra, expected in [([], "numa:"), ([str(fake)], "numa: --numa-binding=exclusive")]:
        path_var = os.pathsep.join([*extra, str(Path(sys.executable).parent), "/usr/bin", "/bin"])
        r = subprocess.run(["bash", "-c", script], env={"PATH": path_var}, capture_output=True, text=True,
                           timeout=60)
        assert r.stdout.strip() == expected, (path, extra, r.stdout, r.stderr)
        assert ("numactl not found: no --numa-binding" in r.stderr) == (not extra), r.stderr
