"""ddp_check: one call that says, one line each, whether a DDP run does what
you think.

Copy this file beside your training script (it needs only Python and PyTorch)
and call it once, on every rank, after the model, the loader and its sampler
exist:

    import ddp_check
    ddp_check.check(model, loader, global_batch=args.batch_size)

A script without a loader (each rank draws its own batches, as GPT-style
scripts do from a token file) passes loader=None; the checks then read the
training itself.

Rank 0 prints the lines (an exits warning: the rank that waits); each begins
with `ddp_check:` and says `ok`, `note`, `warning` or `PROBLEM`:

- world    the processes vs what Slurm allocated (tasks, nodes, GPUs) and how
           they started;
- shards   whether every rank's loader yields samples of its own; without a
           sampler to read (loader=None, an IterableDataset), whether the
           ranks' first batches differ (a hash of each rank's first training
           input, compared at the first training forward);
- epoch    whether the sampler gets a new epoch (said again if an epoch repeats
           its order);
- batch    the global batch (ranks x micro-batches per optimizer step x
           micro-batch) vs the one you meant; the micro-batches are the
           training forwards counted up to the first optimizer step, since the
           gradients were last set to None (zero_grad), and the micro-batch is
           the loader's batch size, or the first input's first dimension; said
           at once where the loader's batches alone make the batch you meant,
           else at the first optimizer step (and said again there if the steps
           accumulate);
- replicas whether all copies of the model are equal after the first optimizer
           step (of any torch.optim optimizer that holds the model's
           parameters);
- exits    a rank that stops training (model.eval(), barrier,
           destroy_process_group) and waits there while others have not stopped
           says so after exit_timeout, and again if it moves on (a save or
           evaluation on rank 0 alone); with end_job=True it ends the job
           instead, rather than hang until the process group's timeout;
- threads  CPU threads per process vs the cores each process has;
- workers  the loader's worker processes per rank vs those cores.

It adds no work to the training steps but, up to the first optimizer step, a
look at one gradient per forward, a hash of the first batch where there is no
sampler to read, and one comparison after that step; each stop writes one key
to the process group's store (a private PyTorch call, _get_default_store) and
starts a short-lived watcher thread. With end_job=True, exit_timeout= (300 s)
must exceed what some ranks do alone (a rank-0-only evaluation or checkpoint).
It does not see evaluation: a metric computed on one rank's shard, or on a
padded one, and printed as global is not reported.
"""
import os
import socket
import threading
import time
import zlib

import torch
import torch.distributed as dist
from torch.optim.optimizer import register_optimizer_step_post_hook

# training steps, anything done, stops
_state = {"steps": 0, "progress": 0, "stops": 0}


def _say(name, verdict, text):
    if dist.get_rank() == 0:
        print(f"ddp_check: {name:<8} {verdict:<7} {text}", flush=True)


def _gather(obj):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj, group=_state["group"])
    return out


def _env_int(name):
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def _world():
    world = dist.get_world_size()
    hosts = _gather(socket.gethostname())
    nodes = len(set(hosts))
    per_node = max(hosts.count(h) for h in set(hosts))
    torchrun = "TORCHELASTIC_RUN_ID" in os.environ
    launcher = ("torchrun" if torchrun
                else "srun" if "SLURM_PROCID" in os.environ else "?")
    here = (f"{world} processes on {nodes} "
            f"node{'s' if nodes > 1 else ''} ({launcher})")
    tasks, job_nodes = (_env_int("SLURM_NTASKS"),
                        _env_int("SLURM_JOB_NUM_NODES"))
    gpus = _env_int("SLURM_GPUS_ON_NODE")
    if tasks is None:
        return _say("world", "ok", f"{here}, not in a Slurm job")
    slurm = (f"Slurm: {tasks} task{'s' if tasks > 1 else ''} on "
             f"{job_nodes} node" + ("s" if job_nodes > 1 else "")
             + (f", {gpus} GPUs per node" if gpus else ""))
    if torchrun and tasks != nodes:
        return _say("world", "PROBLEM", f"{here}; {slurm}: with torchrun "
                    "start one task per node (--ntasks-per-node=1), or these "
                    f"are {tasks} separate worlds")
    if not torchrun and world != tasks:
        return _say("world", "PROBLEM",
                    f"{here}; {slurm}: every task should be one rank")
    if job_nodes and nodes != job_nodes:
        return _say("world", "PROBLEM",
                    f"{here}; {slurm}: some nodes run nothing")
    if gpus and per_node != gpus:
        return _say("world", "PROBLEM", f"{here}; {slurm}: start one process "
                    f"per GPU ({gpus} per node: --ntasks-per-node or "
                    "--nproc_per_node)")
    _say("world", "ok", f"{here}; {slurm}")


