"""code/ddp_check.py's `workers` line, in this process (a gloo group of one): the notebook "Your
own script" shows its `ok` on the practice cluster; here the other two verdicts."""
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

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
