"""The few pieces every step's script shares: data, model, distributed set-up
and tear-down.

Scripts import it as `from ddp_helpers import ...`; it sits next to them in
code/.
"""
import atexit
import contextlib
import hashlib
import importlib.util
import math
import os
import re
import sys
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import TensorDataset

# Python writes a line and its newline in two writes when a stream is
# unbuffered (python -u, PYTHONUNBUFFERED; always for a SystemExit message on
# stderr), so lines from several ranks sharing one pipe can merge. Buffered
# (print(..., flush=True)), each line is one write. Here, at import, since
# every step that starts ranks imports this module.
for stream in (sys.stdout, sys.stderr):
    if hasattr(stream, "reconfigure"):
        stream.reconfigure(write_through=False)

# divisible by 1..6, 8, 9, 10, 12, 16: equal shards for all our world sizes
N_TRAIN = 1440


# --8<-- [start:data]
def load_dataset(name="digits", data_dir="data"):
    """Return (train, test) datasets of 1-channel images and labels 0-9.

    digits: scikit-learn's 1,797 real 8x8 handwritten digits, shipped inside
    its wheel, so nothing is downloaded. mnist: torchvision's MNIST class
    reading files you fetched first.
    """
    if name == "digits":
        # The file sklearn.datasets.load_digits() reads, read directly:
        # importing sklearn.datasets costs every process most of a second.
        spec = importlib.util.find_spec("sklearn")
        if spec is None:  # a cluster's module or container without it
            raise SystemExit(
                "error: the digits data set comes with scikit-learn, which "
                f"this Python lacks ({sys.executable}): pip install "
                "scikit-learn (on a cluster: in a venv on top of the module "
                "or container, see 'Run the notebooks')")
        sklearn_dir = spec.submodule_search_locations[0]
        data = np.loadtxt(os.path.join(sklearn_dir, "datasets", "data",
                                       "digits.csv.gz"), delimiter=",")
        x = torch.tensor(data[:, :-1],
                         dtype=torch.float32).view(-1, 1, 8, 8) / 16.0
        y = torch.tensor(data[:, -1], dtype=torch.long)
        # fixed split
        order = torch.randperm(len(x),
                               generator=torch.Generator().manual_seed(1234))
        x = (x - x.mean()) / x.std()
        tr, te = order[:N_TRAIN], order[N_TRAIN:]
        return TensorDataset(x[tr], y[tr]), TensorDataset(x[te], y[te])
    if name == "mnist":
        from torchvision import datasets, transforms
        tf = transforms.Compose([transforms.ToTensor(),
                                 transforms.Normalize((0.1307,), (0.3081,))])
        # download=False: compute nodes have no internet, and N ranks must not
        # all download
        try:
            return (datasets.MNIST(data_dir, train=True, transform=tf,
                                   download=False),
                    datasets.MNIST(data_dir, train=False, transform=tf,
                                   download=False))
        except RuntimeError as e:
            raise SystemExit(
                f"error: MNIST not found under {os.path.abspath(data_dir)}"
                f"/MNIST ({e}). Fetch it once on a login node (it has "
                f"internet): python -c \"from torchvision import datasets; "
                f"datasets.MNIST('{data_dir}', download=True)\"") from None
    raise SystemExit(f"error: unknown dataset {name!r}: use digits or mnist")
# --8<-- [end:data]


