"""Run as the practice cluster's ordinary user (config.CLUSTER_USER), as readers run on a cluster:
the notebooks (a Jupyter kernel started as that user, tools/kernel-as-user) and the jobs they
submit, from that user's own copy of the repository. The tests (conftest.py) and
tools/execute_notebooks.py both run notebooks this way.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .config import CLUSTER_USER

ROOT = Path(__file__).resolve().parents[2]
KERNEL_AS_USER = ROOT / "tools" / "kernel-as-user"
KERNEL = "as-cluster-user"  # the kernel spec's name, in the user's copy

# Every notebook runs as the cluster user, except these, as root: step 11's where needed, whose
# py-spy reads another process's memory, which an ordinary user may only where Linux's Yama
# allows it (ptrace_scope 0, or no Yama).
AS_ROOT = set()
_yama = Path("/proc/sys/kernel/yama/ptrace_scope")
if _yama.exists() and _yama.read_text().strip() != "0":
    AS_ROOT.add(ROOT / "notebooks" / "11-debugging.ipynb")

# Root's cache folders, which torch.compile in the tests' own process sets in its environment
# (TORCHINDUCTOR_CACHE_DIR=/tmp/torchinductor_root): not passed on to the cluster user, who cannot
# write there (the same list as tools/kernel-as-user).
ROOTS_OWN = ["-u", "TORCHINDUCTOR_CACHE_DIR", "-u", "TRITON_CACHE_DIR", "-u", "TORCH_EXTENSIONS_DIR"]

_copy = None  # this process's copy of the repository, once made


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
    global _copy
    if _copy is None:
        user = CLUSTER_USER
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
            "argv": [str(KERNEL_AS_USER), user, str(copy), str(ROOT), str(python), "{connection_file}"],
            "display_name": f"Python (as {user})", "language": "python"}))
        subprocess.run(["chown", "-R", f"{user}:", str(copy)], check=True)
        os.environ["JUPYTER_PATH"] = str(copy / ".jupyter")
        _copy = copy
    return _copy


def remove_user_copy():
    """Remove the copy user_copy() made, if it made one."""
    global _copy
    if _copy is not None:
        shutil.rmtree(_copy, ignore_errors=True)
        _copy = None


def submit_as_cluster_user(path, *options, timeout=900):
    """tools/jobs.py's submit(path, *options), run as the cluster user from their copy of the
    repository; returns what it printed (the job's output after a line on how it ended). Not
    root: as this user, from here."""
    if os.geteuid() != 0:
        import jobs
        return jobs.submit(path, *options)
    user, copy = CLUSTER_USER, user_copy()
    home = subprocess.run(["getent", "passwd", user], capture_output=True, text=True).stdout.split(":")[5]
    code = "import sys; sys.path.insert(0, 'tools'); from jobs import submit; submit(*sys.argv[1:])"
    r = subprocess.run(["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "env", *ROOTS_OWN, f"HOME={home}",
                        f"USER={user}", f"LOGNAME={user}", sys.executable, "-c", code, path, *options],
                       cwd=copy, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{path} as {user}: exit code {r.returncode}\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
    return r.stdout
