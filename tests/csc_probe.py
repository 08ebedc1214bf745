"""A stand-in for `myprog.py` in CSC's example batch scripts: which process this is, of how many,
on which node. It imports nothing heavy (no torch: the tests start up to 16 of them on 2 cores).
Under torchrun, global ranks 0..N-1 across the nodes exist only if the nodes' torchruns met
in their rendezvous; our own step-5 jobs show the processes' all_reduce across nodes."""
import os
import socket

if "RANK" in os.environ:  # started by torchrun
    line = (f"probe: rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} on {socket.gethostname()}"
            f" (torchrun, local rank {os.environ['LOCAL_RANK']})\n")
else:  # one task per GPU, started by srun (Lightning's pattern)
    line = f"probe: task {os.environ['SLURM_PROCID']} of {os.environ['SLURM_NTASKS']} on {socket.gethostname()}\n"
os.write(1, line.encode())  # one write per line: lines of processes sharing the output never mix
