"""Step 11: the 'can every rank talk' test must be able to fail.

The notebook shows it passing on the practice cluster; here one rank's all_reduce results are
corrupted on purpose (a stand-in for a bad GPU or link), and the script must say WRONG and
end with an error line and exit code 1.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CORRUPT = """
import runpy, sys
import torch.distributed as dist
sys.path.insert(0, "code")
real_all_reduce = dist.all_reduce
def all_reduce(tensor, *args, **kwargs):
    work = real_all_reduce(tensor, *args, **kwargs)
    if dist.get_rank() == 1 and tensor.numel() > 2:  # the messages, not the script's own checks
        tensor.view(-1)[-1] += 1
    return work
dist.all_reduce = all_reduce
sys.argv = ["code/11_talk.py", "--sizes", "8K,64K", "--iters", "1", "--timeout", "60"]
runpy.run_path("code/11_talk.py", run_name="__main__")
"""


def test_talk_reports_a_wrong_sum(tmp_path):
    wrapper = tmp_path / "corrupt_rank1.py"
    wrapper.write_text(CORRUPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        str(wrapper)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert out.count("WRONG") == 2 and " correct " not in out, out
    assert "error: all_reduce gave a wrong sum: within node 0 at 8 KiB, within node 0 at 64 KiB" in out, out



def test_stored_talk_tables_are_consistent():
    """nbval cannot compare the talk tables' times (sanitize.cfg hides them), so a hand edit of the
    stored output would pass unseen: check every row the page shows against the script's formula."""
    import mkdocs_hooks  # the page's own reader of a tagged cell's output
    units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    for tag, processes in [("talk", 8), ("talk-lumi", 16)]:
        table = mkdocs_hooks._output(ROOT, "notebooks/11-debugging.ipynb", tag)
        rows = re.findall(r"^(?:within node \d|across nodes|all ranks) +(\d+) +(\d+) (\wiB)  correct +(\d+) us +(\S+) GB/s$",
                          table, re.M)
        assert len(rows) == 12 and max(int(r[0]) for r in rows) == processes, f"{tag}: 4 groups x 3 sizes"
        for n, size, unit, us, busbw in rows:
            n, size, seconds = int(n), int(size) * units[unit], int(us) / 1e6
            expected = size / seconds * 2 * (n - 1) / n / 1e9
            # printed with 3 significant digits, from a time rounded to the microsecond
            assert abs(float(busbw) - expected) <= (0.006 + 0.5 / int(us)) * expected, (tag, n, size, us, busbw)
