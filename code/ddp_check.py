"""ddp_check: one call that says, one line each, whether a DDP run does what you think.

Copy this file beside your training script (it needs only Python and PyTorch) and call it
once, on every rank, after the model, the loader and its sampler exist:

    import ddp_check
    ddp_check.check(model, loader, global_batch=args.batch_size)

Rank 0 prints the lines (an exits warning: the rank that waits); each begins with
`ddp_check:` and says `ok`, `note`, `warning` or `PROBLEM`:

- world    the processes vs what Slurm allocated (tasks, nodes, GPUs) and how they started;
- shards   whether every rank's loader yields samples of its own;
- epoch    whether the sampler gets a new epoch (said again if an epoch repeats its order);
- batch    the global batch (all ranks' per-rank batches) vs the one you meant;
- replicas whether all copies of the model are equal after a training step;
- exits    a rank that stops training (model.eval(), barrier, destroy_process_group) and
           waits there while others have not stopped says so after exit_timeout, and again
           if it moves on (a save or evaluation on rank 0 alone); with end_job=True it ends
           the job instead, rather than hang until the process group's timeout;
- threads  CPU threads per process vs the cores each process has;
- workers  the loader's worker processes per rank vs those cores.

It adds no work to the training steps but one comparison after the first step; each stop
writes one key to the process group's store (a private PyTorch call, _get_default_store) and
starts a short-lived watcher thread. With end_job=True, exit_timeout= (300 s) must exceed what
some ranks do alone (a rank-0-only evaluation or checkpoint). It does not see evaluation: a
metric computed on one rank's shard, or on a padded one, and printed as global is not reported.
"""
import os
import socket
import threading
import time
import zlib

import torch
import torch.distributed as dist

_state = {"steps": 0, "progress": 0, "stops": 0}  # training steps, anything done, stops


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
    launcher = "torchrun" if torchrun else "srun" if "SLURM_PROCID" in os.environ else "?"
    here = f"{world} processes on {nodes} node{'s' if nodes > 1 else ''} ({launcher})"
    tasks, job_nodes = _env_int("SLURM_NTASKS"), _env_int("SLURM_JOB_NUM_NODES")
    gpus = _env_int("SLURM_GPUS_ON_NODE")
    if tasks is None:
        return _say("world", "ok", f"{here}, not in a Slurm job")
    slurm = f"Slurm: {tasks} task{'s' if tasks > 1 else ''} on {job_nodes} node" + (
        "s" if job_nodes > 1 else "") + (f", {gpus} GPUs per node" if gpus else "")
    if torchrun and tasks != nodes:
        return _say("world", "PROBLEM", f"{here}; {slurm}: with torchrun start one task per "
                    f"node (--ntasks-per-node=1), or these are {tasks} separate worlds")
    if not torchrun and world != tasks:
        return _say("world", "PROBLEM", f"{here}; {slurm}: every task should be one rank")
    if job_nodes and nodes != job_nodes:
        return _say("world", "PROBLEM", f"{here}; {slurm}: some nodes run nothing")
    if gpus and per_node != gpus:
        return _say("world", "PROBLEM", f"{here}; {slurm}: start one process per GPU "
                    f"({gpus} per node: --ntasks-per-node or --nproc_per_node)")
    _say("world", "ok", f"{here}; {slurm}")


def _indices(sampler):
    """The sample indices this rank's sampler gives this epoch, without changing any RNG."""
    rng = torch.get_rng_state()
    try:
        return [int(i) for i in sampler]
    finally:
        torch.set_rng_state(rng)


