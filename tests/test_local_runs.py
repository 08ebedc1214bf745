"""Where a notebook's local runs go (issue 37, E2): on the CPU, whatever GPUs the session has.

Roihu's web Jupyter on gputest gives the session a GH200. A run of two processes that saw it
would pick nccl (setup_distributed) and stop on local rank 1. run() hides every GPU from the
command, and says so in the first line it prints in a notebook.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
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
