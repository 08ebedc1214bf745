"""How the suite runs: its order comes from the last measured run, and what it starts keeps its
temporary files in one folder that the run removes."""
import os
import subprocess
import sys

from conftest import LAST, ROOT, longest_first


def test_the_measured_files_exist():
    """The order (longest files first, benchmarks/suite-time.json) names only files that exist:
    a file renamed or removed since leaves the order stale."""
    gone = [f for f in longest_first() + LAST if not (ROOT / f).exists()]
    assert not gone, f"benchmarks/suite-time.json names files that are gone (rerun benchmarks/suite_time.py): {gone}"


def test_what_the_run_starts_writes_into_its_own_folder():
    """torchrun's log folders and multiprocessing's folders go where tempfile points a child
    process: the run's folder (conftest.py removes it at the end), not /tmp itself."""
    ours = os.environ["DDP_TESTS_TMPDIR"]
    child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert child == ours and os.path.basename(ours).startswith("ddp-tests-") and os.path.isdir(ours)
    assert os.stat(ours).st_mode & 0o1777 == 0o1777  # the cluster user writes there too
