#!/usr/bin/env python3
"""A real two-node Slurm cluster on this one machine, for the tests and for practice.

    sudo .venv/bin/python tools/local_slurm.py start    # munged + slurmctld + 2 slurmd
    source /tmp/ddp-tutorial-slurm/env.sh               # then sinfo, sbatch, squeue work
    sudo .venv/bin/python tools/local_slurm.py stop     # removes everything it made

Each node is a slurmd in its own network + UTS namespace (own IP address, own hostname),
joined to the controller by a bridge. Nodes advertise cluster-sized resources and fake GPUs
(character devices), and the partitions carry CSC's names, so unchanged Puhti / Mahti / LUMI
batch scripts are accepted. An Lmod module `pytorch` puts this project's virtualenv on PATH,
so `module purge; module load pytorch` works as on CSC's clusters.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

# --8<-- [start:settings]
STATE = Path(os.environ.get("LOCAL_SLURM_DIR", "/tmp/ddp-tutorial-slurm"))
NODES = {"node1": "10.77.0.11", "node2": "10.77.0.12"}  # name -> address on the bridge
BRIDGE, BRIDGE_IP = "ddpslurm0", "10.77.0.1"
HOSTS_MARK = "# ddp-tutorial local slurm"
PORTS = (6917, 6918)  # slurmctld, slurmd: not Slurm's defaults, so a real local Slurm is untouched
# Partitions named like the real clusters': Puhti, Mahti, LUMI.
PARTITIONS = ["gpu", "gputest", "small", "test", "gpusmall", "gpumedium", "small-g", "standard-g", "dev-g"]
LMOD_INIT = "/usr/share/lmod/lmod/init/bash"
# --8<-- [end:settings]
REQUIRED = {  # binary -> Debian package
    "munged": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client",
    "ip": "iproute2", "nsenter": "util-linux", "unshare": "util-linux",
}
APT_HINT = "apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge lmod iproute2"


class ClusterError(RuntimeError):
    pass


def sh(*cmd, check=True, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise ClusterError(f"`{' '.join(cmd)}` failed ({r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
    return r


def env():
    """The environment variables that client commands and batch jobs need."""
    return {
        "SLURM_CONF": str(STATE / "slurm.conf"),
        "BASH_ENV": LMOD_INIT,  # gives a plain `#!/bin/bash` batch script the `module` command
        "MODULEPATH": str(STATE / "modules"),
    }


def preflight():
    if os.geteuid() != 0:
        raise ClusterError("the local cluster needs root (network namespaces, munge, slurmd): run it with sudo")
    missing = [f"{b} (package {p})" for b, p in REQUIRED.items() if not shutil.which(b, path="/usr/sbin:/usr/bin:/sbin:/bin")]
    if not os.path.exists(LMOD_INIT):
        missing.append(f"{LMOD_INIT} (package lmod)")
    if missing:
        raise ClusterError(f"missing: {', '.join(missing)}. Install with: {APT_HINT}")
    if not Path("/etc/munge/munge.key").exists():
        raise ClusterError("missing /etc/munge/munge.key: run `mungekey --create` (package munge)")


def pid_alive(pidfile):
    try:
        os.kill(int(Path(pidfile).read_text().split()[0]), 0)
        return True
    except (OSError, ValueError):
        return False


def running():
    """True when a healthy cluster made by this script is up."""
    pids = [STATE / "slurmctld.pid"] + [STATE / f"slurmd-{n}.pid" for n in NODES]
    if not all(pid_alive(p) for p in pids):
        return False
    r = subprocess.run(["sinfo", "-h", "-o", "%n %T"], capture_output=True, text=True, env={**os.environ, **env()})
    return r.returncode == 0 and sorted(r.stdout.split()[::2]) == sorted(NODES)


def write_config(venv_bin):
    host = socket.gethostname()
    cpus = "CPUs=128 Boards=1 SocketsPerBoard=2 CoresPerSocket=64 ThreadsPerCore=1 RealMemory=500000"
    gres = "Gres=gpu:v100:4,gpu:a100:4,gpu:mi250:8"  # Puhti, Mahti and LUMI types on every node
    conf = f"""# Written by tools/local_slurm.py: a 2-node practice cluster on one machine.
