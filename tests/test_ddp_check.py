"""code/ddp_check.py's `workers` line, in this process (a gloo group of one): the notebook "Your
own script" shows its `ok` on the practice cluster; here the other two verdicts."""
import os
import socket
import subprocess
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


RANK0_SAVES = """
import os, sys, time, torch, torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
sys.path.insert(0, {code!r})
import ddp_check
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
data = TensorDataset(torch.zeros(8, 2))
loader = DataLoader(data, batch_size=2, sampler=DistributedSampler(data))
ddp_check.check(model, loader, global_batch=4, exit_timeout=2)
for (x,) in loader:
    model(x).sum().backward()
if dist.get_rank() == 0:
    time.sleep(6)  # rank 0 writes a large checkpoint alone (step 9's pattern), then the barrier
dist.barrier()
print("rank", dist.get_rank(), "done", flush=True)
dist.destroy_process_group()
os._exit(0)
"""


def test_a_rank_0_only_save_longer_than_the_watch_does_not_end_the_job(tmp_path):
    """Issue 37 M4: rank 1 waits at the barrier for 6 s while rank 0 saves, with exit_timeout=2.
    The check says so and says when rank 1 moves on; both ranks finish (it used to end rank 1
    with exit code 1)."""
    script = tmp_path / "rank0_saves.py"
    script.write_text(RANK0_SAVES.format(code=str(Path(ddp_check.__file__).parent)))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC"))}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(script)], env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "rank 1 done" in outs[1], outs
    assert "ddp_check: exits    warning rank 1 stopped training after 2 step(s); rank(s) 0 did not" in outs[1]
    assert "ddp_check: exits    ok      rank 1 moved on" in outs[1], outs
