"""Start the local Slurm cluster before anything runs (nbval's kernels inherit its env), and
run the notebooks as the cluster's ordinary user.

At the repository root so that it applies to every pytest run, e.g. a single notebook.
"""
import json
import os
import shutil
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
    # Every run the tests make, on the CPU path that the stored outputs come from, on any x86-64 machine.
    import jobs
    os.environ.update(jobs.pinned_cpu_path())
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
    if _user_copy is not None:
        shutil.rmtree(_user_copy, ignore_errors=True)
    if _started:
        local_slurm.stop(quiet=True)


# Steps 1 and 5 run as a cluster user would run them (tests/test_cluster_user.py: an ordinary
# user, the kernel that tools/cluster-setup.sh registers), not a second time as root; named on
# the command line (pytest notebooks/01-ddp.ipynb) they run here as well.
AS_CLUSTER_USER = {ROOT / "notebooks" / "01-ddp.ipynb", ROOT / "notebooks" / "05-multinode.ipynb"}


# Every other notebook runs as the practice cluster's ordinary user (local_slurm.CLUSTER_USER),
# in that user's copy of the repository, and so do the jobs it submits.
AS_ROOT = set()
# Except step 11's where needed: its py-spy reads another process's memory, which an ordinary
# user may only where Linux's Yama allows it (ptrace_scope 0, or no Yama); elsewhere, as root.
_yama = Path("/proc/sys/kernel/yama/ptrace_scope")
if _yama.exists() and _yama.read_text().strip() != "0":
    AS_ROOT.add(ROOT / "notebooks" / "11-debugging.ipynb")
KERNEL = "as-cluster-user"
_user_copy = None


def reachable_python():
    """The project's Python (this run's), which other users may run: o+x on every folder above
    the venv's python and the interpreter it links to."""
    python = Path(sys.executable)
    for folder in [*python.parents, *Path(os.path.realpath(python)).parents]:
        if not folder.stat().st_mode & 0o001:
            folder.chmod(folder.stat().st_mode | 0o001)
    return python


def user_copy():
    """runs/as-<user>-<worker>/: the repository as the user's own copy (the notebooks write
    runs/, logs/ and figures there), and the kernel spec that starts a kernel in it as that user
    (tools/kernel-as-user). Under runs/, not /tmp: a LUMI node has a /tmp of its own."""
    global _user_copy
    if _user_copy is None:
        user = local_slurm.CLUSTER_USER
        copy = ROOT / "runs" / f"as-{user}-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
        python = reachable_python()  # o+x on the folders above the repository too
        copy.parent.mkdir(exist_ok=True)
        copy.parent.chmod(copy.parent.stat().st_mode | 0o011)  # runs/, whatever the umask
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(ROOT, copy, symlinks=True, ignore=shutil.ignore_patterns(
            ".git", ".venv", ".whl", "site", "runs", "logs", "data", "__pycache__", ".pytest_cache", ".cache"))
        spec = copy / ".jupyter" / "kernels" / KERNEL
        spec.mkdir(parents=True)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [str(ROOT / "tools" / "kernel-as-user"), user, str(copy), str(ROOT), str(python), "{connection_file}"],
            "display_name": f"Python (as {user})", "language": "python"}))
        subprocess.run(["chown", "-R", f"{user}:", str(copy)], check=True)
        os.environ["JUPYTER_PATH"] = str(copy / ".jupyter")
        _user_copy = copy
    return _user_copy


def stored_output(notebook, tag):
    """The text the notebook stored for its cell tagged `tag` (what nbval compares)."""
    nb = json.loads((ROOT / "notebooks" / notebook).read_text())
    cell = next(c for c in nb["cells"] if tag in c.get("metadata", {}).get("tags", []))
    return "".join("".join(o.get("text", "")) for o in cell["outputs"] if o.get("output_type") == "stream")


# Root's cache folders, which torch.compile in the tests' own process sets in its environment
# (TORCHINDUCTOR_CACHE_DIR=/tmp/torchinductor_root): not passed on to the cluster user, who cannot
# write there (the same list as tools/kernel-as-user).
ROOTS_OWN = ["-u", "TORCHINDUCTOR_CACHE_DIR", "-u", "TRITON_CACHE_DIR", "-u", "TORCH_EXTENSIONS_DIR"]


def submit_as_cluster_user(path, *options, timeout=900):
    """tools/jobs.py's submit(path, *options), run as the cluster user from their copy of the
    repository; returns what it printed (the job's output after a line on how it ended). Not
    root: as this user, from here."""
    if os.geteuid() != 0:
        import jobs
        return jobs.submit(path, *options)
    user, copy = local_slurm.CLUSTER_USER, user_copy()
    home = subprocess.run(["getent", "passwd", user], capture_output=True, text=True).stdout.split(":")[5]
    code = "import sys; sys.path.insert(0, 'tools'); from jobs import submit; submit(*sys.argv[1:])"
    r = subprocess.run(["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "env", *ROOTS_OWN, f"HOME={home}",
                        f"USER={user}", f"LOGNAME={user}", sys.executable, "-c", code, path, *options],
                       cwd=copy, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{path} as {user}: exit code {r.returncode}\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
    return r.stdout


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before a notebook's kernel starts: the cluster user's kernel, unless it must be root's."""
    if item.path.suffix != ".ipynb" or os.geteuid() != 0 or not local_slurm.running():
        return
    as_user = item.path not in AS_ROOT
    if as_user:
        user_copy()
    item.config.option.nbval_current_env = not as_user
    item.config.option.nbval_kernel_name = KERNEL if as_user else None


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
# stays on one worker, in order. The longest files start first (their durations in
# benchmarks/suite-time.md), so that the run ends on short ones and no long one is left to run alone
# on one core at the end (take-home, started last in one run, ran 100 s alone); the clusters
# notebook, whose dev-g cell needs LUMI's dev-g without other jobs of the same user (the per-user
# limits are its lesson), comes last, long after test_sbatch and your-own-script (the cluster
# user's other dev-g jobs); its cell also waits until none is left.
FIRST = ["tests/test_sbatch.py", "tests/test_local_slurm.py", "notebooks/09-reliability.ipynb",
         "notebooks/your-own-script.ipynb", "notebooks/12-fsdp2.ipynb", "tests/test_cluster_user.py",
         "notebooks/03-lr-scaling.ipynb", "notebooks/13-data.ipynb", "tests/test_browser.py",
         "notebooks/11-debugging.ipynb", "tests/test_reliability.py", "notebooks/06-deepspeed.ipynb",
         "notebooks/take-home.ipynb", "notebooks/07-lightning.ipynb", "notebooks/15-two-dimensions.ipynb",
         "notebooks/04-sharding.ipynb", "notebooks/14-profiling.ipynb"]
LAST = ["notebooks/clusters.ipynb"]


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(FIRST + [None] + LAST)}
    where = lambda item: str(Path(str(item.path)).relative_to(ROOT))  # noqa: E731
    items.sort(key=lambda item: rank.get(where(item), rank[None]))  # stable: each file keeps its order