ClusterName=local
SlurmctldHost={host}({BRIDGE_IP})
SlurmctldPort={PORTS[0]}
SlurmdPort={PORTS[1]}
SlurmUser=root
AuthType=auth/munge
AuthInfo=cred_expire=5
StateSaveLocation={STATE}/ctld
SlurmdSpoolDir={STATE}/spool/%n
SlurmctldPidFile={STATE}/slurmctld.pid
SlurmdPidFile={STATE}/slurmd-%n.pid
SlurmctldLogFile={STATE}/log/slurmctld.log
SlurmdLogFile={STATE}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=1,sched_interval=2
MinJobAge=4
ReturnToService=2
SlurmdParameters=config_overrides
GresTypes=gpu
"""
    for name, addr in NODES.items():
        conf += f"NodeName={name} NodeAddr={addr} {cpus} {gres} State=UNKNOWN\n"
    for i, part in enumerate(PARTITIONS):
        conf += f"PartitionName={part} Nodes=ALL Default={'YES' if i == 0 else 'NO'} MaxTime=INFINITE State=UP\n"
    (STATE / "slurm.conf").write_text(conf)
    dev = STATE / "dev"
    (STATE / "gres.conf").write_text(
        "AutoDetect=off\n"
        f"Name=gpu Type=v100 File={dev}/nvidia[0-3]\n"
        f"Name=gpu Type=a100 File={dev}/nvidia[4-7]\n"
        f"Name=gpu Type=mi250 File={dev}/nvidia[8-15]\n")
    (STATE / "cgroup.conf").write_text("CgroupPlugin=autodetect\n")
    (STATE / "modules").mkdir(exist_ok=True)
    (STATE / "modules" / "pytorch.lua").write_text(
        'help("This tutorial\'s virtualenv: torch, torchvision, ...")\n'
        f'prepend_path("PATH", "{venv_bin}")\n')
    (STATE / "env.sh").write_text("".join(f"export {k}={v}\n" for k, v in env().items()))


def make_network():
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    for name, addr in NODES.items():
        ns, veth = f"ddp-{name}", f"veth-ddp-{name}"
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", veth, "master", BRIDGE, "up")
        sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    lines = [l for l in Path("/etc/hosts").read_text().splitlines() if HOSTS_MARK not in l]
    lines += [f"{addr} {name} {HOSTS_MARK}" for name, addr in NODES.items()]
    # c10d looks up the peer's name of each connection, as an IPv4-mapped IPv6 address; the
    # namespaces reach no DNS server, so without these lines every job prints warnings.
    lines += [f"::ffff:{addr} {name} {HOSTS_MARK}" for name, addr in NODES.items()]
    lines += [f"::ffff:127.0.0.1 localhost {HOSTS_MARK}"]
    Path("/etc/hosts").write_text("\n".join(lines) + "\n")


def start_munge():
    r = subprocess.run(["pgrep", "-x", "munged"], capture_output=True)
    if r.returncode == 0:
        return  # one munged per machine serves everything
    Path("/run/munge").mkdir(parents=True, exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    sh("su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged")


def start(venv_bin=None):
    """Start the cluster (or reuse a healthy one); return the client environment."""
    preflight()
    if running():
        return env()
    stop(quiet=True)  # a stale cluster (crashed test run, killed session) is cleaned first
    for d in ["ctld", "log", "dev", *(f"spool/{n}" for n in NODES)]:
        (STATE / d).mkdir(parents=True, exist_ok=True)
    for i in range(16):  # fake GPUs: character devices that Slurm's gres plugin hands out
        p = STATE / "dev" / f"nvidia{i}"
        if not p.exists():
            os.mknod(p, 0o666 | 0o020000, os.makedev(195, i))
    # `module load pytorch` puts this on PATH: the project's venv, whichever python started us
    project_venv = Path(__file__).resolve().parent.parent / ".venv" / "bin"
    write_config(venv_bin or str(project_venv if project_venv.is_dir() else Path(sys.prefix) / "bin"))
    start_munge()
    make_network()
    conf = str(STATE / "slurm.conf")
    sh("slurmctld", "-f", conf, env={**os.environ, **env()})
    for name in NODES:
        # Not `ip netns exec`: it remounts /sys and slurmd then cannot find the cgroup fs.
        sh("nsenter", f"--net=/run/netns/ddp-{name}", "unshare", "--uts", "sh", "-c",
           f"hostname {name}; exec slurmd -f {conf} -N {name}", env={**os.environ, **env()})
    deadline = time.time() + 30
    while time.time() < deadline:
        r = subprocess.run(["sinfo", "-h", "-o", "%n %T"], capture_output=True, text=True, env={**os.environ, **env()})
        states = dict(zip(r.stdout.split()[::2], r.stdout.split()[1::2]))
        if r.returncode == 0 and sorted(states) == sorted(NODES) and set(states.values()) == {"idle"}:
            return env()
        time.sleep(0.2)
    logs = "\n".join(f"--- {p}\n{p.read_text()[-1500:]}" for p in sorted((STATE / "log").glob("*.log")))
    stop(quiet=True)
    raise ClusterError(f"nodes did not reach idle within 30 s (sinfo: {r.stdout.strip() or r.stderr.strip()})\n{logs}")


def kill_pidfile(pidfile, sig=signal.SIGTERM):
    try:
        os.kill(int(Path(pidfile).read_text().split()[0]), sig)
    except (OSError, ValueError):
        pass


def stop(quiet=False):
    """Stop the daemons and every job process, remove namespaces, bridge and /etc/hosts lines."""
    for p in STATE.glob("*.pid"):
        kill_pidfile(p)
    for name in NODES:
        ns = f"ddp-{name}"
        if Path(f"/run/netns/{ns}").exists():
            for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)  # job steps left behind
                except OSError:
                    pass
            sh("ip", "netns", "del", ns, check=False)
        sh("ip", "link", "del", f"veth-ddp-{name}", check=False)  # `netns del` may leave it
    sh("ip", "link", "del", BRIDGE, check=False)
    if Path("/etc/hosts").exists():
        lines = Path("/etc/hosts").read_text().splitlines()
        kept = [l for l in lines if HOSTS_MARK not in l]
        if kept != lines:
            Path("/etc/hosts").write_text("\n".join(kept) + "\n")
    deadline = time.time() + 10
    while any(pid_alive(p) for p in STATE.glob("*.pid")) and time.time() < deadline:
        time.sleep(0.1)
    for p in STATE.glob("*.pid"):
        kill_pidfile(p, signal.SIGKILL)
    shutil.rmtree(STATE / "ctld", ignore_errors=True)  # no stale jobs on the next start
    for p in STATE.glob("*.pid"):
        p.unlink()
    if not quiet:
        print("local cluster stopped")


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else "status"
    try:
        if cmd == "start":
            start()
            print(f"local cluster up: nodes {', '.join(NODES)}; partitions {', '.join(PARTITIONS)}")
            print(f"to use it: source {STATE / 'env.sh'}")
        elif cmd == "stop":
            stop()
        elif cmd == "status":
            print("running" if running() else "not running")
            return 0 if running() else 1
        elif cmd == "env":
            print((STATE / "env.sh").read_text(), end="")
        else:
            print(__doc__)
            return 2
    except ClusterError as e:
        print(f"local_slurm: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
