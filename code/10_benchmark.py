"""Step 10: how fast does the tutorial's ConvNet train on one GPU, and what
makes it faster?

A benchmark, not a test: it times training steps (images/s) of CSC's tutorial
ConvNet on MNIST-shaped data for a ladder of input pipelines and
optimisations, and writes JSON.

    python code/10_benchmark.py --out benchmarks/h100.json  # on a GPU node
    python code/10_benchmark.py --smoke  # CPU: checks that it runs
    torchrun --nproc_per_node=4 code/10_benchmark.py \
        --out ...  # DDP scaling: 4 GPUs

A model this small is bound by kernel launches and the input pipeline, not by
arithmetic, so the order of the ladder is the lesson: feed the GPU first, then
cut launch overhead.

GPU utilisation is read in this process through NVML (torch.cuda.utilization,
or the driver's libnvidia-ml directly), from the main thread, only while a
rung is timed: no thread and no child process. (An nvidia-smi started from a
sampler thread hung this script: a loader worker forked while the thread was
inside subprocess.run kept that call's private pipe open.) The JSON is
rewritten after every rung, and a rung that stalls for --stall-after seconds
dumps every thread's stack (faulthandler), so a job killed at its time limit
keeps what it measured.
"""
import argparse
import ctypes
import faulthandler
import json
import math
import os
import platform
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

from ddp_helpers import ConvNet, cleanup, setup_distributed

p = argparse.ArgumentParser()
p.add_argument("--batch-sizes", type=int, nargs="+", default=[100, 1024])
p.add_argument("--seconds", type=float, default=3.0,
               help="time spent measuring each variant")
p.add_argument("--n-images", type=int, default=60000)
p.add_argument("--smoke", action="store_true",
               help="tiny sizes: checks every code path runs")
p.add_argument("--out", help="write the results here (JSON), "
               "rewritten after every rung")
p.add_argument("--stall-after", type=float, default=120,
               help="seconds: a rung still running then dumps every thread's "
                    "stack to stderr")
args = p.parse_args()
if args.smoke:
    args.seconds, args.n_images = 0.3, 2000

cuda = torch.cuda.is_available()
device = torch.device("cuda" if cuda else "cpu")
# started by torchrun: measure DDP scaling instead
ddp = "LOCAL_RANK" in os.environ
if ddp:
    rank, _, world, device = setup_distributed()
torch.manual_seed(0)


def fake_mnist(root, n):
    """MNIST's own file format with random digits, read back by torchvision's
    real MNIST class."""
    raw = os.path.join(root, "MNIST", "raw")
    os.makedirs(raw, exist_ok=True)
    rng = np.random.default_rng(0)
    for split, count in [("train", n), ("t10k", 10)]:
        with open(os.path.join(raw, f"{split}-images-idx3-ubyte"), "wb") as f:
            f.write(np.array([2051, count, 28, 28], ">i4").tobytes()
                    + rng.integers(0, 256, count * 784, np.uint8).tobytes())
        with open(os.path.join(raw, f"{split}-labels-idx1-ubyte"), "wb") as f:
            f.write(np.array([2049, count], ">i4").tobytes()
                    + rng.integers(0, 10, count, np.uint8).tobytes())
    tf = transforms.Compose([transforms.ToTensor(),
                             transforms.Normalize((0.1307,), (0.3081,))])
    return datasets.MNIST(root, train=True, transform=tf, download=False)


def batches_from_loader(loader, non_blocking=False):
    while True:
        for x, y in loader:
            yield (x.to(device, non_blocking=non_blocking),
                   y.to(device, non_blocking=non_blocking))


def batches_on_device(x_all, y_all, batch,
                      memory_format=torch.contiguous_format):
    x_all = x_all.to(device).contiguous(memory_format=memory_format)
    y_all = y_all.to(device)
    while True:
        for idx in torch.randperm(len(x_all), device=device).split(batch):
            if len(idx) == batch:  # static shapes (torch.compile, CUDA graphs)
                yield x_all[idx], y_all[idx]


def time_is_up(start):
    """Has `args.seconds` passed? Under DDP all ranks agree: a rank that took
    one step more than the others would wait forever in its extra
    all-reduce."""
    up = torch.tensor(float(time.perf_counter() - start >= args.seconds),
                      device=device)
    if ddp:
        torch.distributed.all_reduce(up, op=torch.distributed.ReduceOp.MAX)
    # .item() waits for the GPU: the steps so far have finished
    return up.item() > 0


