"""Where a notebook's local runs go: on the CPU, whatever GPUs the session has.

Roihu's web Jupyter on gputest gives the session a GH200. A run of two processes that saw it
would pick nccl (setup_distributed) and stop on local rank 1. run() hides every GPU from the
command, and says so in the first line it prints in a notebook.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
import jobs  # noqa: E402

SHOW = "python -c \"import os; print([os.environ.get(v) for v in ('CUDA_VISIBLE_DEVICES', 'HIP_VISIBLE_DEVICES', 'ROCR_VISIBLE_DEVICES')])\""


def test_a_session_with_a_gpu_runs_locally_on_the_cpu(monkeypatch, capsys):
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.setenv(name, "0")  # what Slurm gives a session with one GPU
    monkeypatch.setattr(jobs, "_told", False)
    out = jobs.run(SHOW)
    assert out == "['', '', '']\n", out  # no GPU visible: torch.cuda.is_available() is False
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("(local runs: this machine's CPU (gloo), whatever GPUs it has;"), first


def test_the_first_line_says_whether_the_path_is_pinned(monkeypatch):
    monkeypatch.setattr(jobs.platform, "machine", lambda: "aarch64")
    assert jobs.pinned_cpu_path() == {}
    assert jobs.where_local_runs_go().endswith("aarch64: the last digits may differ from the pages'")
    monkeypatch.setattr(jobs.platform, "machine", lambda: "x86_64")
    assert jobs.pinned_cpu_path()["ATEN_CPU_CAPABILITY"] == "avx2"
    assert "numeric path pinned" in jobs.where_local_runs_go()


def test_the_cluster_user_gets_none_of_roots_cache_folders(monkeypatch):
    """torch.compile in the tests' own (root) process sets TORCHINDUCTOR_CACHE_DIR to root's folder;
    a notebook kernel or a job of the cluster user that inherited it could not compile (CI: step
    12's compiled runs failed after another test compiled). tools/kernel-as-user and
    cluster_user.submit_as_cluster_user leave these variables out."""
    import os
    import re
    import shutil
    import subprocess
    import tempfile

    import pytest

    from practice_cluster import cluster_user
    if os.geteuid() != 0:
        pytest.skip("needs root to act as the cluster user")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_root")
    cluster_user.reachable_python()  # o+x on the folders above the repository
    (ROOT / "runs").mkdir(exist_ok=True)
    (ROOT / "runs").chmod((ROOT / "runs").stat().st_mode | 0o011)
    tmp_path = Path(tempfile.mkdtemp(dir=ROOT / "runs"))  # (not /tmp/pytest-of-root: root's only)
    tmp_path.chmod(0o755)
    # A stand-in "python" that prints what the kernel would get, started as kernel-as-user starts one.
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho \"user=$(id -un) cache=${TORCHINDUCTOR_CACHE_DIR:-unset}\"\n")
    fake.chmod(0o755)
    (tmp_path / "copy").mkdir()
    connection = tmp_path / "connection.json"
    connection.write_text("{}")
    r = subprocess.run([str(ROOT / "tools" / "kernel-as-user"), cluster_user.CLUSTER_USER, str(tmp_path / "copy"),
                        str(tmp_path), str(fake), str(connection)], cwd=tmp_path, capture_output=True, text=True)
    shutil.rmtree(tmp_path)
    assert r.stdout == f"user={cluster_user.CLUSTER_USER} cache=unset\n", (r.stdout, r.stderr)
    # the two lists are one: the batch of variables kernel-as-user unsets is cluster_user's
    unset = re.findall(r"-u (\w+)", (ROOT / "tools" / "kernel-as-user").read_text())
    assert cluster_user.ROOTS_OWN[1::2] == unset == ["TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR"]
