"""Execute notebooks in place exactly as the tests run them: on the practice cluster, as its
ordinary user in that user's copy of the repository (root where practice_cluster/cluster_user.py
says so), on the pinned CPU path. Their stored outputs are what nbval then compares.

    .venv/bin/python tools/execute_notebooks.py notebooks/02-equivalence.ipynb [...]

The practice cluster must be running (make cluster-start).
"""
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "code")]

import nbformat  # noqa: E402
from nbclient import NotebookClient  # noqa: E402

import jobs  # noqa: E402
from practice_cluster import cluster_user, daemons  # noqa: E402


def main(paths):
    if not daemons.running():
        raise SystemExit("error: the practice cluster is not running: make cluster-start")
    os.environ.update(daemons.env())
    os.environ.update(jobs.pinned_cpu_path())
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    os.environ.setdefault("PYTEST_XDIST_WORKER", f"exec-{os.getpid()}")  # a copy of its own (cluster_user.user_copy)
    for path in map(lambda p: Path(p).resolve(), paths):
        as_user = os.geteuid() == 0 and path not in cluster_user.AS_ROOT
        copy = cluster_user.user_copy() if as_user else ROOT
        nb = nbformat.read(path, as_version=4)
        start, began = time.monotonic(), time.time()
        for cell in nb.cells:  # no timestamps: a re-run with the same outputs is no diff
            cell.metadata.pop("execution", None)
        NotebookClient(nb, timeout=600, kernel_name=cluster_user.KERNEL if as_user else "python3", record_timing=False,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        nbformat.write(nb, path)
        for figure in (copy / "docs").glob("*.png") if copy != ROOT else ():  # the figures it drew
            if figure.stat().st_mtime >= began:
                shutil.copyfile(figure, ROOT / "docs" / figure.name)
                print(f"docs/{figure.name}: drawn again", flush=True)
        print(f"{path.relative_to(ROOT)}: executed {'as ' + cluster_user.CLUSTER_USER if as_user else 'as root'}"
              f" in {time.monotonic() - start:.0f} s", flush=True)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    finally:
        cluster_user.remove_user_copy()
