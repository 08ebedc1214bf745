"""Start the local Slurm cluster before anything runs (nbval's kernels inherit its env).

At the repository root so that it applies to every pytest run, e.g. a single notebook.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT / "code"), str(ROOT / "tools")]
import local_slurm  # noqa: E402

_started = False


def pytest_sessionstart(session):
    global _started
    if os.environ.get("LOCAL_SLURM") == "off":
        return
    try:
        was_running = local_slurm.running()
        os.environ.update(local_slurm.start(venv_bin=str(Path(sys.executable).parent)))
        _started = not was_running  # a cluster someone else started is left running
    except local_slurm.ClusterError as e:
        pytest.exit(f"could not start the local Slurm cluster: {e}", returncode=3)
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"


def pytest_sessionfinish(session, exitstatus):
    if _started:
        local_slurm.stop(quiet=True)


# Steps 1 and 5 run as a cluster user would run them (tests/test_cluster_user.py: an ordinary
# user, the kernel that tools/cluster-setup.sh registers), not a second time as root; named on
# the command line (pytest notebooks/01-ddp.ipynb) they run here as well.
AS_CLUSTER_USER = {ROOT / "notebooks" / "01-ddp.ipynb", ROOT / "notebooks" / "05-multinode.ipynb"}


def pytest_ignore_collect(collection_path, config):
    named = {(config.invocation_params.dir / a.split("::")[0]).resolve() for a in config.invocation_params.args}
    return True if collection_path in AS_CLUSTER_USER and collection_path not in named else None


@pytest.fixture(scope="session")
def cluster():
    """The running local cluster's client environment (SLURM_CONF, MODULEPATH, ...)."""
    if os.environ.get("LOCAL_SLURM") == "off" or not local_slurm.running():
        pytest.skip("local Slurm cluster is off (LOCAL_SLURM=off)")
    return local_slurm.env()


@pytest.fixture(scope="session")
def site_dir(tmp_path_factory):
    """The site, built once per test run with `mkdocs build --strict` (warnings are errors)."""
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stderr[-3000:]}"
    return out


# `make test` runs two files at a time (pytest-xdist, --dist loadfile): each notebook or test file
# stays on one worker, in order. The longest files start first, so that no long one is left to run
# alone at the end; the clusters notebook, whose dev-g cell needs LUMI's dev-g without other jobs
# of the same user (the per-user limits are its lesson), comes last, long after test_sbatch and
# test_local_slurm (their dev-g jobs); its cell also waits until no such job is left.
FIRST = ["tests/test_sbatch.py", "tests/test_local_slurm.py", "notebooks/09-reliability.ipynb",
         "notebooks/your-own-script.ipynb", "notebooks/12-fsdp2.ipynb", "tests/test_browser.py",
         "tests/test_cluster_user.py", "notebooks/11-debugging.ipynb", "notebooks/03-lr-scaling.ipynb"]
LAST = ["notebooks/clusters.ipynb"]


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(FIRST + [None] + LAST)}
    where = lambda item: str(Path(str(item.path)).relative_to(ROOT))  # noqa: E731
    items.sort(key=lambda item: rank.get(where(item), rank[None]))  # stable: each file keeps its order