def measure(step, batches, images, busy):
    """(images per second of `step` over `args.seconds` after a warm-up, mean
    GPU utilisation %). busy() reads the utilisation; sampled from the second
    half of the timed window at most every 0.2 s (NVML's figure covers its
    last 1/6 to 1 s: not the warm-up or compilation)."""
    for _ in range(3):
        step(*next(batches))
    if cuda:
        torch.cuda.synchronize()
    n, start, samples, last = 0, time.perf_counter(), [], 0.0
    while True:
        step(*next(batches))
        n += 1
        if n % (20 if cuda else 1) == 0:  # on GPUs: one sync per 20 steps
            if time_is_up(start):
                break
            now = time.perf_counter()
            if (busy and now - start >= min(1.0, args.seconds / 2)
                    and now - last >= 0.2):
                samples.append(busy())
                last = now
    images_per_s = n * images / (time.perf_counter() - start)
    samples = [s for s in samples if s is not None]
    return images_per_s, (sum(samples) / len(samples) if samples else None)


# V100s (before Ampere) only emulate bf16, slowly: there autocast to fp16 (no
# loss scaling: we only time the steps here; train in fp16 with
# torch.amp.GradScaler)
AUTOCAST = (torch.bfloat16 if not cuda
            or torch.cuda.is_bf16_supported(including_emulation=False)
            else torch.float16)


def make_step(model, opt, autocast=False):
    def step(x, y):
        with torch.autocast(device.type, AUTOCAST, enabled=autocast):
            loss = F.cross_entropy(model(x), y)
        # keep .grad tensors alive: CUDA graphs need fixed addresses
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
    return step


def cuda_graph_step(model, opt, batch, memory_format):
    """Capture forward + backward + optimizer step once, then replay it: one
    launch per step."""
    sx = torch.zeros(batch, 1, 28, 28, device=device).contiguous(
        memory_format=memory_format)
    sy = torch.zeros(batch, dtype=torch.long, device=device)
    step = make_step(model, opt)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up on a side stream before capture
        for _ in range(3):
            step(sx, sy)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step(sx, sy)

    def replay(x, y):
        sx.copy_(x)
        sy.copy_(y)
        g.replay()
    return replay


def utilisation_reader():
    """A function that returns this GPU's utilisation in % (None when
    unknown), or None without a GPU. In-process NVML: no thread and no child
    process, so nothing can race a forked loader."""
    if not cuda:
        return None
    try:  # needs nvidia-ml-py (CUDA) or amdsmi (ROCm)
        torch.cuda.utilization(device)
        return lambda: torch.cuda.utilization(device)
    except Exception:
        pass
    # this rank's GPU, by its PCI address: not an index, which
    # CUDA_VISIBLE_DEVICES renumbers for PyTorch but not for NVML
    props = torch.cuda.get_device_properties(device)
    bus_id = (f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:"
              f"{props.pci_device_id:02X}.0")
    try:
        nvml, handle = ctypes.CDLL("libnvidia-ml.so.1"), ctypes.c_void_p()
        if nvml.nvmlInit_v2() or nvml.nvmlDeviceGetHandleByPciBusId_v2(
                bus_id.encode(), ctypes.byref(handle)):
            return None
    except (OSError, AttributeError):
        # no NVIDIA driver library (ROCm without amdsmi)
        return None
    rates = (ctypes.c_uint * 2)()  # nvmlUtilization_t: gpu %, memory %
    return lambda: (None if nvml.nvmlDeviceGetUtilizationRates(handle, rates)
                    else float(rates[0]))


def write_report(results, complete):
    """The JSON so far: rewritten after every rung, so a job killed mid-ladder
    keeps its rows."""
    if not args.out or (ddp and rank != 0):
        return
    report = {
        "device": torch.cuda.get_device_name() if cuda else (
            f"CPU ({os.cpu_count()} cores, "
            f"{platform.processor() or platform.machine()})"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "hip": torch.version.hip if cuda else None,
        "python": sys.version.split()[0],
        "command": " ".join(["python"] + sys.argv),
        "date": time.strftime("%Y-%m-%d"), "smoke": args.smoke,
        "seconds_per_variant": args.seconds, "n_images": args.n_images,
        "complete": complete, "results": results,
    }
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".tmp", "w") as f:
        json.dump(report, f, indent=1)
    os.replace(args.out + ".tmp", args.out)


busy = utilisation_reader()


