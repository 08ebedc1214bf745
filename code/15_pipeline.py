"""Step 15, a preview of the third dimension: pipeline parallel. The layers are
split into 2 stages, one per process; a schedule sends micro-batches through
them. Each stage's forward and backward actions are recorded in order, and the
idle share of that order (the bubble) is compared with (p - 1) / (m + p - 1)
for p stages and m micro-batches."""
import argparse
import copy
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import (PipelineStage, Schedule1F1B,
                                          ScheduleGPipe)

from ddp_helpers import (below, cleanup, fail, load_dataset,
                         print0, setup_distributed)

p = argparse.ArgumentParser()
p.add_argument("--microbatches", default="4,8",
               help="comma-separated values of m to run")
p.add_argument("--width", type=int, default=1024,
               help="wide layers: the computation outweighs the sends")
p.add_argument("--layers", type=int, default=4, help="per stage")
p.add_argument("--lr", type=float, default=0.01)
p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
args = p.parse_args()

rank, local_rank, world_size, device = setup_distributed(args.backend)
if world_size != 2:
    fail(f"error: this preview runs 2 stages, one per process: "
         f"start 2 processes, not {world_size}")
torch.manual_seed(0)
train, _ = load_dataset()
# one batch of 96
x, y = (train.tensors[0][:96].flatten(1).to(device),
        train.tensors[1][:96].to(device))
w, n = args.width, args.layers
layers = ([nn.Linear(64, w)] + [nn.Linear(w, w) for _ in range(2 * n - 2)]
          + [nn.Linear(w, 10)])
full = nn.Sequential(*(m for layer in layers[:-1] for m in (layer, nn.Tanh())),
                     layers[-1]).to(device)
ref = copy.deepcopy(full)  # the whole model in this process, to compare with
# stage 0: the first n layers; stage 1: the rest and the output layer
half = len(full) // 2
# (this process keeps only its stage)
stage_module = full[:half] if rank == 0 else full[half:]

# (action, micro-batch, CPU seconds) of this stage's computations, in order
events = []


# CPU time of this thread, not the clock: on a shared, loaded machine the
# clock also counts the time a process waits for a free core
def timed(kind, fn):
    def wrapper(i, *a, **kw):
        t0 = time.thread_time()
        out = fn(i, *a, **kw)
        events.append((kind, i, time.thread_time() - t0))
        return out
    return wrapper


def replay(traces):
    """Both stages' timeline rebuilt from their traces, with equal stages as
    the formula assumes: every F takes the median F time of both stages, every
    B the median B time (measured times jitter on a shared machine, and the two
    stages differ a little: first and last layer). An action starts when its
    stage is free and its input exists (stage 1's F i needs stage 0's F i;
    stage 0's B i needs stage 1's B i). Returns the share of the two stages'
    time spent waiting: the bubble of the recorded order."""
    took = {k: statistics.median(e[2] for t in traces for e in t if e[0] == k)
            for k in "FB"}
    todo = [[(s, k, i) for k, i, _ in t] for s, t in enumerate(traces)]
    busy = sum(took[a[1]] for t in todo for a in t)
    done, clock = {}, [0.0, 0.0]
    while todo[0] or todo[1]:
        for s in (0, 1):
            while todo[s]:
                action = todo[s][0]
                need = ((1 - s, *action[1:])
                        if action[:2] in ((1, "F"), (0, "B")) else None)
                if need and need not in done:
                    break  # it waits for the other stage
                clock[s] = max(clock[s], done.get(need, 0.0)) + took[action[1]]
                done[todo[s].pop(0)] = clock[s]
    return 1 - busy / (2 * max(clock))


opt = torch.optim.SGD(stage_module.parameters(), lr=args.lr)
ref_opt = torch.optim.SGD(ref.parameters(), lr=args.lr)
print0(f"{world_size} processes, 2 stages of {n} layers ({w} wide), "
       f"backend {dist.get_backend()}, device {device.type}, batch 96")

gap = 0.0  # largest |pipeline loss - one process's loss|, on stage 1
for m in map(int, args.microbatches.split(",")):
    for name, Schedule in [("GPipe", ScheduleGPipe), ("1F1B", Schedule1F1B)]:
        # --8<-- [start:stages]
        stage = PipelineStage(stage_module, stage_index=rank, num_stages=2,
                              device=device)
        # loss: on stage 1
        schedule = Schedule(stage, n_microbatches=m, loss_fn=F.cross_entropy)
        # --8<-- [end:stages]
        stage.forward_one_chunk = timed("F", stage.forward_one_chunk)
        stage.backward_one_chunk = timed("B", stage.backward_one_chunk)
        # the first step also sets up the stages' buffers: time the second
        for attempt in range(2):
            events.clear()
            losses = []
            opt.zero_grad()
            if rank == 0:
                # the first stage gets the inputs, splits them into
                # m micro-batches
                schedule.step(x)
            else:
                # the last one the targets: it computes the loss
                schedule.step(target=y, losses=losses)
            opt.step()
            # one process, the whole batch at once: the same loss, the
            # same update
            if rank == 1:
                ref_loss = F.cross_entropy(ref(x), y)
                ref_opt.zero_grad()
                ref_loss.backward()
                ref_opt.step()
                gap = max(gap, abs(torch.stack(losses).mean().item()
                                   - ref_loss.item()))
        traces = [None, None]
        dist.all_gather_object(traces, events)
        if rank == 0:
            orders = [" ".join(f"{k}{i}" for k, i, _ in t) for t in traces]
            held = [max(sum(1 if k == "F" else -1 for k, _, _ in t[:j + 1])
                        for j in range(len(t))) for t in traces]
            bubble, formula = replay(traces), (2 - 1) / (m + 2 - 1)
            print(f"{name}, m={m}: stage 0: {orders[0]}\n"
                  f"{' ' * (len(name) + 6 + len(str(m)))}stage 1: {orders[1]}")
            print(f"  micro-batches held at once "
                  f"(activations kept for backward): "
                  f"stage 0 {held[0]}, stage 1 {held[1]}")
            print(f"  bubble (p-1)/(m+p-1) = {formula:.2f}; "
                  f"of the recorded order: {bubble:.2f}")
            # an order that waits more fails
            assert abs(bubble - formula) < 1e-9, (name, m, bubble, formula)
gaps = [None, None]
dist.all_gather_object(gaps, gap)
print0(f"largest |loss difference| from one process, over every step: "
       f"{below(gaps[1])} (tolerance 1e-05)")
assert gaps[1] <= 1e-5
cleanup()