def _shards(loader, epoch):
    sampler = getattr(loader, "sampler", None)
    if sampler is None or type(sampler).__name__ == "_InfiniteConstantSampler":
        return _say("shards", "note", "an IterableDataset: make sure each rank reads its own part")
    mine = _indices(sampler)
    everyone = _gather((zlib.crc32(repr(mine).encode()), len(mine), mine[:4096]))
    world = len(everyone)
    distinct = len(set().union(*(set(i) for _, _, i in everyone)))
    total = sum(n for _, n, _ in everyone)
    if world > 1 and len({c for c, _, _ in everyone}) == 1:
        _say("shards", "PROBLEM", f"all {world} ranks read the same {everyone[0][1]} samples in "
             f"the same order: {world} times the work. Use DistributedSampler(dataset)")
    elif world > 1 and distinct < min(total, sum(len(i) for _, _, i in everyone)) * 0.9:
        _say("shards", "PROBLEM", f"the {world} ranks' samples overlap ({distinct} distinct "
             f"of {total} read): each rank needs its own shard (DistributedSampler)")
    else:
        _say("shards", "ok", f"each of {world} ranks reads its own {everyone[0][1]} samples")
    if not hasattr(sampler, "set_epoch"):
        return _say("epoch", "ok" if world == 1 else "note",
                    f"{type(sampler).__name__} has no set_epoch")
    if not getattr(sampler, "shuffle", True):
        return _say("epoch", "ok", "the sampler does not shuffle: every epoch has one order")
    if epoch is not None and sampler.epoch != epoch:
        return _say("epoch", "PROBLEM", f"the sampler is at epoch {sampler.epoch}, the loop at "
                    f"{epoch}: call sampler.set_epoch(epoch) at the start of every epoch")
    _say("epoch", "ok", f"the sampler is at epoch {sampler.epoch} (said again if an epoch "
         "repeats the order of the one before)")
    _watch_epochs(sampler)


def _watch_epochs(sampler):
    """Swap in a subclass whose __iter__ notices an epoch that starts with the same epoch number."""
    cls = type(sampler)
    seen = []

    def __iter__(self):
        seen.append(self.epoch)
        if len(seen) == 2 and seen[0] == seen[1]:  # say it once
            _say("epoch", "PROBLEM", f"a new pass over the data with the sampler still at epoch "
                 f"{self.epoch}: the same order again; call sampler.set_epoch(epoch) every epoch")
        return cls.__iter__(self)

    sampler.__class__ = type(cls.__name__, (cls,), {"__iter__": __iter__})


def _batch(loader, global_batch):
    batch = loader.batch_size or getattr(loader.batch_sampler, "batch_size", None)
    sizes = _gather(batch)
    if None in sizes:
        return _say("batch", "note", "batches come from a custom batch sampler: not checked")
    total = sum(sizes)
    what = f"{total} = {len(sizes)} x {sizes[0]}" if len(set(sizes)) == 1 else f"{total} = {sizes}"
    if global_batch is None:
        _say("batch", "ok", f"global batch {what} (pass global_batch= to compare)")
    elif total != global_batch:
        _say("batch", "PROBLEM", f"global batch {what}, not {global_batch}: give each rank "
             f"{global_batch} // world size (or mean it, and scale the learning rate)")
    else:
        _say("batch", "ok", f"global batch {what}")


def _checksum(model):
    with torch.no_grad():
        return torch.tensor([sum(float(p.double().sum()) for p in model.parameters())],
                            dtype=torch.float64)


def _replicas(model, step):  # every rank at its second training forward after check()
    sums = [float(s) for s in _gather(_checksum(model))]
    spread = max(sums) - min(sums)
    if spread > 1e-6 * max(1.0, max(abs(s) for s in sums)):
        _say("replicas", "PROBLEM", f"after {step} step(s) the ranks' weights differ (sums "
             f"{min(sums):.6g} .. {max(sums):.6g}): wrap the model in DDP, step every rank")
    else:
        _say("replicas", "ok", f"all {len(sums)} copies of the model are equal after {step} "
             f"step(s)")


def _moved():  # a training step, or a stop that returned
    _state["progress"] += 1
    if _state.pop("warned", False):
        print(f"ddp_check: exits    ok      rank {_state['rank']} moved on: some ranks worked "
              "alone for a while (a save, an evaluation), not a hang", flush=True)


