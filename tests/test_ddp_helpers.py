"""The shared helpers in code/ddp_helpers.py: data, model, set-up and their error messages."""
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import ddp_helpers as h

ROOT = Path(__file__).resolve().parent.parent


def test_digits_split_sizes_and_shapes():
    train, test = h.load_dataset("digits")
    assert (len(train), len(test)) == (1440, 357)
    x, y = train[0]
    assert x.shape == (1, 8, 8) and x.dtype == torch.float32 and 0 <= int(y) <= 9
    # the split is fixed: the same for every process and every run
    assert torch.equal(h.load_dataset("digits")[0].tensors[0], train.tensors[0])


@pytest.mark.parametrize("world", [1, 2, 3, 4, 5, 6, 8])
def test_train_set_splits_evenly(world):
    assert h.N_TRAIN % world == 0


def test_mnist_missing_names_what_to_fetch(tmp_path):
    with pytest.raises(SystemExit, match=r"MNIST not found under .*datasets.MNIST\(.*download=True\)"):
        h.load_dataset("mnist", str(tmp_path))


def _write_idx(path, magic, dims, payload):
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + payload)


def test_mnist_real_torchvision_path(tmp_path):
    """The real torchvision MNIST class reads files in MNIST's own format (made here, tiny)."""
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for split, n in [("train", 6), ("t10k", 4)]:
        _write_idx(raw / f"{split}-images-idx3-ubyte", 2051, [n, 28, 28], bytes(range(256)) * (n * 784 // 256) + bytes(n * 784 % 256))
        _write_idx(raw / f"{split}-labels-idx1-ubyte", 2049, [n], bytes(range(n)))
    train, test = h.load_dataset("mnist", str(tmp_path))
    assert (len(train), len(test)) == (6, 4)
    x, y = train[3]
    assert x.shape == (1, 28, 28) and y == 3
    assert h.ConvNet(image_size=28)(x[None]).shape == (1, 10)


def test_unknown_dataset():
    with pytest.raises(SystemExit, match="unknown dataset 'cifar'"):
        h.load_dataset("cifar")


@pytest.mark.parametrize("batchnorm", [False, True])
def test_convnet_shapes(batchnorm):
    assert h.ConvNet(8, batchnorm)(torch.zeros(5, 1, 8, 8)).shape == (5, 10)


def test_batch_not_divisible_by_world_size():
    assert h.per_rank_batch(96, 4) == 24
    with pytest.raises(SystemExit, match="batch size 96 is not divisible by world size 5: use a multiple of 5"):
        h.per_rank_batch(96, 5)
    assert h.per_rank_batch(96, 4, accum=2) == 12
    with pytest.raises(SystemExit, match="batch size 100 is not divisible by 2 processes x 3 "
                                         "accumulation steps: use a multiple of 6"):
        h.per_rank_batch(100, 2, accum=3)


def _setup_in_subprocess(env, backend="auto"):
    """setup_distributed() in a fresh Python with exactly `env` as its environment."""
    code = f"import sys; sys.path.insert(0, 'code'); import ddp_helpers as h; h.setup_distributed({backend!r})"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=h.__file__.rsplit("/code/", 1)[0], timeout=60)


def test_without_launcher_says_how_to_launch():
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "RANK", "WORLD_SIZE")}
    r = _setup_in_subprocess(env)
    assert r.returncode == 1 and "LOCAL_RANK is not set: start this script with torchrun" in r.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_nccl_without_gpus_is_a_clear_error():
    r = _setup_in_subprocess({**os.environ, "LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1"}, backend="nccl")
    assert r.returncode == 1
    assert "error: backend nccl needs GPUs, but this node has none visible: use gloo on CPU nodes" in r.stderr


