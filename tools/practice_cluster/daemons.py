"""The practice cluster's daemons, as root: write the configuration (config.py renders it), start
MariaDB, slurmdbd, slurmctld and one slurmd per node, each node in its own namespaces; stop them
and remove what start() made.

Each node is a slurmd in its own network, UTS and mount namespace: its own address on a
private bridge, its own hostname, its own /etc/hosts (one address per node name, the host's
file untouched) and, on LUMI nodes, LUMI's /appl with the AI Factory module and containers.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from . import holders
from .config import (APPL, BRIDGE, BRIDGE_IP, CARRIED, CLUSTER_USER, CLUSTERS, DB_PASS, DB_USER, EXECUTABLE,
                     FULL_DISK, LAUNCHERS, LMOD_INIT, NODES, NVME, PORTS, SECRET, STATE, TOOLS, accounting_commands,
                     first_job_id, qos_limits, render, tres_commands)
from .config import env as config_env

REQUIRED = {  # binary -> Debian package
    "munged": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client",
    "slurmdbd": "slurmdbd", "mariadbd": "mariadb-server", "dnsmasq": "dnsmasq-base", "ip": "iproute2", "nsenter": "util-linux",
    "unshare": "util-linux",
}
APT_HINT = ("apt-get install -y --no-install-recommends slurmctld slurmd slurm-client slurmdbd "
            "slurm-wlm-basic-plugins mariadb-server dnsmasq-base munge lmod iproute2")


class ClusterError(RuntimeError):
    pass


def sh(*cmd, check=True, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise ClusterError(f"`{' '.join(cmd)}` failed ({r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
    return r


def env():
    """The environment variables that client commands and batch jobs need."""
    return config_env(STATE)


def client(*cmd, check=True):
    return sh(*cmd, check=check, env={**os.environ, **env()})


def preflight():
    if os.geteuid() != 0:
        raise ClusterError("the local cluster needs root (network namespaces, munge, slurmd): run it with sudo")
    missing = [f"{b} (package {p})" for b, p in REQUIRED.items() if not shutil.which(b, path="/usr/sbin:/usr/bin:/sbin:/bin")]
    if not os.path.exists(LMOD_INIT):
        missing.append(f"{LMOD_INIT} (package lmod)")
    if not os.path.exists("/usr/lib/x86_64-linux-gnu/slurm-wlm/job_submit_lua.so") and not list(
            Path("/usr/lib").glob("*/slurm-wlm/job_submit_lua.so")):
        missing.append("job_submit_lua.so (package slurm-wlm-basic-plugins)")
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


def daemon_pidfiles():
    return [STATE / "db" / "mariadb.pid", STATE / "slurmdbd.pid", STATE / "dnsmasq.pid", STATE / "slurmctld.pid"] + [
        STATE / f"slurmd-{n}.pid" for n in NODES]


def running():
    """True when a healthy cluster made by this package is up."""
    if not all(pid_alive(p) for p in daemon_pidfiles()):
        return False
    r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, env={**os.environ, **env()})
    return r.returncode == 0 and sorted(set(r.stdout.split()[::2])) == sorted(NODES)


def write_config(venv_bin):
    """Write what config.render() gives under STATE, with the launchers' names beside their shim."""
    for name, text in render(STATE, socket.gethostname(), venv_bin, first_job_id(time.time())).items():
        path = STATE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if name in EXECUTABLE:
            path.chmod(0o755)
        if name in SECRET:
            path.chmod(0o600)
    for name in LAUNCHERS:
        (STATE / "launchers" / name).unlink(missing_ok=True)
        (STATE / "launchers" / name).symlink_to("launchers-practice")
    (STATE / "lumi" / "modules").mkdir(parents=True, exist_ok=True)  # LUMI nodes mount it on the module path


