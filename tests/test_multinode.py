"""Step 5: code/05_multinode.py under srun without torchrun, and torchrun's --numa-binding."""
import os
import subprocess
import sys
from pathlib import Path

import local_slurm

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
    sif = local_slurm.CLUSTERS["lumi"]["containers"][0]
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
