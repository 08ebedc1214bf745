"""code/ddp_check.py's `workers` line, in this process (a gloo group of one): the notebook "Your
own script" shows its `ok` on the practice cluster; here the other two verdicts."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

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
    # threads and workers judged together: 4 threads + 2 workers on 4 cores compete
    (2, 4, "note", "2 loader workers per rank, 4 cores per rank: with 4 training threads, 6 busy at once; "
                   "OMP_NUM_THREADS=2 or fewer workers"),
])
def test_workers_line(capsys, workers, cores, verdict, says):
    loader = DataLoader(TensorDataset(torch.zeros(4)), num_workers=workers)
    ddp_check._workers(loader, cores, 4 if verdict == "note" and workers else 1)
    line = capsys.readouterr().out
    assert line.startswith(f"ddp_check: workers  {verdict:<7} {says}"), line


@pytest.mark.parametrize("sizes, steps, verdict, says", [
    ([8, 8], [2, 2], "ok", "global batch 32 = 2 x 2 x 8 (ranks x micro-batches per optimizer step x micro-batch)"),
    # GPT-style accumulation steps not divided by the world size: each rank does all of them
    ([8, 8], [4, 4], "PROBLEM", "global batch 64 = 2 x 4 x 8 (ranks x micro-batches per optimizer step x "
     "micro-batch), not 32: micro-batches per step x micro-batch should be 32 // world size on each rank "
     "(divide the accumulation steps by the world size), or mean it and scale the learning rate"),
    ([16, 16], [1, 1], "ok", "global batch 32 = 2 x 16"),
    ([8, 8], [1, 1], "PROBLEM", "global batch 16 = 2 x 8, not 32: give each rank 32 // world size"),
])
def test_batch_line(capsys, sizes, steps, verdict, says):
    """The batch line from the micro-batches counted per optimizer step, against global_batch=32."""
    ddp_check._batch(sizes, steps, 32)
    line = capsys.readouterr().out
    assert line.startswith(f"ddp_check: batch    {verdict:<7} {says}"), line


@pytest.mark.parametrize("others, verdict, says", [
    ([1, 2, 3], "ok", "each of 4 ranks drew its own first batch"),
    ([1, 0, 3], "PROBLEM", "ranks 0, 2 drew equal first batches: give each rank its own seed (seed + rank)"),
    ([0, 0, 0], "PROBLEM", "all 4 ranks' first batches are equal: every rank trains on the same data, 4 times the work"),
])
def test_first_batches_line(capsys, monkeypatch, others, verdict, says):
    """Rank 0's first input hashed, with three other ranks' hashes: equal to it (0) or not."""
    monkeypatch.setattr(ddp_check, "_gather", lambda crc: [crc] + [crc + k for k in others])
    ddp_check._first_batches(((torch.arange(8.).reshape(2, 4), torch.ones(2, dtype=torch.long)), {}))
    line = capsys.readouterr().out
    assert line.startswith(f"ddp_check: shards   {verdict:<7} {says}"), line


# --- code/mnist_ddp.py's evaluation: every test image once, with any world size.
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


def _two_ranks(script, *args):
    """Runs `script` as ranks 0 and 1 of a gloo world on this machine; returns their outputs."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC"))}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(script), *args], env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    return outs


def test_a_rank_0_only_save_longer_than_the_watch_does_not_end_the_job(tmp_path):
    """Rank 1 waits at the barrier for 6 s while rank 0 saves, with exit_timeout=2.
    The check says so and says when rank 1 moves on; both ranks finish (the watch does not end rank 1
    with exit code 1)."""
    script = tmp_path / "rank0_saves.py"
    script.write_text(RANK0_SAVES.format(code=str(Path(ddp_check.__file__).parent)))
    outs = _two_ranks(script)
    assert "rank 1 done" in outs[1], outs
    assert "ddp_check: exits    warning rank 1 stopped training after 2 step(s); rank(s) 0 did not" in outs[1]
    assert "ddp_check: exits    ok      rank 1 moved on" in outs[1], outs


