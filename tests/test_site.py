"""The site builds strictly, every sbatch file passes shellcheck and is executed somewhere."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SBATCH = sorted(ROOT.glob("slurm/*.sbatch"))


def test_mkdocs_build_strict(site_dir):
    html = (site_dir / "01-ddp" / "index.html").read_text()
    assert "torch.distributed.run" in html  # the sbatch file, included by snippet
    assert '<span class="gi">+rank, local_rank, world_size, device = setup_distributed(' in html  # generated diff
    assert "<!-- diff" not in html and "<!-- output" not in html  # every directive expanded


def test_mkdocs_hook_fails_on_a_missing_tag(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import mkdocs_hooks

    class Cfg:
        config_file_path = str(ROOT / "mkdocs.yml")

    class Page:
        class file:
            src_path = "x.md"

    with pytest.raises(SystemExit, match="expected one cell tagged 'nope'"):
        mkdocs_hooks.on_page_markdown("<!-- output notebooks/01-ddp.ipynb nope -->", Page, Cfg, None)
    with pytest.raises(SystemExit, match="No such file"):
        mkdocs_hooks.on_page_markdown("<!-- diff code/nope.py code/01_ddp.py -->", Page, Cfg, None)
    out = mkdocs_hooks.on_page_markdown("<!-- diff code/01_single.py code/01_ddp.py -->", Page, Cfg, None)
    assert out.startswith("```diff\n--- code/01_single.py\n+++ code/01_ddp.py")


@pytest.mark.parametrize("path", SBATCH, ids=lambda p: p.name)
def test_shellcheck(path):
    if not shutil.which("shellcheck"):
        pytest.fail("shellcheck missing: apt-get install shellcheck (make test installs it)")
    r = subprocess.run(["shellcheck", "--shell=bash", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


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
            found |= set(re.findall(r"submit\(\s*[\"'](slurm/[\w.-]+\.sbatch)", "".join(cell["source"])))
            if cell["cell_type"] == "code":  # plain sbatch, shown as the reader types it (run("sbatch ..."))
                found |= set(re.findall(r"run\(\s*[\"']sbatch (slurm/[\w.-]+\.sbatch)", "".join(cell["source"])))
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
