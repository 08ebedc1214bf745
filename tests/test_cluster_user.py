"""The notebooks as a cluster user meets them: an ordinary user whose software comes
only from the cluster's module, the setup of tools/cluster-setup.sh, nbval with the kernel it
registers; and tools/jobs.py's real-cluster path (a job that queues behind another)."""
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import jobs
from practice_cluster import config
from practice_cluster.cluster_user import reachable_python

ROOT = Path(__file__).resolve().parent.parent
# Run here only, as the cluster user, not a second time by the root run (conftest.py leaves them out).
AS_CLUSTER_USER = ["notebooks/01-ddp.ipynb", "notebooks/05-multinode.ipynb"]

TINY = """#!/bin/bash
#SBATCH --job-name=queue-view
#SBATCH --account=project_462000000
#SBATCH --partition=small-g
#SBATCH --ntasks=1
#SBATCH --time=00:02:00
echo "queue view: the job ran"
"""


def test_a_job_that_queues_shows_why_and_is_read_later(cluster, tmp_path, monkeypatch, capsys):
    """jobs.submit() as on Roihu or LUMI: no account -> one line before submitting; a job held
    behind another -> squeue's state and reason, one line updated in place; the wait limit ->
    how to pick it up; job_result(id) -> its output once it ran."""
    script = tmp_path / "queue-view.sbatch"
    script.write_text(TINY)
    monkeypatch.setenv("JOBS_AS_REAL_CLUSTER", "1")
    monkeypatch.setenv("JOBS_WAIT_LIMIT", "3")
    monkeypatch.delenv("SBATCH_ACCOUNT", raising=False)
    with pytest.raises(SystemExit, match=r"^error: no project account for the job \(.*names the placeholder "
                       r"project_462000000\): run %env SBATCH_ACCOUNT=project_<number> in a cell"):
        jobs.submit(str(script))
    assert "sbatch" not in capsys.readouterr().out  # refused before submitting

    monkeypatch.setenv("SBATCH_ACCOUNT", "project_462000000")  # a real project here
    env = {**os.environ, **cluster}
    blocker = subprocess.run(["sbatch", "--parsable", "--hold", "--output=/dev/null", str(script)], env=env,
                             capture_output=True, text=True, check=True).stdout.strip()
    job = None
    try:
        with pytest.raises(SystemExit, match=r"job \d+ is still PENDING: read it later with job_result"):
            jobs.submit(str(script), f"--dependency=afterok:{blocker}")
        out = capsys.readouterr().out
        assert "cluster practice, partition small-g, account project_462000000 (from SBATCH_ACCOUNT)\n" in out, out
        job = re.search(r"job (\d+): PENDING \(Dependency\), 0:0\d waited", out).group(1)
        status_lines = [l for l in out.split("\n") if "PENDING (Dependency)" in l]
        assert len(status_lines) == 1 and status_lines[0].count("\r") >= 1, out  # updated, not repeated
        assert "stopped waiting after 3 s (JOBS_WAIT_LIMIT)" in out and f'job_result("{job}")' in out, out

        assert jobs.job_result(job) is None
        assert f"job {job} is PENDING (Dependency): not finished yet" in capsys.readouterr().out
        subprocess.run(["scontrol", "release", blocker], env=env, check=True)
        deadline = time.monotonic() + 240  # others' jobs may hold the nodes a while
        while jobs._squeue(job)[0] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert jobs.job_result(job) == "queue view: the job ran\n"
        assert f"job {job} ended with exit code 0; its output:\n" in capsys.readouterr().out
    finally:
        subprocess.run(["scancel", blocker, *([job] if job else [])], env=env)


def test_the_runs_tmpdir_serves_root_and_the_cluster_user_on_a_lumi_node(cluster):
    """A LUMI node has a /tmp of its own, and the run's TMPDIR (conftest.py) is made there too: a
    job of root's, then one of the cluster user's, on the same node, both write in it, and
    neither's output has slurmstepd's "error: TMPDIR [...] is not writeable" (the first job to
    need the folder made it, mode 700, and a job of the other user got that line)."""
    from practice_cluster.cluster_user import submit_as_cluster_user
    tmpdir = os.environ["DDP_TESTS_TMPDIR"]
    script = Path(tmpdir) / f"tmpdir-{os.getpid()}.sbatch"  # where the cluster user reads it too
    script.write_text("#!/bin/bash\n#SBATCH --account=project_462000000 --partition=small-g\n"
                      "#SBATCH --nodelist=nid005000 --ntasks=1 --time=00:02:00\n"
                      'touch "$TMPDIR/by-$(id -un)-$SLURM_JOB_ID" && echo "$(id -un) wrote in $TMPDIR"\n')
    try:
        assert jobs.submit(str(script)) == f"root wrote in {tmpdir}\n"
        printed = submit_as_cluster_user(str(script))
        assert printed.endswith(f"; its output:\n{config.CLUSTER_USER} wrote in {tmpdir}\n"), printed
    finally:
        script.unlink()


