"""Step 12: the LUMI batch script (notebooks/12-fsdp2.ipynb submits the Roihu one and checks
the same numbers), and the converter's refusal of a folder that is not a DCP checkpoint."""
import re
import subprocess
import sys
from pathlib import Path

from jobs import submit

ROOT = Path(__file__).resolve().parent.parent
# The epoch losses of `code/12_fsdp2.py` (2 processes, uninterrupted), as the notebook prints them
LOSSES = ["1.8926", "0.7520", "0.2791", "0.1795"]


def test_lumi_job_saves_with_4_and_resumes_with_2(cluster):
    out = submit("slurm/12-fsdp2-lumi.sbatch")
    assert re.search(r"^4 processes, fsdp, fp32, backend \w+, device \w+, batch 96 = 4 x 24$", out, re.M), out
    assert re.search(r"^2 processes, fsdp, fp32, backend \w+, device \w+, batch 96 = 2 x 48$", out, re.M), out
    assert "resumed epoch-2, saved by 4 processes, at epoch 2" in out
    assert re.findall(r"^epoch \d loss (\d\.\d+)$", out, re.M) == LOSSES


def test_converter_refuses_a_folder_without_metadata(tmp_path):
    r = subprocess.run([sys.executable, "code/12_fsdp2_convert.py", str(tmp_path), str(tmp_path / "x.pt")],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.strip() == f"error: {tmp_path} is not a DCP checkpoint (it has no .metadata file)"