def test_one_gpu_per_task_names_the_visible_gpus(monkeypatch):
    """--gpus-per-task=1 shows each task one GPU: local rank 1 must not be told only to start fewer processes."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(SystemExit, match=r"only 1 are visible to this process: keep all of the node's GPUs "
                                         r"visible to every task \(--gres or --gpus-per-node, not --gpus-per-task\)"):
        h.setup_distributed("nccl")


def test_sklearn_missing_is_one_line(monkeypatch):
    real = h.importlib.util.find_spec
    monkeypatch.setattr(h.importlib.util, "find_spec", lambda name: None if name == "sklearn" else real(name))
    with pytest.raises(SystemExit, match="error: the digits data set comes with scikit-learn"):
        h.load_dataset("digits")


def test_print0_without_process_group(capsys):
    h.print0("hello")
    assert capsys.readouterr().out == "hello\n"


def test_digits_are_sklearns_load_digits():
    """load_dataset reads sklearn's bundled file directly; it must equal load_digits()."""
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    train, test = h.load_dataset("digits")
    xs = torch.cat([train.tensors[0], test.tensors[0]]).flatten(1)
    ys = torch.cat([train.tensors[1], test.tensors[1]])
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1234))
    expected = torch.tensor(x, dtype=torch.float32)[order] / 16.0
    expected = (expected - expected.mean()) / expected.std()
    assert torch.equal(xs, expected) and torch.equal(ys, torch.tensor(y)[order])


# --- srun without torchrun: Slurm's variables only --------------------------------------------
def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_srun_tasks(argv, ntasks=2, master=True, timeout=300):
    """Start `ntasks` processes the way srun does without torchrun: each gets only Slurm's
    numbering (SLURM_STEP_ID, SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS), plus MASTER_ADDR and
    MASTER_PORT as the batch script exports them. Returns [(exit code, output)] by task."""
    drop = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
            "MASTER_PORT", "TORCHELASTIC_RUN_ID")
    base = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("SLURM_")}
    base.update(OMP_NUM_THREADS="1", SLURM_STEP_ID="0", SLURM_NTASKS=str(ntasks))
    if master:
        base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    procs = [subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env={**base, "SLURM_PROCID": str(t), "SLURM_LOCALID": str(t)})
             for t in range(ntasks)]
    return [(p.wait(timeout=timeout), p.stdout.read()) for p in procs]


def test_srun_without_torchrun_sets_rank_and_world():
    code = ("import sys; sys.path.insert(0, 'code'); import torch, torch.distributed as dist; "
            "import ddp_helpers as h; rank, local, world, _ = h.setup_distributed(); "
            "t = torch.tensor([rank + 1.0]); dist.all_reduce(t); "
            "print(f'rank {rank} local {local} world {world} sum {t.item():g}', flush=True); h.cleanup()")
    results = _as_srun_tasks(["-c", code])
    assert [rc for rc, _ in results] == [0, 0], results
    ours = [[line for line in out.splitlines() if not line.startswith("[Gloo]")] for _, out in results]  # torch 2.10
    assert ours == [["rank 0 local 0 world 2 sum 3"], ["rank 1 local 1 world 2 sum 3"]], results


def test_srun_without_master_addr_is_one_clear_line():
    code = "import sys; sys.path.insert(0, 'code'); import ddp_helpers as h; h.setup_distributed()"
    for rc, out in _as_srun_tasks(["-c", code], master=False):
        assert rc == 1 and out.strip().startswith("error: started by srun without torchrun, but "
                                                  "MASTER_ADDR/MASTER_PORT are not set"), out
        assert len(out.strip().splitlines()) == 1, out


@pytest.mark.parametrize("script", ["code/01_ddp.py", "code/06_deepspeed.py"])
def test_scripts_start_under_srun_without_torchrun(script):
    """The scripts whose header says 'torchrun or srun' really start under plain srun."""
    results = _as_srun_tasks([script, "--epochs", "1"])
    assert [rc for rc, _ in results] == [0, 0], results
    assert "2 processes, backend gloo" in results[0][1], results[0][1]
