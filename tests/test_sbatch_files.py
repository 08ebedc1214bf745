"""Every sbatch file passes shellcheck, fits an 80-character column, gives srun its CPUs and is
executed by the tests; every step has its page, notebook, script and sbatch file."""
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SBATCH = sorted(ROOT.glob("slurm/*.sbatch"))


@pytest.mark.parametrize("path", SBATCH, ids=lambda p: p.name)
def test_shellcheck(path):
    if not shutil.which("shellcheck"):
        pytest.fail("shellcheck missing: apt-get install shellcheck (make test installs it)")
    r = subprocess.run(["shellcheck", "--shell=bash", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_sbatch_lines_fit_80_characters():
    """Batch scripts are read on the page in a column of about 80 characters: wrap
    comments and long commands (`\\`), move long explanations into the page."""
    long = [f"{p.name}:{n}: {len(line)} characters" for p in SBATCH
            for n, line in enumerate(p.read_text().splitlines(), 1) if len(line) > 80]
    assert not long, "sbatch lines over 80 characters:\n" + "\n".join(long)


@pytest.mark.parametrize("path", SBATCH, ids=lambda p: p.name)
def test_srun_gets_the_cpus_sbatch_asked_for(path):
    """Since Slurm 22.05 srun no longer inherits --cpus-per-task: without SRUN_CPUS_PER_TASK a
    site that binds tasks to cores may run all of torchrun's processes on one core.
    The local cluster does not bind (task/none), so the job outputs cannot show it: check here."""
    text = path.read_text()
    first_srun = re.search(r"^srun ", text, re.M)
    if first_srun:
        export = text.find('export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"')
        assert 0 <= export < first_srun.start(), f"{path.name}: srun without SRUN_CPUS_PER_TASK"


def submitted_by_notebooks():
    found = set()
    for nb in ROOT.glob("notebooks/*.ipynb"):
        for cell in json.loads(nb.read_text())["cells"]:
            # submit(), or start() + wait_job() with the output asserted in the same cell
            found |= set(re.findall(r"(?:submit|start)\(\s*[\"'](slurm/[\w.-]+\.sbatch)", "".join(cell["source"])))
            if cell["cell_type"] == "code":  # plain sbatch, shown as the reader types it (run("sbatch ..."))
                found |= set(re.findall(r"run\(\s*[\"']sbatch (slurm/[\w.-]+\.sbatch)", "".join(cell["source"])))
                # a sweep of jobs of one file (step 14: run("python code/14_sweep.py --sbatch FILE ..."))
                found |= set(re.findall(r"run\(\s*[\"']python code/\d\d_sweep\.py --sbatch (slurm/[\w.-]+\.sbatch)",
                                        "".join(cell["source"])))
    for test in ROOT.glob("tests/test_*.py"):  # a test that submits a file and checks its output
        found |= set(re.findall(r"submit\(\s*[\"'](slurm/[\w.-]+\.sbatch)", test.read_text()))
    return found


def test_every_sbatch_file_is_executed_by_the_tests():
    """Each sbatch file is submitted by a notebook (nbval compares the job's output) or by
    tests/test_sbatch.py (which checks its output)."""
    from test_sbatch import EXPECTED
    run = submitted_by_notebooks() | set(EXPECTED)
    missing = [p.relative_to(ROOT).as_posix() for p in SBATCH if p.relative_to(ROOT).as_posix() not in run]
    assert not missing, f"never submitted in the tests: {missing}"
    assert all((ROOT / p).exists() for p in run)


def test_every_step_has_its_four_files():
    steps = {p.name[:2] for p in ROOT.glob("docs/[0-9][0-9]-*.md")}
    assert steps
    for n in steps:
        assert list(ROOT.glob(f"notebooks/{n}-*.ipynb")), f"step {n}: no notebook"
        assert list(ROOT.glob(f"code/{n}_*.py")), f"step {n}: no script"
        assert list(ROOT.glob(f"slurm/{n}-*.sbatch")), f"step {n}: no sbatch file"
