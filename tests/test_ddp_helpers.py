"""The shared helpers in code/ddp_helpers.py: data, model, set-up and their error messages."""
import os
import struct
import subprocess
import sys

import pytest
import torch

import ddp_helpers as h


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
    assert "backend nccl needs a GPU for local rank 0, but 0 are visible: use gloo" in r.stderr


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
