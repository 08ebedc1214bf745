"""Step 15: a bad mesh or batch is one line, before any process group starts. Each case runs the
script once, as one process, with the variables torchrun would set for the world it describes
(cheap: no process group, no training); the page shows these cases."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# --8<-- [start:cases]
CASES = {  # name: (what torchrun sets in every process, the script's options, the line each prints)
    "mesh": ({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"}, ["--dp", "3", "--tp", "2"],
             "error: mesh (dp 3, tp 2) holds 6 processes, but the world size is 4: dp x tp must equal it"),
    "tp-over-a-node": ({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}, ["--dp", "1", "--tp", "8"],
                       "error: tp 8 is larger than the 4 GPUs (processes) of one node: tensor parallel "
                       "talks in every layer, keep it inside a node (tp <= 4)"),
    "batch": ({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}, ["--tp", "2", "--batch-size", "90"],
              "error: batch size 90 is not divisible by dp 4: use a multiple of 4 (the tp processes of "
              "a group share their batch)"),
}
# --8<-- [end:cases]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line(case):
    env, options, line = CASES[case]
    r = subprocess.run([sys.executable, "code/15_two_dimensions.py", *options], cwd=ROOT,
                       env={**os.environ, "RANK": "0", "LOCAL_RANK": "0", **env},
                       capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stderr, r.stdout) == (1, line + "\n", "")