def _indices(sampler):
    """The sample indices this rank's sampler gives this epoch, without
    changing any RNG."""
    rng = torch.get_rng_state()
    try:
        return [int(i) for i in sampler]
    finally:
        torch.set_rng_state(rng)


def _shards(loader, epoch):
    """Says the shards and epoch lines from the sampler; True when there is
    none to read, and the ranks' first batches are compared instead (at the
    first training forward)."""
    if loader is None:
        _say("epoch", "note", "no loader (loader=None): no sampler or epochs "
             "to check; the ranks' first batches are compared at the first "
             "training step")
        return True
    sampler = getattr(loader, "sampler", None)
    if sampler is None or type(sampler).__name__ == "_InfiniteConstantSampler":
        return True  # an IterableDataset, or a loader of its own kind
    mine = _indices(sampler)
    everyone = _gather((zlib.crc32(repr(mine).encode()), len(mine),
                        mine[:4096]))
    world = len(everyone)
    distinct = len(set().union(*(set(i) for _, _, i in everyone)))
    total = sum(n for _, n, _ in everyone)
    if world > 1 and len({c for c, _, _ in everyone}) == 1:
        _say("shards", "PROBLEM", f"all {world} ranks read the same "
             f"{everyone[0][1]} samples in the same order: {world} times the "
             "work. Use DistributedSampler(dataset)")
    elif world > 1 and distinct < min(
            total, sum(len(i) for _, _, i in everyone)) * 0.9:
        _say("shards", "PROBLEM", f"the {world} ranks' samples overlap "
             f"({distinct} distinct of {total} read): each rank needs its own "
             "shard (DistributedSampler)")
    else:
        _say("shards", "ok",
             f"each of {world} ranks reads its own {everyone[0][1]} samples")
    if not hasattr(sampler, "set_epoch"):
        return _say("epoch", "ok" if world == 1 else "note",
                    f"{type(sampler).__name__} has no set_epoch")
    if not getattr(sampler, "shuffle", True):
        return _say("epoch", "ok",
                    "the sampler does not shuffle: every epoch has one order")
    if epoch is not None and sampler.epoch != epoch:
        return _say("epoch", "PROBLEM", "the sampler is at epoch "
                    f"{sampler.epoch}, the loop at {epoch}: call "
                    "sampler.set_epoch(epoch) at the start of every epoch")
    _say("epoch", "ok", f"the sampler is at epoch {sampler.epoch} (said again "
         "if an epoch repeats the order of the one before)")
    _watch_epochs(sampler)


def _watch_epochs(sampler):
    """Swap in a subclass whose __iter__ notices an epoch that starts with the
    same epoch number."""
    cls = type(sampler)
    seen = []

    def __iter__(self):
        seen.append(self.epoch)
        if len(seen) == 2 and seen[0] == seen[1]:  # say it once
            _say("epoch", "PROBLEM", "a new pass over the data with the "
                 f"sampler still at epoch {self.epoch}: the same order again; "
                 "call sampler.set_epoch(epoch) every epoch")
        return cls.__iter__(self)

    sampler.__class__ = type(cls.__name__, (cls,), {"__iter__": __iter__})


