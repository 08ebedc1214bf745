"""Start the local Slurm cluster before anything runs (nbval's kernels inherit its env), and
run the notebooks as the cluster's ordinary user (tools/practice_cluster/cluster_user.py).

At the repository root so that it applies to every pytest run, e.g. a single notebook.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT / "code"), str(ROOT / "tools")]
from practice_cluster import cluster_user, daemons  # noqa: E402

# This run's holder of the cluster (tools/practice_cluster/holders.py): the run stops the cluster
# at its end only if no one else uses it then, such as a hand that started it from another shell.
HOLDER = f"pytest-{os.getpid()}"
_held = False


def pytest_sessionstart(session):
    global _held
    # Every run the tests make, on the CPU path that the stored outputs come from, on any x86-64 machine.
    import jobs
    os.environ.update(jobs.pinned_cpu_path())
    if os.environ.get("LOCAL_SLURM") == "off":
        return _own_tmpdir()
    try:
        os.environ.update(daemons.start(venv_bin=str(Path(sys.executable).parent), holder=HOLDER, pid=os.getpid()))
        _held = True
    except daemons.ClusterError as e:
        pytest.exit(f"could not start the local Slurm cluster: {e}", returncode=3)
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    _own_tmpdir()


_tmpdir = None


def _own_tmpdir():
    """A temporary folder for this run, which the processes it starts (kernels, torchrun's
    agents and its log folders, multiprocessing's folders) use as TMPDIR and the run removes at
    its end: the suite leaves nothing in /tmp. Made after the cluster's daemons start, so that
    they do not inherit it; xdist's workers share the controller's. Made as well in the /tmp of
    each node that has its own (LUMI's), where root's and the cluster user's jobs both use it."""
    global _tmpdir
    if os.environ.get("DDP_TESTS_TMPDIR"):
        return
    _tmpdir = tempfile.mkdtemp(prefix="ddp-tests-")
    for d in _tmp_folders():
        d.mkdir(exist_ok=True)
        os.chmod(d, 0o1777)  # the cluster user's kernels and jobs write there too
    os.environ["TMPDIR"] = os.environ["DDP_TESTS_TMPDIR"] = _tmpdir


def _tmp_folders():
    """The run's TMPDIR on the host and in each LUMI node's own /tmp (while the cluster is up)."""
    return [Path(_tmpdir), *daemons.own_tmp_folders(Path(_tmpdir).name)]


def pytest_sessionfinish(session, exitstatus):
    cluster_user.remove_user_copy()
    if _held:
        daemons.release(HOLDER, quiet=True)
    if _tmpdir:
        for d in _tmp_folders():
            shutil.rmtree(d, ignore_errors=True)


# Steps 1 and 5 run as a cluster user would run them (tests/test_cluster_user.py: an ordinary
# user, the kernel that tools/cluster-setup.sh registers), not a second time as root; named on
# the command line (pytest notebooks/01-ddp.ipynb) they run here as well.
AS_CLUSTER_USER = {ROOT / "notebooks" / "01-ddp.ipynb", ROOT / "notebooks" / "05-multinode.ipynb"}


def stored_output(notebook, tag):
    """The text the notebook stored for its cell tagged `tag` (what nbval compares)."""
    nb = json.loads((ROOT / "notebooks" / notebook).read_text())
    cell = next(c for c in nb["cells"] if tag in c.get("metadata", {}).get("tags", []))
    return "".join("".join(o.get("text", "")) for o in cell["outputs"] if o.get("output_type") == "stream")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before a notebook's kernel starts: the cluster user's kernel (cluster_user.KERNEL, in the
    user's copy of the repository), unless it must be root's (cluster_user.AS_ROOT)."""
    if item.path.suffix != ".ipynb" or os.geteuid() != 0 or not daemons.running():
        return
    as_user = item.path not in cluster_user.AS_ROOT
    if as_user:
        cluster_user.user_copy()
    item.config.option.nbval_current_env = not as_user
    item.config.option.nbval_kernel_name = cluster_user.KERNEL if as_user else None


def pytest_ignore_collect(collection_path, config):
    named = {(config.invocation_params.dir / a.split("::")[0]).resolve() for a in config.invocation_params.args}
    return True if collection_path in AS_CLUSTER_USER and collection_path not in named else None


@pytest.fixture(scope="session")
def cluster():
    """The running local cluster's client environment (SLURM_CONF, MODULEPATH, ...)."""
    if os.environ.get("LOCAL_SLURM") == "off" or not daemons.running():
        pytest.skip("local Slurm cluster is off (LOCAL_SLURM=off)")
    return daemons.env()


@pytest.fixture(scope="session")
def site_dir(tmp_path_factory):
    """The site, built once per test run with `mkdocs build --strict` (warnings are errors): the
    first of the xdist workers that needs it builds it, the others wait for it and read it."""
    import filelock
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # set by xdist in each worker, the same for all
    shared = tmp_path_factory.getbasetemp()  # this run's; under xdist, its folder holds every worker's
    shared = shared.parent if run else shared
    out, done = shared / f"site-{run or 'main'}", shared / f"site-{run or 'main'}.built"
    with filelock.FileLock(str(shared / "site.lock")):
        if not done.exists():
            _build_site(out)
            done.touch()
    return out


def _build_site(out):
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stderr[-3000:]}"


# `make test` runs two files at a time (pytest-xdist, --dist loadfile): each notebook or test file
# stays on one worker, in order. The longest files start first, in the order of their summed
# durations in benchmarks/suite-time.json (the last measured run), so that the run ends on short
# ones and no long one is left to run alone on one core at the end; a file the benchmark does not
# know yet runs after those it knows. The clusters notebook, whose dev-g cell needs LUMI's dev-g
# without other jobs of the same user (the per-user limits are its lesson), comes last, long after
# test_sbatch and your-own-script (the cluster user's other dev-g jobs); its cell also waits until
# none is left.
LAST = ["notebooks/clusters.ipynb"]


def longest_first():
    """The files of the last measured run, longest first."""
    measured = json.loads((ROOT / "benchmarks" / "suite-time.json").read_text())["files"]
    return sorted((f for f in measured if f not in LAST), key=lambda f: -measured[f])


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(longest_first() + [None] + LAST)}
    where = lambda item: str(Path(str(item.path)).relative_to(ROOT))  # noqa: E731
    items.sort(key=lambda item: rank.get(where(item), rank[None]))  # stable: each file keeps its order