with tempfile.TemporaryDirectory() as root:
    train = fake_mnist(root, args.n_images)
    x_all = train.data.unsqueeze(1).float().div(255).sub(0.1307).div(0.3081)
    y_all = train.targets
    workers = min(8, len(os.sched_getaffinity(0)))
    results = []
    for batch in args.batch_sizes:
        # linear scaling from the tutorial's batch 100 (step 3)
        lr = 0.05 * batch / 100
        variants = {  # name -> (needs CUDA, build() -> (step, batches))
            "DataLoader (tutorial baseline)": (False, lambda m, o: (
                make_step(m, o), batches_from_loader(DataLoader(
                    train, batch, shuffle=True, drop_last=True)))),
            f"+ {workers} workers, pinned, non_blocking": (
                False, lambda m, o: (make_step(m, o), batches_from_loader(
                    DataLoader(train, batch, shuffle=True, drop_last=True,
                               num_workers=workers, pin_memory=cuda,
                               persistent_workers=True),
                    non_blocking=True))),
            "data resident on the device": (False, lambda m, o: (
                make_step(m, o), batches_on_device(x_all, y_all, batch))),
            f"+ {'bf16' if AUTOCAST == torch.bfloat16 else 'fp16'} autocast": (
                True, lambda m, o: (make_step(m, o, autocast=True),
                                    batches_on_device(x_all, y_all, batch))),
            "+ channels_last": (True, lambda m, o: (
                make_step(m.to(memory_format=torch.channels_last), o),
                batches_on_device(x_all, y_all, batch, torch.channels_last))),
            "+ torch.compile": (True, lambda m, o: (
                make_step(torch.compile(m), o),
                batches_on_device(x_all, y_all, batch))),
            # + CUDA graphs of the model
            '+ torch.compile(mode="reduce-overhead")': (True, lambda m, o: (
                make_step(torch.compile(m, mode="reduce-overhead"), o),
                batches_on_device(x_all, y_all, batch))),
            "+ CUDA graph of the whole step": (True, lambda m, o: (
                cuda_graph_step(m, o, batch, torch.contiguous_format),
                batches_on_device(x_all, y_all, batch))),
        }
        if ddp:
            # each rank: its shard on its GPU, gradients all-reduced by DDP
            # every step
            shard = slice(rank, None, world)
            wrap = lambda m: torch.nn.parallel.DistributedDataParallel(
                m, device_ids=[device] if cuda else None)
            # strong scaling: the global batch fixed, split over the GPUs;
            # weak: each GPU keeps it
            variants = {
                f"DDP, {world} processes, data resident": (
                    False, lambda m, o: (
                        make_step(wrap(m), o),
                        batches_on_device(x_all[shard], y_all[shard],
                                          batch // world))),
                f"DDP, {world} processes, data resident, weak scaling": (
                    False, lambda m, o: (
                        make_step(wrap(m), o),
                        batches_on_device(x_all[shard], y_all[shard], batch)))}
        for name, (needs_cuda, build) in variants.items():
            # global batch world x batch, learning rate scaled with it
            weak = name.endswith("weak scaling")
            row = {"variant": name, "batch": batch * world if weak else batch,
                   "lr": lr * world if weak else lr}
            if needs_cuda and not cuda:
                row["skipped"] = "needs a CUDA GPU"
            else:
                torch.manual_seed(0)
                model = ConvNet(image_size=28, batchnorm=True).to(device)
                opt = torch.optim.SGD(model.parameters(), lr=row["lr"],
                                      momentum=0.9)
                step, batches = build(model, opt)
                # 100 on 8 GPUs: 96
                images = (batch * world if weak
                          else batch // world * world if ddp else batch)
                # a stall shows where every thread is
                faulthandler.dump_traceback_later(args.stall_after)
                row["images_per_s"], row["gpu_util_percent"] = measure(
                    step, batches, images, busy)
                faulthandler.cancel_dump_traceback_later()
                # each rank timed the same lockstep steps of the global batch:
                # average them
                if ddp:
                    t = torch.tensor(row["images_per_s"] / world,
                                     device=device)
                    torch.distributed.all_reduce(t)
                    row["images_per_s"], row["gpus"] = t.item(), world
                assert (math.isfinite(row["images_per_s"])
                        and row["images_per_s"] > 0)
            results.append(row)
            # before the line: a reader who sees it finds the row
            write_report(results, complete=False)
            shown = (row.get("skipped")
                     or f"{row['images_per_s']:>10,.0f} images/s")
            if not ddp or rank == 0:
                print(f"batch {batch:>5}  {name:<40} {shown}", flush=True)

write_report(results, complete=True)
if args.out and (not ddp or rank == 0):
    print(f"wrote {args.out}")
if ddp:
    cleanup()
