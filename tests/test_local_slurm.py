"""The practice cluster is a real Slurm shaped like Roihu-GPU and LUMI-G, from tools/clusters/*.toml."""
import os
import re
import subprocess
import time
from pathlib import Path

from practice_cluster import config, daemons


def sh(cmd, env):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=120, env={**os.environ, **env})


def test_nodes_and_partitions_are_the_tables(cluster):
    r = sh("sinfo -h -N -o '%N %c %m %G %P'", cluster)
    seen = {}
    for line in r.stdout.splitlines():
        node, cpus, mem, gres, part = line.split()
        seen.setdefault(node, (int(cpus), int(mem), gres, set()))[3].add(part.rstrip("*"))
    for c in config.CLUSTERS.values():
        n = c["node"]
        for name in n["names"]:
            cpus, mem, gres, parts = seen[name]
            assert cpus == n["sockets"] * n["cores_per_socket"] - n.get("reserved_cores", 0)
            assert mem == n["memory_gib"] * 1024 and gres == f"gpu:{n['gpu_type']}:{n['gpus']}"
            assert parts == {p["name"] for p in c["partition"]}
    r = sh("sinfo -h -o '%P %l'", cluster)
    limits = dict(line.split() for line in r.stdout.splitlines())
    assert limits["gputest*"] == "15:00" and limits["dev-g"] == "3:00:00" and limits["small-g"] == "3-00:00:00"


def test_srun_spans_both_nodes_of_each_cluster(cluster):
    r = sh("srun -p gputest -A project_2001234 -N2 --gres=gpu:gh200:1 -t 1 hostname | sort", cluster)
    assert r.stdout.split() == ["r01g01", "r01g02"], r.stderr
    r = sh("srun -p dev-g -A project_462000000 -N2 --gpus-per-node=1 -t 1 hostname | sort", cluster)
    assert r.stdout.split() == ["nid005000", "nid005001"], r.stderr


def test_each_node_has_its_own_local_disk(cluster):
    """Roihu nodes: a $TMPDIR per job on each node, gone after the job; LUMI nodes: a /tmp of their
    own. Each node writes a file there and sees only its own."""
    look = "touch $D/mark-$(hostname); sleep 1; echo $(hostname) $D $(ls $D | grep mark- | xargs)"
    roihu = sh(f"srun -A project_2001234 -p gputest --gres=gpu:gh200:1 -N2 -t 1 bash -c 'D=$TMPDIR; {look}' | sort", cluster)
    lines = [l.split() for l in roihu.stdout.splitlines()]
    assert [(l[0], l[2:]) for l in lines] == [("r01g01", ["mark-r01g01"]), ("r01g02", ["mark-r01g02"])], roihu
    assert re.fullmatch(r"/run/nvme/job_\d+/tmp", lines[0][1]) and lines[0][1] == lines[1][1], roihu.stdout
    assert not list(Path("/run/nvme").glob("job_*")) and not os.path.exists(lines[0][1])  # never on the host
    lumi = sh(f"srun -p dev-g -A project_462000000 -N2 --gpus-per-node=1 -t 1 bash -c "
              f"'D=/tmp/disk-test-$SLURM_JOB_ID; mkdir -p $D; {look}; rm -r $D' | sort", cluster)
    assert [(l.split()[0], l.split()[2:]) for l in lumi.stdout.splitlines()] == [
        ("nid005000", ["mark-nid005000"]), ("nid005001", ["mark-nid005001"])], lumi


def test_names_resolve_as_on_a_real_cluster(cluster, tmp_path):
    """On a node: its own name and the other nodes' names have one address each, forward and
    reverse (c10d looks peers up by address); the host's /etc/hosts is left alone."""
    script = tmp_path / "names.sh"
    script.write_text("getent ahostsv4 $(hostname) | cut -d' ' -f1 | sort -u\ngetent hosts nid005001\n"
                      "python3 -c \"import socket; print(socket.getnameinfo(('::ffff:10.77.0.14', 0, 0, 0), 0)[0])\"\n")
    r = sh(f"srun -p gputest -A project_2001234 --gres=gpu:gh200:1 -w r01g02 -t 1 bash {script}", cluster)
    assert r.stdout.split() == ["10.77.0.12", "10.77.0.14", "nid005001", "nid005001"], (r.stdout, r.stderr)
    hosts = open("/etc/hosts").read()
    assert not any(name in hosts for name in config.NODES)


PINNED_TORCH = re.search(r"^torch==(\S+)", (Path(__file__).parent.parent / "requirements.txt").read_text(),
                         re.M).group(1)  # the clusters' version (2.10.0), what the module stand-ins give


def test_each_cluster_has_its_own_software(cluster):
    roihu = sh("srun -p gputest -A project_2001234 --gres=gpu:gh200:1 -t 1 bash -lc 'module load python-pytorch && "
               "python -c \"import torch; print(torch.__version__)\"; module use /appl/local/laifs/modules; "
               "module load lumi-aif-singularity-bindings'", cluster)
    assert roihu.stdout.startswith(PINNED_TORCH) and "lumi-aif-singularity-bindings" in roihu.stderr, roihu.stderr
    lumi = sh("srun -p small-g -A project_462000000 --gpus-per-node=1 -t 1 bash -lc 'module use /appl/local/laifs/modules; "
              "module load lumi-aif-singularity-bindings; singularity run /appl/local/laifs/containers/"
              "lumi-multitorch-latest.sif python -c \"import torch; print(torch.__version__)\"; module load python-pytorch'",
              cluster)
    assert lumi.stdout.startswith(PINNED_TORCH) and "python-pytorch" in lumi.stderr, lumi.stderr


def test_gpus_are_handed_out_but_torch_sees_none(cluster):
    r = sh("srun -p gputest -A project_2001234 --gres=gpu:gh200:2 -t 1 bash -c 'echo $SLURM_GPUS_ON_NODE $CUDA_VISIBLE_DEVICES'", cluster)
    # No cgroups here: the node's own numbers (2,3 while another job holds 0,1), not renumbered from 0
    count, visible = r.stdout.split()
    assert count == "2" and len(set(visible.split(","))) == 2 and set(visible.split(",")) <= set("0123"), r.stderr


def test_sacct_knows_finished_jobs(cluster, tmp_path):
    r = sh(f"sbatch --parsable --wait -o {tmp_path}/out -p gputest -A project_2001234 --gres=gpu:gh200:1 -t 1 --wrap 'exit 3'", cluster)
    job = r.stdout.strip()
    for _ in range(100):  # slurmctld sends the record to slurmdbd a moment after the job ends
        r = sh(f"sacct -n -X -P -j {job} -o JobID,JobName,Partition,Account,State,ExitCode", cluster)
        if r.stdout.split() == [f"{job}|wrap|gputest|project_2001234|FAILED|3:0"]:
            return
        time.sleep(0.2)
    raise AssertionError(r.stdout + r.stderr)


def test_start_is_idempotent(cluster):
    """A healthy cluster is reused, not restarted: every daemon keeps its process."""
    def pids():
        return {p.name: p.read_text().split()[0] for p in daemons.daemon_pidfiles()}
    before = pids()
    assert daemons.running() and len(before) == len(daemons.daemon_pidfiles())
    daemons.start()
    assert daemons.running() and pids() == before


# Not root, as on Roihu and LUMI: tests/test_cluster_user.py runs notebooks 01 and 05 as the
# ordinary user tutor, whose jobs (step 1's and step 5's unchanged batch scripts) run as tutor.


