"""The local cluster is a real Slurm: two nodes, CSC's partition names, fake GPUs, Lmod."""
import subprocess

import local_slurm


def sh(cmd, env):
    import os
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=120, env={**os.environ, **env})


def test_two_nodes_and_csc_partitions(cluster):
    r = sh("sinfo -h -o '%P %D %T'", cluster)
    parts = {line.split()[0].rstrip("*"): line.split()[1:] for line in r.stdout.splitlines()}
    for p in ["gpu", "gputest", "gpusmall", "gpumedium", "small-g", "standard-g"]:
        assert parts[p][0] == "2", r.stdout


def test_srun_spans_both_nodes(cluster):
    r = sh("srun -N2 --ntasks-per-node=1 -t 1 hostname | sort", cluster)
    assert r.stdout.split() == ["node1", "node2"], r.stderr


def test_gpu_requests_of_each_cluster_are_accepted(cluster):
    for req in ["--gres=gpu:v100:4", "--gres=gpu:a100:4", "--gpus-per-node=8", "--gres=gpu:v100:1"]:
        r = sh(f"srun -N1 -t 1 {req} bash -c 'echo $SLURM_GPUS_ON_NODE $CUDA_VISIBLE_DEVICES'", cluster)
        assert r.returncode == 0, (req, r.stderr)
        n = int(r.stdout.split()[0])
        assert n == len(r.stdout.split()[1].split(",")) and n in (1, 4, 8), r.stdout


def test_unknown_gpu_type_is_rejected(cluster):
    r = sh("srun -N1 -t 1 --gres=gpu:h100:1 true", cluster)
    assert r.returncode != 0 and "Requested node configuration is not available" in r.stderr


def test_module_load_pytorch_in_a_batch_script(cluster, tmp_path):
    script = tmp_path / "m.sbatch"
    script.write_text("#!/bin/bash\nmodule purge\nmodule load pytorch\npython -c 'import torch; print(torch.__version__)'\n")
    r = sh(f"sbatch --wait -o {tmp_path}/out -t 1 {script}", cluster)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out").read_text().startswith("2.14.1")


def test_start_is_idempotent(cluster):
    assert local_slurm.running()
    local_slurm.start()  # a healthy cluster is reused, not restarted
    assert local_slurm.running()