class ConvNet(nn.Module):
    """CSC's tutorial ConvNet: two 5x5 conv + pool blocks and a linear
    layer."""

    def __init__(self, image_size=8, batchnorm=False):
        super().__init__()
        norm = nn.BatchNorm2d if batchnorm else (lambda c: nn.Identity())
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 5, padding=2), norm(16), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 5, padding=2), norm(32), nn.ReLU(),
            nn.MaxPool2d(2))
        self.fc = nn.Linear(32 * (image_size // 4) ** 2, 10)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


@torch.no_grad()
def accuracy(model, dataset, device, batch_size=500, dtype=None):
    """Fraction of `dataset` that `model` classifies correctly (one process,
    whole set)."""
    model.eval()
    correct = 0
    for x, y in torch.utils.data.DataLoader(dataset, batch_size=batch_size):
        correct += (model(x.to(device, dtype)).argmax(1)
                    == y.to(device)).sum().item()
    model.train()
    return correct / len(dataset)


# --8<-- [start:setup]
def setup_distributed(backend="auto", timeout_s=300):
    """Join the process group; return (rank, local_rank, world_size, device).

    torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT;
    srun without torchrun (one task per GPU) sets Slurm's own variables, which
    slurm_to_torch() copies. One code path: nccl + one GPU per process when
    GPUs exist, gloo + CPU otherwise.
    """
    slurm_to_torch()
    if "LOCAL_RANK" not in os.environ:
        raise SystemExit("error: LOCAL_RANK is not set: start this script "
                         "with torchrun (torchrun --standalone "
                         "--nproc_per_node=2 SCRIPT) or srun (step 5)")
    # from the environment, never a --local_rank option
    local_rank = int(os.environ["LOCAL_RANK"])
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        gpus = torch.cuda.device_count()
        # the same line from every rank, so the error reads the same each run
        if gpus == 0:
            raise SystemExit("error: backend nccl needs GPUs, but this node "
                             "has none visible: use gloo on CPU nodes")
        if gpus <= local_rank:
            raise SystemExit(
                f"error: backend nccl needs a GPU for local rank "
                f"{local_rank}, but only {gpus} are visible to this process: "
                f"keep all of the node's GPUs visible to every task (--gres "
                f"or --gpus-per-node, not --gpus-per-task), or start at most "
                f"{gpus} processes per node")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # else every rank allocates on GPU 0
    else:
        device = torch.device("cpu")
    # step 9: clear one-line errors instead of hangs or separate worlds
    check_world_size()
    # A timeout turns a hang (a rank that never arrives) into a readable error.
    with clear_init_errors(timeout_s):
        dist.init_process_group(
            backend, timeout=timedelta(seconds=timeout_s),
            device_id=device if backend == "nccl" else None)  # NCCL: its GPU
    # torch 2.10's gloo prints a line per rank as it connects: let them all
    # finish before any rank prints its own first line
    if backend == "gloo":
        dist.barrier()
    return dist.get_rank(), local_rank, dist.get_world_size(), device


def slurm_to_torch():
    """Started by srun without torchrun: give Slurm's task numbers the names
    torch reads.

    Only inside an srun step (SLURM_STEP_ID) and only where torchrun did not
    set RANK: under torchrun, SLURM_PROCID numbers the node's torchrun task,
    not a process.
    """
    if ("RANK" in os.environ or "SLURM_STEP_ID" not in os.environ
            or "SLURM_PROCID" not in os.environ):
        return
    # RANK: 0 .. tasks - 1 over all nodes; LOCAL_RANK: the same on this node
    os.environ["RANK"] = os.environ["SLURM_PROCID"]
    os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
    os.environ["LOCAL_RANK"] = os.environ["SLURM_LOCALID"]
    if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
        raise SystemExit(
            "error: started by srun without torchrun, but MASTER_ADDR/"
            "MASTER_PORT are not set: export them in the batch script before "
            "srun: MASTER_ADDR=$(scontrol show hostnames "
            "\"$SLURM_JOB_NODELIST\" | head -n 1) MASTER_PORT=$((20000 + "
            "SLURM_JOB_ID % 12000))")


# --8<-- [start:cleanup]
def cleanup(exit_code=0):
    """The last line of a script: leave together, then end this process with
    `exit_code`.

    The barrier keeps a fast rank from exiting while a slow one still talks to
    it. With gloo, Python's normal shutdown after destroy_process_group()
    sometimes aborts in gloo's threads ("terminate called without an active
    exception", exit code 134; counts in step 9), so there we run the atexit
    handlers (logging, trackers) ourselves and leave with os._exit, which skips
    the rest of the shutdown: finally blocks around this call, object
    finalizers and the buffers of files still open. With nccl (not measured: no
    GPU in the tests) a normal exit.
    """
    gloo = dist.is_initialized() and dist.get_backend() == "gloo"
    if dist.is_initialized():  # (not when Accelerate runs one process, step 8)
        dist.barrier()
        dist.destroy_process_group()
    if not gloo:
        sys.exit(exit_code)
    # what a normal exit runs first (a private function of CPython's)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
# --8<-- [end:cleanup]
# --8<-- [end:setup]


# --8<-- [start:errors]
def check_world_size():
    """Inside an srun step, WORLD_SIZE must be what Slurm started: SLURM_NTASKS
    processes, or SLURM_NTASKS torchruns (or deepspeed launchers, step 6) that
    each start LOCAL_WORLD_SIZE (LOCAL_SIZE). Otherwise the ranks hang waiting
    for processes that never come, or (torchrun --standalone in several tasks)
    several separate trainings run side by side and overwrite each other's
    files."""
    if "SLURM_STEP_ID" not in os.environ or "SLURM_NTASKS" not in os.environ:
        # not in an srun step (a login node, or the batch script's own shell)
        return
    tasks = int(os.environ["SLURM_NTASKS"])
    per_task = (int(os.environ.get("LOCAL_WORLD_SIZE", 1))
                if "TORCHELASTIC_RUN_ID" in os.environ
                else int(os.environ.get("LOCAL_SIZE", 1))  # deepspeed
                if "CROSS_SIZE" in os.environ
                else 1)
    world = int(os.environ.get("WORLD_SIZE", 1))
    if world != tasks * per_task:
        raise SystemExit(f"error: WORLD_SIZE={world}, but Slurm started "
                         f"{tasks} task(s) x {per_task} process(es) = "
                         f"{tasks * per_task}: with torchrun use one task "
                         f"per node (--ntasks-per-node=1) and a rendezvous "
                         f"shared by all nodes")


@contextlib.contextmanager
def clear_init_errors(timeout_s):
    """Turn init_process_group's long tracebacks for a busy port or a missing
    rank into one line."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    try:
        yield
    except dist.DistError as e:
        msg = str(e)
        if "EADDRINUSE" in msg:
            raise SystemExit(
                f"error: MASTER_PORT {port} on {addr} is already in use "
                f"(another job, or a leftover process): choose another "
                f"port, e.g. from $SLURM_JOB_ID") from None
        if "timed out" in msg.lower():
            # rank 0 knows how many came
            joined = re.search(r"(\d+/\d+) clients joined", msg)
            raise SystemExit(
                f"error: rendezvous at {addr}:{port} timed out after "
                f"{timeout_s} s: not all {os.environ.get('WORLD_SIZE')} "
                f"processes arrived"
                + (f" ({joined.group(1)} did)" if joined else "")) from None
        raise
# --8<-- [end:errors]


def fail(message):
    """Stop this process with a one-line error and exit code 1.

    Once the process group exists, leave through os._exit as in cleanup(): a
    plain exit may be aborted by gloo's threads, and the job would end with 134
    (SIGABRT) instead of 1.
    """
    if not dist.is_initialized():
        raise SystemExit(message)
    print(message, file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(1)


def per_rank_batch(global_batch, world_size, accum=1):
    """The global batch is the one you tune; each rank takes an equal share of
    it, in `accum` equal micro-batches (step 3). Returns the images per rank
    per forward pass."""
    if global_batch % (world_size * accum):
        parts = f"world size {world_size}" if accum == 1 else \
            f"{world_size} processes x {accum} accumulation steps"
        fail(f"error: batch size {global_batch} is not divisible by {parts}: "
             f"use a multiple of {world_size * accum}")
    return global_batch // (world_size * accum)


def mean_over_ranks(value):
    """Average a Python number over all ranks (gloo has no ReduceOp.AVG, so
    SUM / world)."""
    t = torch.tensor(float(value), dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def assert_replicas_equal(model):
    """DDP's promise: after every step all ranks hold bitwise identical
    parameters."""
    # a single process (Accelerate without a launcher, step 8)
    if not dist.is_initialized():
        return
    for name, p in model.named_parameters():
        p0 = p.detach().clone()
        dist.broadcast(p0, src=0)
        assert torch.equal(p0, p.detach()), (
            f"rank {dist.get_rank()}: {name} differs from rank 0")


def below(x):
    """A small difference as the power of ten just above it ("below 1e-07"),
    not its last digits: rounding differs between CPUs (another instruction
    set, other kernels), the decade does not, and the claim is made against a
    tolerance (that the script asserts), not against the digits."""
    return ("0" if x == 0
            else f"below {10.0 ** (math.floor(math.log10(x)) + 1):.0e}")


def weights_fingerprint(model):
    """The first 16 hex digits of the SHA-256 of the parameters' bytes: equal
    only for bitwise equal weights, short enough to compare two runs by eye
    (step 9)."""
    weights = b"".join(p.detach().cpu().numpy().tobytes()
                       for p in model.parameters())
    return hashlib.sha256(weights).hexdigest()[:16]


def print0(*args, **kwargs):
    """Print once, from rank 0 (or from the only process when not
    distributed)."""
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(*args, **kwargs, flush=True)
