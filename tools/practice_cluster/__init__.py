"""A practice replica of Roihu-GPU and LUMI-G: one real Slurm cluster on this one machine.

    sudo .venv/bin/python tools/practice_cluster start   # database, slurmdbd, slurmctld, 4 slurmd
    source /tmp/ddp-tutorial-slurm/env.sh                # then sinfo, sbatch, squeue, sacct work
    sudo .venv/bin/python tools/practice_cluster stop    # removes everything it made

(`python -m practice_cluster start|stop` with tools/ on the path is the same.) Everything
cluster-specific comes from one small table per cluster, tools/clusters/*.toml: node shape
(cores, memory, GPU type and count), partitions with their time limits, node ranges, GPU limits
and allowed projects, the module names. config.py turns the tables into Slurm's own
configuration, so Slurm itself accepts and refuses jobs: partition limits (EnforcePartLimits=ALL),
QOS limits in a real accounting database (MariaDB + slurmdbd, which also gives `sacct`),
projects as accounts, and a job_submit.lua for the rules Slurm has no setting for (Roihu: at most
72 cores per GPU). daemons.py starts and stops it as root; holders.py counts who uses it;
cluster_user.py runs notebooks and jobs as the cluster's ordinary user.
"""
