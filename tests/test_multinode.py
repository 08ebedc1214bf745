"""Step 5: code/05_multinode.py started by srun without torchrun needs MASTER_ADDR/MASTER_PORT."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_srun_without_master_addr_is_a_clear_error():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(SLURM_PROCID="0", SLURM_NTASKS="2", SLURM_LOCALID="0")  # what srun sets
    r = subprocess.run([sys.executable, "code/05_multinode.py"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith(
        "error: started by srun without torchrun, but MASTER_ADDR/MASTER_PORT are not set")
