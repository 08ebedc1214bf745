"""A stand-in for `myprog.py` in CSC's example batch scripts: how many processes started, on how
many nodes, and whether they can talk to each other."""
import os
import socket

if "RANK" in os.environ:  # started by torchrun: one world, one all_reduce across it
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    ones = torch.ones(1)
    dist.all_reduce(ones)
    hosts = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    if dist.get_rank() == 0:
        print(f"probe: {int(ones.item())} processes on {len(set(hosts))} nodes talked (torchrun)", flush=True)
    dist.barrier()
    dist.destroy_process_group()
else:  # one task per GPU, started by srun (Lightning's pattern)
    print(f"probe: task {os.environ['SLURM_PROCID']} of {os.environ['SLURM_NTASKS']} on {socket.gethostname()}", flush=True)