def _tensors(value):
    """The tensors in a forward's arguments (tensors, lists, tuples, dicts of
    them)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _first_batches(inputs):
    """Compares a hash of every rank's first training input: equal ones mean
    ranks that draw the same batches (the same seed everywhere, no sharding),
    which no error reveals."""
    crc = None
    for t in _tensors(inputs):
        # its bytes, whatever its dtype
        data = t.detach().reshape(-1).cpu().view(torch.uint8)
        crc = zlib.crc32(data.numpy().tobytes(), crc or 0)
    hashes = _gather(crc)
    world = len(hashes)
    same = sorted(r for r, h in enumerate(hashes) if hashes.count(h) > 1)
    if None in hashes:
        _say("shards", "note",
             "the first training forward has no tensor input: not checked")
    elif world > 1 and len(set(hashes)) == 1:
        _say("shards", "PROBLEM", f"all {world} ranks' first batches are "
             f"equal: every rank trains on the same data, {world} times the "
             "work. Give each rank its own seed (seed + rank) or its own "
             "part of the data")
    elif same:
        _say("shards", "PROBLEM", f"ranks {', '.join(map(str, same))} drew "
             "equal first batches: give each rank its own seed (seed + rank) "
             "or its own part of the data")
    else:
        _say("shards", "ok", f"each of {world} ranks drew its own first batch "
             "(a hash of each rank's first training input)")


def _batch_sizes(loader):
    """Every rank's batch size from its loader (None where the loader does not
    say)."""
    batch = getattr(loader, "batch_size", None) or getattr(
        getattr(loader, "batch_sampler", None), "batch_size", None)
    return _gather(batch)


def _batch(sizes, steps, global_batch):
    """The batch line from every rank's micro-batch and micro-batches per
    optimizer step."""
    total = sum(s * n for s, n in zip(sizes, steps))
    if len(set(sizes)) == 1 and set(steps) == {1}:
        what = f"{total} = {len(sizes)} x {sizes[0]}"
    elif set(steps) == {1}:
        what = f"{total} = {sizes}"
    elif len(set(sizes)) == 1 and len(set(steps)) == 1:
        what = (f"{total} = {len(sizes)} x {steps[0]} x {sizes[0]} "
                "(ranks x micro-batches per optimizer step x micro-batch)")
    else:
        what = (f"{total} = {[f'{n} x {s}' for s, n in zip(sizes, steps)]} "
                "(micro-batches x size)")
    if global_batch is None:
        _say("batch", "ok",
             f"global batch {what} (pass global_batch= to compare)")
    elif total != global_batch and set(steps) == {1}:
        _say("batch", "PROBLEM", f"global batch {what}, not {global_batch}: "
             f"give each rank {global_batch} // world size (or mean it, and "
             "scale the learning rate)")
    elif total != global_batch:
        _say("batch", "PROBLEM", f"global batch {what}, not {global_batch}: "
             f"micro-batches per step x micro-batch should be {global_batch} "
             "// world size on each rank (divide the accumulation steps by "
             "the world size), or mean it and scale the learning rate")
    else:
        _say("batch", "ok", f"global batch {what}")


def _checksum(model):
    with torch.no_grad():
        return sum(float(p.double().sum()) for p in model.parameters())


def _first_step(model, global_batch):
    """After the first optimizer step, on every rank: the copies of the model,
    and the batch from the micro-batches counted before that step."""
    # an optimizer step without a forward counts as one
    steps = _state["forwards"] or 1
    everyone = _gather((_checksum(model), _state["micro"], steps))
    sums = [s for s, _, _ in everyone]
    steps = [n for _, _, n in everyone]
    # the first training input's first dimension
    measured = [m for _, m, _ in everyone]
    # the loader's batch size where it says, unless the steps accumulate (a
    # loader's batch may be split into micro-batches): then the first input's
    # first dimension
    sizes = _state["sizes"]
    if None in sizes or (set(steps) != {1} and None not in measured):
        sizes = measured
    if None in sizes:
        _say("batch", "note", "no batch size: the loader does not say and "
             "the first training forward has no tensor input")
    elif not _state["batch_said"] or set(steps) != {1}:
        # not yet said, or said without these
        _batch(sizes, steps, global_batch)
    spread = max(sums) - min(sums)
    if spread > 1e-6 * max(1.0, max(abs(s) for s in sums)):
        _say("replicas", "PROBLEM",
             f"after 1 step(s) the ranks' weights differ (sums "
             f"{min(sums):.6g} .. {max(sums):.6g}): wrap the model in DDP, "
             "step every rank"
             + ("; with accumulation, the last micro-batch's backward "
                "outside no_sync()" if set(steps) != {1} else ""))
    else:
        _say("replicas", "ok",
             f"all {len(sums)} copies of the model are equal after 1 step(s)")


def _moved():  # a training step, or a stop that returned
    _state["progress"] += 1
    if _state.pop("warned", False):
        print(f"ddp_check: exits    ok      rank {_state['rank']} moved on: "
              "some ranks worked alone for a while (a save, an evaluation), "
              "not a hang", flush=True)


def _exits(model, timeout, end_job):
    """When a rank stops training (model.eval(), dist.barrier,
    destroy_process_group) it notes so in the process group's key-value store,
    and a watcher thread waits `timeout` seconds. If the rank is still waiting
    then (no training step, the call has not returned) while another rank has
    not stopped as often, it says so, and ends the job if end_job; otherwise it
    says so again when the rank moves on. It never blocks the rank itself: a
    rank-0-only validation that comes back to training within `timeout` goes on
    unnoticed."""
    store = dist.PrefixStore("ddp_check/",
                             dist.distributed_c10d._get_default_store())
    rank, world = dist.get_rank(), dist.get_world_size()
    _state["rank"] = rank

    def watch(stops, progress):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # trained again, or the call returned
            if _state["progress"] != progress:
                return
            time.sleep(0.2)
        behind = [r for r in range(world) if r != rank and (
            not store.check([f"stops{r}"])
            or int(store.get(f"stops{r}")) < stops)]
        if not behind:
            return
        print(f"ddp_check: exits    {'PROBLEM' if end_job else 'warning'} "
              f"rank {rank} stopped training after {_state['steps']} step(s); "
              f"rank(s) {', '.join(map(str, behind))} did not, and nothing "
              f"moved for {timeout} s: a break, return or exit that only some "
              "ranks take (inside `if rank == 0:`?)"
              + ("" if end_job else ", or a long save or evaluation on some "
                 "ranks only (said if it moves on)"), flush=True)
        if end_job:
            os._exit(1)
        # _moved() says so when it moves on; a hang ends at the process group's
        # own timeout
        _state["warned"] = True

    def stopping():
        _state["stops"] += 1
        store.set(f"stops{rank}", str(_state["stops"]))
        threading.Thread(target=watch,
                         args=(_state["stops"], _state["progress"]),
                         daemon=True).start()

    def wrap(original):
        def wrapper(*args, **kwargs):
            stopping()
            result = original(*args, **kwargs)
            _moved()
            return result
        return wrapper
    dist.barrier = wrap(dist.barrier)
    dist.destroy_process_group = wrap(dist.destroy_process_group)
    train = model.train

    def train_or_eval(mode=True):
        if not mode and model.training:  # from training to evaluation
            stopping()
        return train(mode)
    model.train = train_or_eval  # model.eval() calls it with mode=False


def _threads():
    threads, omp = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    cores = len(os.sched_getaffinity(0))
    where = _gather((socket.gethostname(),
                     tuple(sorted(os.sched_getaffinity(0)))))
    # processes on this node with the same cores
    sharing = where.count(where[dist.get_rank()])
    per_process = max(1, cores // sharing)
    line = (f"{threads} thread{'s' if threads > 1 else ''} per process "
            f"(OMP_NUM_THREADS={omp or 'unset'}), {per_process} "
            f"core{'s' if per_process > 1 else ''} each "
            f"({cores} shared by {sharing})" if sharing > 1 else
            f"{threads} threads per process "
            f"(OMP_NUM_THREADS={omp or 'unset'}), {cores} cores each")
    if threads > per_process:
        _say("threads", "PROBLEM", f"{line}: more threads than cores; set "
             f"OMP_NUM_THREADS={per_process}")
    elif threads < per_process // 2:
        _say("threads", "note", f"{line}: CPU work (data loading, CPU ops) "
             f"may use more; OMP_NUM_THREADS={per_process}")
    else:
        _say("threads", "ok", line)
    return per_process


# loader workers are processes too, on the same cores, busy while the
# training's threads compute
def _workers(loader, per_process, threads=1):
    workers = getattr(loader, "num_workers", 0)
    line = (f"{workers} loader worker{'s' * (workers != 1)} per rank, "
            f"{per_process} core{'s' * (per_process != 1)} per rank")
    if workers > per_process:
        _say("workers", "PROBLEM", f"{line}: more worker processes than "
             f"cores; num_workers={max(1, per_process - 1)}")
    elif workers and threads + workers > per_process:
        _say("workers", "note", f"{line}: with {threads} training threads, "
             f"{threads + workers} busy at once; "
             f"OMP_NUM_THREADS={max(1, per_process - workers)} or fewer "
             "workers")
    elif workers == 0 and per_process > 2:
        _say("workers", "note", f"{line}: the training process prepares every "
             "batch itself; workers could do it meanwhile (num_workers)")
    else:
        _say("workers", "ok", line)


def check(model, loader=None, global_batch=None, epoch=None, exit_timeout=300,
          end_job=False):
    """Run on every rank, once, with the model (DDP-wrapped or not) and the
    training loader (None where the script draws its batches itself).
    end_job=True: a rank stuck for exit_timeout after it stopped training ends
    the job."""
    if not dist.is_initialized():
        raise SystemExit(
            "error: ddp_check.check() runs after init_process_group()")
    # Its own gloo group: its messages never mix with the training's (nccl or
    # gloo) ones.
    _state["group"] = dist.new_group(backend="gloo")
    _state.update(forwards=0, micro=None, batch_said=False)
    _world()
    compare_first = _shards(loader, epoch)
    _state["sizes"] = sizes = _batch_sizes(loader)
    if None not in sizes and (global_batch is None
                              or sum(sizes) == global_batch):
        # said again if the steps accumulate
        _batch(sizes, [1] * len(sizes), global_batch)
        _state["batch_said"] = True
    per_process = _threads()
    if loader is not None:
        _workers(loader, per_process, torch.get_num_threads())
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        _say("replicas", "PROBLEM", f"the model is a {type(model).__name__}, "
             "not DistributedDataParallel: each rank trains its own copy")
    params = [p for p in model.parameters() if p.requires_grad]
    mine = {id(p) for p in params}

    # every training forward (the exits watch counts them); up to the first
    # optimizer step, the micro-batches of a step
    def before_forward(module, args, kwargs):
        if not (module.training and torch.is_grad_enabled()):
            return
        _state["steps"] += 1
        _moved()
        if step_hook is None:  # the first optimizer step is behind us
            return
        # zero_grad(): a new optimizer step begins
        if params and params[0].grad is None:
            _state["forwards"] = 0
        _state["forwards"] += 1
        if _state["steps"] == 1:
            _state["micro"] = next((len(t) for t in _tensors((args, kwargs))
                                    if t.dim()), None)
            if compare_first:
                _first_batches((args, kwargs))

    # any optimizer's step: is it the model's?
    def after_step(optimizer, args, kwargs):
        nonlocal step_hook
        if step_hook is None or not any(
                id(p) in mine for group in optimizer.param_groups
                for p in group["params"]):
            return
        step_hook.remove()
        step_hook = None
        _moved()
        _first_step(model, global_batch)
    step_hook = register_optimizer_step_post_hook(after_step)
    model.register_forward_pre_hook(before_forward, with_kwargs=True)
    _exits(model, exit_timeout, end_job)
    _say("exits", "ok", f"watching: a rank stuck for {exit_timeout} s after "
         "it stopped training while others did not "
         + ("ends the job" if end_job else "is reported"))