# --- Scripts that are not mnist-shaped: no loader (each rank draws its own batches, as GPT-style
# scripts do), gradient accumulation over micro-batches. One 2-rank world runs every case in
# turn (a fresh ddp_check each), so that the suite starts two processes, not ten.
SHAPES = """
import contextlib, importlib, io, json, os, sys, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, TensorDataset
sys.path.insert(0, {code!r})
import ddp_check
dist.init_process_group("gloo")
rank = dist.get_rank()
barrier, destroy = dist.barrier, dist.destroy_process_group  # check() wraps them: undone per case


class Draws(IterableDataset):  # endless random samples from a seed: a per-rank sampler's stand-in
    def __init__(self, seed):
        self.seed = seed

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        while True:
            yield torch.randn(4, generator=g)


def draws(seed):  # batches of 8 with no loader: random rows, as offsets into a token file are
    g = torch.Generator().manual_seed(seed)
    while True:
        yield torch.randn(8, 4, generator=g)


def case(loader, batches, global_batch, micro_steps, sync_last=True):
    importlib.reload(ddp_check)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            ddp_check.check(model, loader, global_batch=global_batch)
            for step in range(2):
                for micro in range(micro_steps):
                    # no_sync() on all but the last micro-batch; sync_last=False: on all of them
                    quiet = micro < micro_steps - 1 or not sync_last
                    with model.no_sync() if quiet else contextlib.nullcontext():
                        (model(next(batches)).pow(2).mean() / micro_steps).backward()
                optimizer.step()
                optimizer.zero_grad()
    except Exception as e:  # today's check may fail: the case says how
        out.write(f"error: {{type(e).__name__}}: {{e}}\\n")
    dist.barrier, dist.destroy_process_group = barrier, destroy
    return out.getvalue()


data = TensorDataset(torch.randn(64, 4))
def sharded():
    return DataLoader(data, batch_size=8, sampler=DistributedSampler(data))


said = {{}}
loader = sharded()
said["plain"] = case(loader, (x for (x,) in loader), 16, 1)
loader = sharded()
said["accumulate"] = case(loader, (x for (x,) in loader), 32, 2)
loader = sharded()
said["no-sync-always"] = case(loader, (x for (x,) in loader), 32, 2, sync_last=False)
loader = DataLoader(Draws(seed=1), batch_size=8)
said["same-seed"] = case(loader, iter(loader), 16, 1)
loader = DataLoader(Draws(seed=1 + rank), batch_size=8)
said["own-seeds"] = case(loader, iter(loader), 16, 1)
said["no-loader"] = case(None, draws(100 + rank), 32, 2)
if rank == 0:
    with open(sys.argv[1], "w") as f:
        json.dump(said, f)
dist.barrier()
dist.destroy_process_group()
os._exit(0)
"""


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    """Every case's lines from rank 0: one 2-rank run."""
    folder = tmp_path_factory.mktemp("shapes")
    script = folder / "shapes.py"
    script.write_text(SHAPES.format(code=str(Path(ddp_check.__file__).parent)))
    _two_ranks(script, str(folder / "said.json"))
    return json.loads((folder / "said.json").read_text())


def lines(text):
    return [line for line in text.splitlines() if line.startswith(("ddp_check:", "error:"))]


def test_a_loader_and_a_batch_per_optimizer_step_keep_their_lines(shapes):
    """A DistributedSampler loader, one batch per step: the lines (and their order) the notebooks
    show for mnist-shaped scripts, with the batch line said at once."""
    said = lines(shapes["plain"])
    assert said[1:3] == ["ddp_check: shards   ok      each of 2 ranks reads its own 32 samples",
                         "ddp_check: epoch    ok      the sampler is at epoch 0 (said again if an epoch repeats the order of the one before)"]
    assert said[3] == "ddp_check: batch    ok      global batch 16 = 2 x 8", said
    assert said[-1] == "ddp_check: replicas ok      all 2 copies of the model are equal after 1 step(s)", said
    assert not [line for line in said if "PROBLEM" in line or "error" in line], said


def test_no_loader(shapes):
    """loader=None: a line that says so (it used to raise AttributeError on loader.batch_size),
    the first batches compared, the batch counted at the first optimizer step."""
    said = lines(shapes["no-loader"])
    assert "ddp_check: epoch    note    no loader (loader=None): no sampler or epochs to check; the ranks' first batches are compared at the first training step" in said, said
    assert "ddp_check: shards   ok      each of 2 ranks drew its own first batch (a hash of each rank's first training input)" in said, said
    assert ("ddp_check: batch    ok      global batch 32 = 2 x 2 x 8 (ranks x micro-batches per optimizer step x micro-batch)" in said), said
    assert "ddp_check: replicas ok      all 2 copies of the model are equal after 1 step(s)" in said, said
    assert not [line for line in said if "PROBLEM" in line or "error" in line], said


def test_ranks_that_draw_the_same_batches(shapes):
    """Ranks that draw their batches from the same seed: PROBLEM (it used to say 'an
    IterableDataset' whether the seeds differed or not); their own seeds: ok."""
    same, own = lines(shapes["same-seed"]), lines(shapes["own-seeds"])
    assert "ddp_check: shards   PROBLEM all 2 ranks' first batches are equal: every rank trains on the same data, 2 times the work. Give each rank its own seed (seed + rank) or its own part of the data" in same, same
    assert "ddp_check: shards   ok      each of 2 ranks drew its own first batch (a hash of each rank's first training input)" in own, own
    assert not [line for line in own if "PROBLEM" in line or "error" in line], own


def test_gradient_accumulation_counts_in_the_global_batch(shapes):
    """Two micro-batches of 8 per optimizer step on 2 ranks make 32 (it used to say
    'PROBLEM global batch 16 = 2 x 8, not 32')."""
    said = lines(shapes["accumulate"])
    assert ("ddp_check: batch    ok      global batch 32 = 2 x 2 x 8 (ranks x micro-batches per optimizer step x micro-batch)" in said), said
    assert not [line for line in said if "PROBLEM" in line or "error" in line], said


def test_replicas_are_compared_after_the_first_optimizer_step(shapes):
    """Every micro-batch under no_sync(): the gradients are never averaged and the copies part at
    the first optimizer step (compared at the second forward, before that step, they were equal
    and the line said ok)."""
    said = lines(shapes["no-sync-always"])
    replicas = [line for line in said if line.startswith("ddp_check: replicas")]
    assert len(replicas) == 1, said
    assert replicas[0].startswith("ddp_check: replicas PROBLEM after 1 step(s) the ranks' weights differ (sums "), said
    assert replicas[0].endswith("step every rank; with accumulation, the last micro-batch's backward outside no_sync()")