def start_munge():
    if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode == 0:
        return  # one munged per machine serves everything
    Path("/run/munge").mkdir(parents=True, exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    sh("su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged")
    (STATE / "made-munge").touch()  # so stop() ends only the munged that start() started
    # slurmdbd, started next, gives up at once without munge's socket
    wait_for("munged (its socket /run/munge/munge.socket.2)", Path("/run/munge/munge.socket.2").exists, seconds=10)


def wait_for(what, ok, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if ok():
            return
        time.sleep(0.1)
    logs = "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-1500:]}"  # (mariadb's tc.log is binary)
                     for p in sorted([*(STATE / "log").glob("*.log"), *(STATE / "db").glob("mariadb.log")]))
    stop(quiet=True)
    raise ClusterError(f"{what} did not come up within {seconds} s\n{logs}")


def start_accounting(qos):
    """MariaDB (own data dir, 127.0.0.1 only) + slurmdbd; projects, users and QOS limits."""
    db = STATE / "db"
    if not (db / "mysql").exists():
        db.mkdir(parents=True, exist_ok=True)
        shutil.chown(db, "mysql", "mysql")
        sh("mariadb-install-db", "--user=mysql", f"--datadir={db}", "--auth-root-authentication-method=socket",
           "--skip-test-db")
    init = STATE / "db-init.sql"
    init.write_text(f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{DB_PASS}';\n"
                    f"GRANT ALL ON slurm_acct_db.* TO '{DB_USER}'@'127.0.0.1';\n")
    subprocess.Popen(["mariadbd", "--user=mysql", f"--datadir={db}", "--bind-address=127.0.0.1",
                      f"--port={PORTS['mariadb']}", f"--socket={db}/mariadb.sock", f"--pid-file={db}/mariadb.pid",
                      f"--init-file={init}", f"--log-error={db}/mariadb.log", "--innodb-buffer-pool-size=32M"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_for("mariadb", lambda: subprocess.run(
        ["mariadb", "-h127.0.0.1", f"-P{PORTS['mariadb']}", f"-u{DB_USER}", f"-p{DB_PASS}", "-e", "select 1"],
        capture_output=True).returncode == 0)
    client("slurmdbd")
    wait_for("slurmdbd", lambda: client("sacctmgr", "-n", "list", "cluster", check=False).returncode == 0)
    if subprocess.run(["id", CLUSTER_USER], capture_output=True).returncode:
        sh("useradd", "--create-home", "--shell", "/bin/bash", CLUSTER_USER)
    users = sorted({"root", CLUSTER_USER} | ({os.environ["SUDO_USER"]} if os.environ.get("SUDO_USER") else set()))
    sacctmgr(accounting_commands(qos, users, CLUSTERS))


def sacctmgr(cmds):
    """Run sacctmgr commands in one process (each one costs a database round trip)."""
    r = subprocess.run(["sacctmgr", "-i"], input="\n".join(cmds) + "\n", capture_output=True, text=True,
                       env={**os.environ, **env()})
    if "error" in r.stdout.lower() + r.stderr.lower():
        raise ClusterError(f"sacctmgr failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")


def make_network():
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    for name, (_, addr) in NODES.items():
        ns, veth = f"ddp-{name}", f"veth-{name}"
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", veth, "master", BRIDGE, "up")
        sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")


def start_node(name):
    key = NODES[name][0]
    conf = STATE / "slurm.conf"
    mounts = [f"mount --bind {STATE}/hosts /etc/hosts", f"mount --bind {STATE}/resolv.conf /etc/resolv.conf"]
    disk = STATE / "nodes" / name  # this node's local disk: no other node mounts it
    if key == "lumi":
        # /tmp of its own, carrying the state folder and the repository along (mount points
        # inside it); first, so that the binds below land in the state folder this node sees
        mounts += [f"mount --bind {d} {disk / d.relative_to('/tmp')}" for d in CARRIED]
        mounts += [f"mount --rbind {disk} /tmp"]
        mounts += [f"mount --bind {STATE}/lumi/appl {APPL}",
                   f"mount --bind {STATE}/lumi/modules {STATE}/modules/site"]
    else:
        # ... and a full one beside it, for step 13's example of a full $TMPDIR: 64 KiB
        mounts += [f"mount --bind {disk} {NVME}", f"mkdir -p {FULL_DISK}",
                   f"mount -t tmpfs -o size=64k,mode=1777 tmpfs {FULL_DISK}"]
    # Not `ip netns exec`: it remounts /sys and slurmd then cannot find the cgroup fs.
    sh("nsenter", f"--net=/run/netns/ddp-{name}", "unshare", "--uts", "--mount", "sh", "-c",
       "; ".join(mounts + [f"hostname {name}", f"exec slurmd -f {conf} -N {name}"]),
       env={**os.environ, **env()})


def own_tmp_folders(name):
    """The folder `name` in the /tmp of each node that has a /tmp of its own (LUMI's): a test
    run makes its TMPDIR there as on the host (mode 1777). Without it, the first job on such a
    node has slurmstepd make the folder as that job's user, mode 700, and a job of another user
    there then prints "error: TMPDIR [...] is not writeable". Empty when no cluster is set up."""
    disks = [STATE / "nodes" / n for n, (key, _) in NODES.items() if key == "lumi"]
    return [d / name for d in disks if d.is_dir()]


def start(venv_bin=None, holder=None, pid=None):
    """Start the cluster (or reuse a healthy one); count `holder` among its users (holders.py,
    while process `pid` lives; None: no holder); return the client environment."""
    preflight()
    if running():
        if not holders.holders(STATE):  # up, and nobody counted: a hand started it
            holders.hold(STATE, holders.HAND)
    else:
        fresh_start(venv_bin)
    if holder:
        holders.hold(STATE, holder, pid)
    return env()


def fresh_start(venv_bin):
    stop(quiet=True)  # a stale cluster (crashed test run, killed session) is cleaned first
    for d in ["ctld", "log", *(f"spool/{n}" for n in NODES)]:
        (STATE / d).mkdir(parents=True, exist_ok=True)
    for name, (key, _) in NODES.items():  # each node's local disk (see NVME)
        disk = STATE / "nodes" / name
        disk.mkdir(parents=True, exist_ok=True)
        disk.chmod(0o1777)  # a /tmp: every user may write, only the owner removes
        for d in CARRIED if key == "lumi" else []:
            (disk / d.relative_to("/tmp")).mkdir(parents=True, exist_ok=True)
    if not NVME.exists():
        NVME.mkdir(parents=True)
        (STATE / "made-nvme").touch()
    for name, (key, _) in NODES.items():  # fake GPUs: character devices Slurm's gres plugin hands out
        (STATE / "dev" / name).mkdir(parents=True, exist_ok=True)
        for i in range(CLUSTERS[key]["node"]["gpus"]):
            p = STATE / "dev" / name / f"gpu{i}"
            if not p.exists():
                os.mknod(p, 0o666 | 0o020000, os.makedev(195, i))
    # `module load python-pytorch` puts this on PATH: the project's venv, whichever python started us
    project_venv = TOOLS.parent / ".venv" / "bin"
    write_config(venv_bin or str(project_venv if project_venv.is_dir() else Path(sys.prefix) / "bin"))
    qos = qos_limits(CLUSTERS)
    if not APPL.exists():
        APPL.mkdir()
        (STATE / "made-appl").touch()  # so stop() removes only what start() made
    start_munge()
    start_accounting(qos)
    make_network()
    sh("dnsmasq", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", f"--addn-hosts={STATE}/cluster-hosts",
       f"--listen-address={BRIDGE_IP}", "--bind-interfaces", "--bogus-priv", "--domain-needed",
       f"--pid-file={STATE}/dnsmasq.pid", "--user=root")
    client("slurmctld", "-f", str(STATE / "slurm.conf"))
    wait_for("slurmctld", lambda: "gres/gpu" in client("sacctmgr", "-n", "-P", "list", "tres", "format=Type,Name",
                                                       check=False).stdout.replace("|", "/"))
    sacctmgr(tres_commands(qos))
    for name in NODES:
        start_node(name)

    def all_idle():
        r = client("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        states = dict(zip(r.stdout.split()[::2], r.stdout.split()[1::2]))
        return r.returncode == 0 and sorted(states) == sorted(NODES) and set(states.values()) == {"idle"}
    wait_for("the nodes (state idle)", all_idle)


def kill_pidfile(pidfile, sig=signal.SIGTERM):
    """Signal the process a pid file names; return its pid (None: no such file or process)."""
    try:
        pid = int(Path(pidfile).read_text().split()[0])
        os.kill(pid, sig)
        return pid
    except (OSError, ValueError):
        return None


def release(holder, quiet=False):
    """`holder` uses the cluster no more: stop it when no other holder is left; return those left."""
    left = holders.let_go(STATE, holder)
    if not left:
        stop(quiet=quiet)
    return left


def stop(quiet=False):
    """Stop the daemons and every job process, remove namespaces, bridge and what start() made,
    whoever holds the cluster (release() asks them first)."""
    pidfiles = list(STATE.glob("*.pid")) + list(STATE.glob("db/*.pid"))
    for p in pidfiles:
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
        sh("ip", "link", "del", f"veth-{name}", check=False)  # `netns del` may leave it
    sh("ip", "link", "del", BRIDGE, check=False)
    deadline = time.time() + 10
    while any(pid_alive(p) for p in pidfiles) and time.time() < deadline:
        time.sleep(0.1)
    for p in pidfiles:
        kill_pidfile(p, signal.SIGKILL)
        p.unlink(missing_ok=True)
    if (STATE / "made-appl").exists():
        shutil.rmtree(APPL, ignore_errors=True)
        (STATE / "made-appl").unlink()
    if (STATE / "made-nvme").exists():
        shutil.rmtree(NVME, ignore_errors=True)
        (STATE / "made-nvme").unlink()
    shutil.rmtree(STATE / "ctld", ignore_errors=True)  # no stale jobs on the next start
    shutil.rmtree(STATE / "db", ignore_errors=True)    # nor stale accounting
    shutil.rmtree(holders.folder(STATE), ignore_errors=True)  # a stopped cluster has no users
    if (STATE / "made-munge").exists():
        pid = kill_pidfile("/run/munge/munged.pid")
        for _ in range(100):  # until it has gone: exiting, it removes its socket, which a munged
            if pid is None or not Path(f"/proc/{pid}").exists():  # started right after would need
                break
            time.sleep(0.1)
    shutil.rmtree(STATE, ignore_errors=True)  # logs, spool, modules: nothing is left behind
    if not quiet:
        print(f"local cluster stopped; {STATE} removed")