def test_setup_in_lumis_container(cluster):
    """On a LUMI node of the practice cluster (its /appl/local/laifs: the AI Factory module and
    image stand-ins) the setup builds the venv in the container and a kernel that starts there."""
    # (in runs/: a LUMI node has a /tmp of its own)
    venv, home = ROOT / "runs" / f"lumi-venv-{os.getpid()}", ROOT / "runs" / f"lumi-home-{os.getpid()}"
    try:
        r = subprocess.run(f"srun -A project_462000000 -p small-g -n1 -t 2 bash -c 'export HOME={home}; "
                           f"bash tools/cluster-setup.sh {venv} && echo --- && bash tools/cluster-setup.sh {venv}'",
                           shell=True, cwd=ROOT, env={**os.environ, **cluster}, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=120)
        assert r.returncode == 0, r.stdout
        first, again = r.stdout.split("---\n")
        assert "site: lumi (nid00500" in first and "PyTorch 2.10.0 from container /appl/local/laifs/containers/" in first
        assert "made the venv" in first and "nothing to do" in again, r.stdout
        kernel = (venv / "bin" / "ddp-tutorial-kernel").read_text()
        assert "module load lumi-aif-singularity-bindings\nexec singularity exec /appl/local/laifs/" in kernel, kernel
        assert str(venv) in (home / ".local/share/jupyter/kernels/ddp-tutorial/kernel.json").read_text()
    finally:
        shutil.rmtree(venv, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def _ordinary_user(cluster):
    """tutor (config.CLUSTER_USER: the practice cluster made it, with root's projects),
    able to reach the project's Python."""
    assert config.CLUSTER_USER == "tutor"
    assert subprocess.run(["id", "tutor"], capture_output=True).returncode == 0
    reachable_python()


def test_notebooks_run_as_a_cluster_user(cluster):
    """A login shell of tutor: only the practice cluster's environment file and its module
    (no project .venv on PATH), the setup run twice (the second changes nothing), a full home
    reported in one line, then steps 1 and 5 under nbval with the kernel the setup registered."""
    if shutil.which("runuser") is None or os.geteuid() != 0:
        pytest.skip("needs root and runuser to act as an ordinary user")
    _ordinary_user(cluster)
    copy = Path(tempfile.mkdtemp(prefix="ddp-tutor-"))
    full = copy / "full-home"
    try:
        copy.chmod(0o755)
        for part in ("code", "slurm", "tools"):
            shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
        (copy / "notebooks").mkdir()
        (copy / "tests").mkdir()
        for nb in AS_CLUSTER_USER:
            shutil.copy(ROOT / nb, copy / nb)
        shutil.copy(ROOT / "tests" / "sanitize.cfg", copy / "tests")
        full.mkdir()  # a home directory with no space left, for the setup's one-line report
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k,mode=1777", "tmpfs", str(full)]).returncode == 0
        if mounted:
            subprocess.run(["dd", "if=/dev/zero", f"of={full}/fill", "bs=4k", "count=8"], capture_output=True)
        subprocess.run(["chown", "-R", "tutor:", str(copy)], check=True)
        venv = copy / "projappl" / "ddp-env"  # the project's application directory on Roihu
        script = f"""
            source {config.STATE / 'env.sh'}  # the cluster's Slurm and module path, as a login gives
            echo "PATH before: $PATH"
            export TMPDIR={os.environ.get("TMPDIR", "/tmp")}  # the run's own (conftest.py), as a login node may set one
            cd {copy}
            bash tools/cluster-setup.sh {venv} && echo "--- again" && bash tools/cluster-setup.sh {venv} || exit 1
            {'HOME=' + str(full) + ' KERNEL_NAME=full bash tools/cluster-setup.sh ' + str(venv) + '; echo "full home: $?"' if mounted else ''}
            echo "--- nbval"
            LOCAL_SLURM=off {venv}/bin/python -m pytest -p no:cacheprovider -o addopts= -q --nbval \\
                --nbval-kernel-name ddp-tutorial --nbval-sanitize-with tests/sanitize.cfg \\
                --nbval-cell-timeout=300 {' '.join(AS_CLUSTER_USER)}
        """
        r = subprocess.run(["runuser", "-l", "tutor", "-s", "/bin/bash", "-c", script], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=800)
        out = r.stdout
        assert r.returncode == 0, out[-6000:]
        before = re.search(r"PATH before: (.*)", out).group(1)
        assert ".venv" not in before and "ddp-tutorial-slurm" not in before, before
        first, rest = out.split("--- again", 1)
        assert "made the venv" in first and "(--system-site-packages, on module python-pytorch)" in first, out
        assert "registered the Jupyter kernel 'ddp-tutorial'" in first, out
        again = rest.split("--- nbval")[0]
        assert "nothing to do:" in again and "made the venv" not in again, again
        if mounted:
            assert re.search(r"(?m)^error: no space left in \S+ \(0 free\): your home directory is full: "
                             r".*JUPYTER_DATA_DIR=.*\nfull home: 1$", again), again
        spec = Path("/home/tutor/.local/share/jupyter/kernels/ddp-tutorial/kernel.json").read_text()
        assert f'"{venv}/bin/ddp-tutorial-kernel"' in spec, spec
        assert re.search(r"(\d+) passed", out) and " failed" not in out.split("--- nbval")[1], out[-6000:]
    finally:
        subprocess.run(["umount", str(full)], capture_output=True)
        shutil.rmtree(copy, ignore_errors=True)