def _exits(model, timeout, end_job):
    """When a rank stops training (model.eval(), dist.barrier, destroy_process_group) it notes so
    in the process group's key-value store, and a watcher thread waits `timeout` seconds. If the
    rank is still waiting then (no training step, the call has not returned) while another rank
    has not stopped as often, it says so, and ends the job if end_job; otherwise it says so
    again when the rank moves on. It never blocks the rank itself: a rank-0-only validation that
    comes back to training within `timeout` goes on unnoticed."""
    store = dist.PrefixStore("ddp_check/", dist.distributed_c10d._get_default_store())
    rank, world = dist.get_rank(), dist.get_world_size()
    _state["rank"] = rank

    def watch(stops, progress):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _state["progress"] != progress:  # trained again, or the call returned
                return
            time.sleep(0.2)
        behind = [r for r in range(world) if r != rank and (
            not store.check([f"stops{r}"]) or int(store.get(f"stops{r}")) < stops)]
        if not behind:
            return
        print(f"ddp_check: exits    {'PROBLEM' if end_job else 'warning'} rank {rank} stopped "
              f"training after {_state['steps']} step(s); rank(s) {', '.join(map(str, behind))} did "
              f"not, and nothing moved for {timeout} s: a break, return or exit that only some "
              "ranks take (inside `if rank == 0:`?)" + ("" if end_job else ", or a long save or "
              "evaluation on some ranks only (said if it moves on)"), flush=True)
        if end_job:
            os._exit(1)
        _state["warned"] = True  # _moved() says so when it moves on; a hang ends at the
        # process group's own timeout

    def stopping():
        _state["stops"] += 1
        store.set(f"stops{rank}", str(_state["stops"]))
        threading.Thread(target=watch, args=(_state["stops"], _state["progress"]), daemon=True).start()

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
    where = _gather((socket.gethostname(), tuple(sorted(os.sched_getaffinity(0)))))
    sharing = where.count(where[dist.get_rank()])  # processes on this node with the same cores
    per_process = max(1, cores // sharing)
    line = (f"{threads} thread{'s' if threads > 1 else ''} per process (OMP_NUM_THREADS="
            f"{omp or 'unset'}), {per_process} core{'s' if per_process > 1 else ''} each "
            f"({cores} shared by {sharing})" if sharing > 1 else
            f"{threads} threads per process (OMP_NUM_THREADS={omp or 'unset'}), {cores} cores each")
    if threads > per_process:
        _say("threads", "PROBLEM", f"{line}: more threads than cores; set OMP_NUM_THREADS="
             f"{per_process}")
    elif threads < per_process // 2:
        _say("threads", "note", f"{line}: CPU work (data loading, CPU ops) may use more; "
             f"OMP_NUM_THREADS={per_process}")
    else:
        _say("threads", "ok", line)
    return per_process


def _workers(loader, per_process):  # loader workers are processes too, on the same cores
    workers = getattr(loader, "num_workers", 0)
    line = (f"{workers} loader worker{'s' * (workers != 1)} per rank, "
            f"{per_process} core{'s' * (per_process != 1)} per rank")
    if workers > per_process:
        _say("workers", "PROBLEM", f"{line}: more worker processes than cores; "
             f"num_workers={max(1, per_process - 1)}")
    elif workers == 0 and per_process > 2:
        _say("workers", "note", f"{line}: the training process prepares every batch itself; "
             "workers could do it meanwhile (num_workers)")
    else:
        _say("workers", "ok", line)


def check(model, loader, global_batch=None, epoch=None, exit_timeout=300, end_job=False):
    """Run on every rank, once, with the model (DDP-wrapped or not) and the training loader.
    end_job=True: a rank stuck for exit_timeout after it stopped training ends the job."""
    if not dist.is_initialized():
        raise SystemExit("error: ddp_check.check() runs after init_process_group()")
    # Its own gloo group: its messages never mix with the training's (nccl or gloo) ones.
    _state["group"] = dist.new_group(backend="gloo")
    _world()
    _shards(loader, epoch)
    _batch(loader, global_batch)
    _workers(loader, _threads())
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        _say("replicas", "PROBLEM", f"the model is a {type(model).__name__}, not "
             "DistributedDataParallel: each rank trains its own copy")

    def before_forward(module, inputs):  # counts training steps; compares after the first one
        if module.training and torch.is_grad_enabled():
            _state["steps"] += 1
            _moved()
            if _state["steps"] == 2:
                _replicas(model, 1)
    model.register_forward_pre_hook(before_forward)
    _exits(model, exit_timeout, end_job)
    _say("exits", "ok", f"watching: a rank stuck for {exit_timeout} s after it stopped training "
         "while others did not " + ("ends the job" if end_job else "is reported"))
