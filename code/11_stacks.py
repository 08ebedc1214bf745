"""Step 11: where is every rank of a running job? py-spy dump of each of its
processes on this node.

Run it inside the job's allocation, one task on each of the job's nodes, while
the job hangs:
    srun --overlap --jobid=<JOBID> --nodes=<the job's nodes> \
        --ntasks-per-node=1 python code/11_stacks.py
--overlap lets this step share the CPUs (and GPUs) the training holds; without
--nodes, srun starts one task on the job's first node only. Each task finds its
node's processes of the job that have a rank (RANK, set by torchrun;
SLURM_PROCID when srun alone started them) and prints py-spy's dump of each,
labelled with the rank.
"""
import os
import shutil
import subprocess


def environ(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(v.split("=", 1)
                    for v in f.read().decode(errors="replace").split("\0")
                    if "=" in v)


job, step, node = (os.environ.get(k) for k in
                   ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURMD_NODENAME"))
if not job or step is None:
    raise SystemExit("error: not inside a Slurm job step: "
                     "run srun --overlap --jobid=<JOBID> "
                     "--nodes=<the job's nodes> --ntasks-per-node=1 "
                     "python code/11_stacks.py")
if not shutil.which("py-spy"):
    raise SystemExit("error: py-spy not found: pip install py-spy==0.4.3 "
                     "(into the environment the job uses)")

found = {}  # pid -> (rank, parent pid)
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        env = environ(pid)
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        cmd = open(f"/proc/{pid}/cmdline").read()
        ppid = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]
    except OSError:  # ended meanwhile, or not ours
        continue
    # Same job, another step (not this one), this node, a Python process.
    # (The node check matters where several nodes share one process table, as
    # on the practice cluster.)
    if (env.get("SLURM_JOB_ID") != job or env.get("SLURM_STEP_ID") == step
            or env.get("SLURMD_NODENAME") != node
            or not exe.startswith("python")):
        continue
    if "RANK" in env:  # a torchrun worker
        found[pid] = int(env["RANK"]), ppid
    elif "torchrun" not in cmd and "torch.distributed.run" not in cmd:
        # srun alone: task = rank
        found[pid] = int(env.get("SLURM_PROCID", -1)), ppid
# A rank's own children (DataLoader workers) carry its variables too: keep the
# rank itself.
ranks = sorted((rank, int(pid)) for pid, (rank, ppid) in found.items()
               if ppid not in found)

if not ranks:
    print(f"{node}: no process of job {job} with a rank here", flush=True)
for rank, pid in ranks:
    # plain text, even where Jupyter forces colours
    dump = subprocess.run(["py-spy", "dump", "--pid", str(pid)],
                          capture_output=True, text=True,
                          env={**os.environ, "CLICOLOR_FORCE": "0"})
    print(f"--- rank {rank} (node {node}, pid {pid})\n"
          f"{dump.stdout}{dump.stderr}", end="", flush=True)
