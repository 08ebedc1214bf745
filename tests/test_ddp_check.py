"""code/ddp_check.py's `workers` line, in this process (a gloo group of one): the notebook "Your
own script" shows its `ok` on the practice cluster; here the other two verdicts."""
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "code"))
import ddp_check  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # the loaders never start a worker here
@pytest.mark.parametrize("workers, cores, verdict, says", [
    (4, 2, "PROBLEM", "4 loader workers per rank, 2 cores per rank: more worker processes than cores; num_workers=1"),
    (0, 72, "note", "0 loader workers per rank, 72 cores per rank: the training process prepares every batch"),
    (7, 72, "ok", "7 loader workers per rank, 72 cores per rank"),
    (0, 1, "ok", "0 loader workers per rank, 1 core per rank"),
])
def test_workers_line(capsys, workers, cores, verdict, says):
    loader = DataLoader(TensorDataset(torch.zeros(4)), num_workers=workers)
    ddp_check._workers(loader, cores)
    line = capsys.readouterr().out
    assert line.startswith(f"ddp_check: workers  {verdict:<7} {says}"), line


# --- code/mnist_ddp.py's evaluation (issue 37 M3): every test image once, with any world size.
import mnist_ddp  # noqa: E402


class _Ranks:
    """test() on each rank of a world of `world` in turn, in this one process: the all-reduce
    adds the ranks' sums (one rank after another), as the real one does at once."""

    def __init__(self, monkeypatch, world):
        self.rank, self.world, self.sums = 0, world, []
        monkeypatch.setattr(mnist_ddp.dist, "get_rank", lambda *a: self.rank)
        monkeypatch.setattr(mnist_ddp.dist, "get_world_size", lambda *a: self.world)
        monkeypatch.setattr(mnist_ddp.dist, "all_reduce", lambda t, *a, **k: self.sums.append(t.clone()))


@pytest.mark.parametrize("world", [8, 16])
def test_mnist_ddp_tests_each_image_once(monkeypatch, world):
    """300 test images (the offline split) over 8 or 16 ranks: a padded DistributedSampler tests
    304, four of them twice; the script's unpadded shards test each once, and divide by 300."""
    images = TensorDataset(torch.zeros(300, 1, 28, 28), torch.arange(300) % 10)
    ranks, model = _Ranks(monkeypatch, world), mnist_ddp.Net()
    shards = []
    for ranks.rank in range(world):
        shard = mnist_ddp.unpadded_shard(images)
        shards += list(shard.indices)
        mnist_ddp.test(model, torch.device("cpu"), DataLoader(shard, batch_size=1000))
    assert sorted(shards) == list(range(300))
    padded = [len(DistributedSampler(images, world, r, shuffle=False)) for r in range(world)]
    assert sum(padded) == 304  # what the page says a DistributedSampler would test
    assert int(sum(ranks.sums)[2]) == 300  # the images tested, summed over the ranks
    source = Path(mnist_ddp.__file__).read_text()
    assert "DataLoader(unpadded_shard(dataset2)" in source and "DistributedSampler(dataset2" not in source
