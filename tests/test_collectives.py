"""code/collectives.py on 2 processes prints, for each collective, what each rank held before and
holds after: the exact lines the collectives page explains (its notebook shows the same run)."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from jobs import without_gloo_lines  # noqa: E402

EXPECTED = """\
2 ranks, backend gloo, device cpu
broadcast from rank 0
  rank 0: [1, 2, 3, 4] -> [1, 2, 3, 4]
  rank 1: [10, 20, 30, 40] -> [1, 2, 3, 4]
all-gather
  rank 0: [1, 2] -> [1, 2, 10, 20]
  rank 1: [10, 20] -> [1, 2, 10, 20]
reduce-scatter (sum)
  rank 0: [1, 2, 3, 4] -> [11, 22]
  rank 1: [10, 20, 30, 40] -> [33, 44]
all-to-all
  rank 0: [1, 2, 3, 4] -> [1, 2, 10, 20]
  rank 1: [10, 20, 30, 40] -> [3, 4, 30, 40]
all-reduce (sum)
  rank 0: [1, 2, 3, 4] -> [11, 22, 33, 44]
  rank 1: [10, 20, 30, 40] -> [11, 22, 33, 44]
reduce-scatter, then all-gather
  rank 0: [11, 22] -> [11, 22, 33, 44]
  rank 1: [33, 44] -> [11, 22, 33, 44]
every rank holds what each line claims (asserted)
"""


def test_each_collective_on_two_ranks():
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        "code/collectives.py"], cwd=ROOT, capture_output=True, text=True, timeout=180,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})  # gloo + CPU, as the page shows
    assert r.returncode == 0, r.stdout + r.stderr
    out = without_gloo_lines(r.stdout)
    assert out == EXPECTED, out
    assert max(len(line) for line in out.splitlines()) <= 70  # readable on a phone, as printed
