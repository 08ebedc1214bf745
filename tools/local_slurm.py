#!/usr/bin/env python3
"""A practice replica of Roihu-GPU and LUMI-G: one real Slurm cluster on this one machine.

    sudo .venv/bin/python tools/local_slurm.py start    # database, slurmdbd, slurmctld, 4 slurmd
    source /tmp/ddp-tutorial-slurm/env.sh               # then sinfo, sbatch, squeue, sacct work
    sudo .venv/bin/python tools/local_slurm.py stop     # removes everything it made

Everything cluster-specific comes from one small table per cluster, tools/clusters/*.toml:
node shape (cores, memory, GPU type and count), partitions with their time limits, node
ranges, GPU limits and allowed projects, the module names. This file turns the tables into
Slurm's own configuration, so Slurm itself accepts and refuses jobs: partition limits
(EnforcePartLimits=ALL), QOS limits in a real accounting database (MariaDB + slurmdbd, which
also gives `sacct`), projects as accounts, and a job_submit.lua for the one rule Slurm has no
setting for (Roihu: at most 72 cores per GPU).

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
import tomllib
from pathlib import Path

# --8<-- [start:settings]
STATE = Path(os.environ.get("LOCAL_SLURM_DIR", "/tmp/ddp-tutorial-slurm"))
TABLES = Path(__file__).resolve().parent / "clusters"   # roihu.toml, lumi.toml
CLUSTERS = {name: tomllib.loads((TABLES / f"{name}.toml").read_text()) for name in ("roihu", "lumi")}
BRIDGE, BRIDGE_IP, SUBNET = "ddpslurm0", "10.77.0.1", "10.77.0"
PORTS = {"slurmctld": 6917, "slurmd": 6918, "mariadb": 6919, "slurmdbd": 6920}  # not Slurm's defaults
LMOD_INIT = "/usr/share/lmod/lmod/init/bash"
APPL = Path("/appl")  # LUMI's software tree path; created empty, filled only inside LUMI nodes
NO_PROJECT = "no_project"  # every user's default account: a job without --account is refused
# An ordinary user with the same projects as root: the tests run every notebook, and the jobs
# they submit, as this user (conftest.py), as readers run them on a cluster.
CLUSTER_USER = "tutor"
# Each node's own local disk, a folder STATE/nodes/<node> that only that node mounts: on Roihu
# nodes at NVME, where each job gets $TMPDIR (NVME/job_<id>/tmp, emptied when the job ends);
# on LUMI nodes as /tmp (LUMI's /tmp is the node's RAM, cleaned after each job).
NVME = Path("/run/nvme")
FULL_DISK = NVME / "full"  # on Roihu nodes: a disk with 64 KiB, step 13's full $TMPDIR
# Folders under /tmp that a LUMI node's own /tmp carries along (bind mounts inside it): the
# cluster's state, and the repository whose jobs it runs when that lies under /tmp (a clone in
# /tmp, as CI may make): without them a LUMI job could not see its own batch script's files.
CARRIED = [d for d in (STATE, Path(__file__).resolve().parent.parent) if d.is_relative_to("/tmp")]
# --8<-- [end:settings]
NODES = {}  # node name -> (cluster key, address)
for _key, _c in CLUSTERS.items():
    for _name in _c["node"]["names"]:
        NODES[_name] = (_key, f"{SUBNET}.{11 + len(NODES)}")
REQUIRED = {  # binary -> Debian package
    "munged": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client",
    "slurmdbd": "slurmdbd", "mariadbd": "mariadb-server", "dnsmasq": "dnsmasq-base", "ip": "iproute2", "nsenter": "util-linux",
    "unshare": "util-linux",
}
APT_HINT = ("apt-get install -y --no-install-recommends slurmctld slurmd slurm-client slurmdbd "
            "slurm-wlm-basic-plugins mariadb-server dnsmasq-base munge lmod iproute2")
DB_USER, DB_PASS = "slurm", "practice"  # a database on 127.0.0.1 of this machine only


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
        "MODULEPATH": str(STATE / "modules" / "site"),  # each node mounts its cluster's modules here
    }


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
    """True when a healthy cluster made by this script is up."""
    if not all(pid_alive(p) for p in daemon_pidfiles()):
        return False
    r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, env={**os.environ, **env()})
    return r.returncode == 0 and sorted(set(r.stdout.split()[::2])) == sorted(NODES)


def minutes(hms):
    """'1-12:00:00' or '00:15:00' -> minutes, as Slurm's MaxTime takes them."""
    days, _, rest = hms.rpartition("-")
    h, m, s = (int(x) for x in rest.split(":"))
    return (int(days or 0) * 24 + h) * 60 + m + (s > 0)


# --8<-- [start:tables]
def partition_lines(key, c):
    """slurm.conf partition lines and sacctmgr QOS settings from one cluster's table."""
    nodes = ",".join(c["node"]["names"])
    alloc = c.get("gpu_allocation", {})
    lines, qos = [], {}
    for p in c["partition"]:
        lo, hi = p["nodes"]
        line = (f"PartitionName={p['name']} Nodes={nodes} MaxTime={minutes(p['max_time'])} "
                f"MinNodes={lo} MaxNodes={hi} QOS={p['name']} "
                f"AllowAccounts={','.join(p.get('allow_accounts', c['accounts'] + [NO_PROJECT]))} State=UP")
        if "mem_per_gpu_gib" in alloc:  # memory follows the GPUs (Roihu's allocation type G)
            line += f" DefMemPerGPU={alloc['mem_per_gpu_gib'] * 1024}"
        if p.get("whole_nodes"):
            line += " OverSubscribe=EXCLUSIVE"
        if p["name"] == "gputest":
            line += " Default=YES"
        lines.append(line)
        q = {"Flags": "DenyOnLimit"}  # refuse at submission, with the reason, instead of pending forever
        if "min_gpus_per_job" in p:
            q["MinTRESPerJob"] = f"gres/gpu={p['min_gpus_per_job']}"
        if "min_gpus_per_node" in p:
            q["MinTRESPerJob"] = f"gres/gpu={p['min_gpus_per_node']}"
        if "max_gpus_per_job" in p:
            q["MaxTRESPerJob"] = f"gres/gpu={p['max_gpus_per_job']}"
        if "max_gpus_per_node" in p:
            q["MaxTRESPerNode"] = f"gres/gpu={p['max_gpus_per_node']}"
        if "max_jobs_per_user" in p:  # running at once: more wait in the queue (not refused)
            q["MaxJobsPerUser"] = str(p["max_jobs_per_user"])
        if "max_submit_per_user" in p:
            q["MaxSubmitJobsPerUser"] = str(p["max_submit_per_user"])
        qos[p["name"]] = q
    return lines, qos
# --8<-- [end:tables]


def node_line(name, c):
    n = c["node"]
    cores = n["sockets"] * n["cores_per_socket"] - n.get("reserved_cores", 0)
    # Nodes advertise the real machine's size (SlurmdParameters=config_overrides); the GPUs are
    # character devices, so Slurm hands them out and sets CUDA_VISIBLE_DEVICES, but torch sees none.
    return (f"NodeName={name} NodeAddr={NODES[name][1]} CPUs={cores} Boards=1 SocketsPerBoard=1 "
            f"CoresPerSocket={cores} ThreadsPerCore=1 RealMemory={n['memory_gib'] * 1024} "
            f"Gres=gpu:{n['gpu_type']}:{n['gpus']} State=UNKNOWN")


def job_submit_lua():
    """Rules Slurm has no setting for, per partition: cores per GPU, GPUs per node."""
    rules = []
    for c in CLUSTERS.values():
        alloc = c.get("gpu_allocation", {})
        for p in c["partition"]:
            rules.append(f'  ["{p["name"]}"] = {{cluster = "{c["name"]}", '
                         f'max_cores_per_gpu = {alloc.get("max_cores_per_gpu", "nil")}, '
                         f'min_gpus_per_node = {p.get("min_gpus_per_node", "nil")}}},')
    return (Path(__file__).resolve().parent / "job_submit.lua.in").read_text().replace(
        "--RULES--", "\n".join(rules)).replace("--DEFAULT--", "gputest")


def write_config(venv_bin):
    host = socket.gethostname()
    logs, ctld = STATE / "log", STATE / "ctld"
    conf = f"""# Written by tools/local_slurm.py from tools/clusters/*.toml: a replica of Roihu-GPU and LUMI-G.
ClusterName=practice
SlurmctldHost={host}({BRIDGE_IP})
SlurmctldPort={PORTS['slurmctld']}
SlurmdPort={PORTS['slurmd']}
SlurmUser=root
AuthType=auth/munge
AuthInfo=cred_expire=5
StateSaveLocation={ctld}
SlurmdSpoolDir={STATE}/spool/%n
SlurmctldPidFile={STATE}/slurmctld.pid
SlurmdPidFile={STATE}/slurmd-%n.pid
SlurmctldLogFile={logs}/slurmctld.log
SlurmdLogFile={logs}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={PORTS['slurmdbd']}
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu
EnforcePartLimits=ALL
JobSubmitPlugins=lua
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=5
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=1,sched_interval=2
MinJobAge=4
# The window between SIGTERM and SIGKILL (time limit, scancel; at preemption after GraceTime):
# Slurm's default is 30 s, sites set their own. Shorter here, so a checkpoint must be quick.
KillWait=10
# Job ids only grow, as on a real cluster, also across restarts of the replica (from the clock):
# a new job never meets the logs/ and runs/ files that an earlier job with its id left behind.
FirstJobId={100_000 + int(time.time()) % 890_000}
ReturnToService=2
SlurmdParameters=config_overrides
# Roihu's per-job $TMPDIR on the node's local disk: made on every node at the start, exported to
# each task, removed at the end (see node_disk_scripts()).
PrologFlags=Alloc
Prolog={STATE}/prolog.sh
Epilog={STATE}/epilog.sh
TaskProlog={STATE}/task-prolog.sh
GresTypes=gpu
"""
    gres = ["AutoDetect=off"]
    for name, (key, _) in NODES.items():
        conf += node_line(name, CLUSTERS[key]) + "\n"
        n = CLUSTERS[key]["node"]
        gres.append(f"NodeName={name} Name=gpu Type={n['gpu_type']} File={STATE}/dev/{name}/gpu[0-{n['gpus'] - 1}]")
    qos = {}
    for key, c in CLUSTERS.items():
        lines, q = partition_lines(key, c)
        conf += "\n".join(lines) + "\n"
        qos.update(q)
    (STATE / "slurm.conf").write_text(conf)
    (STATE / "gres.conf").write_text("\n".join(gres) + "\n")
    (STATE / "cgroup.conf").write_text("CgroupPlugin=autodetect\n")
    (STATE / "job_submit.lua").write_text(job_submit_lua())
    node_disk_scripts()
    dbd = STATE / "slurmdbd.conf"
    dbd.write_text(f"""AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={PORTS['slurmdbd']}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={PORTS['mariadb']}
StorageUser={DB_USER}
StoragePass={DB_PASS}
StorageLoc=slurm_acct_db
PidFile={STATE}/slurmdbd.pid
LogFile={logs}/slurmdbd.log
""")
    dbd.chmod(0o600)
    # Names resolve as on a real cluster: a DNS server (dnsmasq on the bridge) holds one address
    # per node name, forward and reverse; each node mounts its own /etc/hosts and resolv.conf.
    (STATE / "cluster-hosts").write_text(
        "".join(f"{addr} {name}\n" for addr, name in [(BRIDGE_IP, host), *((a, n) for n, (_, a) in NODES.items())]))
    (STATE / "hosts").write_text("127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n")
    (STATE / "resolv.conf").write_text(f"nameserver {BRIDGE_IP}\n")
    write_software(venv_bin)
    (STATE / "env.sh").write_text("".join(f"export {k}={v}\n" for k, v in env().items()))
    return qos


def node_disk_scripts():
    """Prolog (root, each node, job start), Epilog (job end), TaskProlog (each task): a Roihu
    node makes NVME/job_<id>/tmp, the task gets it as TMPDIR, the job's end removes it."""
    roihu = "|".join(CLUSTERS["roihu"]["node"]["names"])
    job = f"{NVME}/job_$SLURM_JOB_ID"
    scripts = {
        "prolog.sh": f'case "$SLURMD_NODENAME" in {roihu})\n'
                     f'  mkdir -p "{job}/tmp" && chown -R "$SLURM_JOB_UID" "{job}" && chmod 700 "{job}";;\nesac\n',
        "epilog.sh": f'case "$SLURMD_NODENAME" in {roihu}) rm -rf "{job}";; esac\nexit 0\n',
        "task-prolog.sh": f'if [ -d "{job}/tmp" ]; then echo "export TMPDIR={job}/tmp"; fi\n',
    }
    for name, body in scripts.items():
        (STATE / name).write_text("#!/bin/sh\n# Written by tools/local_slurm.py: each node's local disk.\n" + body)
        (STATE / name).chmod(0o755)


def write_software(venv_bin):
    """Roihu's python-pytorch module; LUMI's AI Factory module, containers and `singularity`."""
    roihu, lumi = CLUSTERS["roihu"], CLUSTERS["lumi"]
    # Both put tools/launchers-practice.in first on PATH, as torchrun, python, python3 and
    # deepspeed: it lets GPU-only launcher options run on these GPU-less nodes (see the file).
    launchers = STATE / "launchers"
    launchers.mkdir(parents=True, exist_ok=True)
    shim = launchers / "launchers-practice"
    shim.write_text((Path(__file__).resolve().parent / "launchers-practice.in").read_text()
                    .replace("@VENV_BIN@", venv_bin))
    shim.chmod(0o755)
    for name in ("torchrun", "python", "python3", "deepspeed"):
        (launchers / name).unlink(missing_ok=True)
        (launchers / name).symlink_to(shim.name)
    site = STATE / "modules" / "site" / roihu["module"]
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{roihu['module_version']}.lua").write_text(
        f'help([[Practice cluster: stands in for CSC\'s {roihu["module"]}/{roihu["module_version"]} on '
        f'Roihu; it loads this tutorial\'s virtualenv (torch 2.10.0, as CSC\'s default).]])\n'
        f'prepend_path("PATH", "{venv_bin}")\n'
        f'prepend_path("PATH", "{launchers}")  -- practice cluster only: before the virtualenv\n')
    # LUMI nodes mount STATE/lumi/appl on /appl and STATE/lumi/modules on the module path above.
    appl = STATE / "lumi" / "appl"
    mods = appl / lumi["module_path"].removeprefix("/appl/")
    mods.mkdir(parents=True, exist_ok=True)
    (STATE / "lumi" / "modules").mkdir(parents=True, exist_ok=True)
    (mods / f"{lumi['module']}.lua").write_text(
        'help([[Practice cluster: stands in for the LUMI AI Factory\'s singularity bindings.]])\n'
        'setenv("SINGULARITY_BIND", "/scratch,/project,/flash")\n'
        f'prepend_path("PATH", "{STATE}/lumi/bin")  -- the stand-in `singularity` (on LUMI: /usr/bin)\n')
    for sif in lumi["containers"]:
        p = appl / sif.removeprefix("/appl/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("practice-cluster stand-in for a LUMI AI Factory container image\n")
    bindir = STATE / "lumi" / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    stub = bindir / "singularity"
    stub.write_text((Path(__file__).resolve().parent / "singularity.in").read_text()
                    .replace("@VENV_BIN@", venv_bin).replace("@LAUNCHERS@", str(launchers)))
    stub.chmod(0o755)


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
    cmds = ["add cluster practice"]
    for name, q in qos.items():  # the gres/gpu limits follow once slurmctld has registered that TRES
        cmds += [f"add qos {name}", f"modify qos {name} set " + " ".join(f"{k}={v}" for k, v in q.items() if "TRES" not in k)]
    if subprocess.run(["id", CLUSTER_USER], capture_output=True).returncode:
        sh("useradd", "--create-home", "--shell", "/bin/bash", CLUSTER_USER)
    users = {"root", CLUSTER_USER} | ({os.environ["SUDO_USER"]} if os.environ.get("SUDO_USER") else set())
    for c in CLUSTERS.values():
        for acct in c["accounts"]:
            cmds.append(f"add account {acct} Description='{c['name']} project' Organization=practice")
            cmds += [f"add user {user} Account={acct}" for user in users]
    # A job without --account is refused, as on Roihu and LUMI (CSCfi/csc-user-guide
    # creating-job-scripts-roihu.md; lumi-userguide runjobs/scheduled-jobs/batch-job.md): it is
    # charged to the user's default account, which may submit nothing. MaxSubmitJobs gives CSC's
    # "AssocMaxSubmitJobLimit"; GrpSubmitJobs also holds on LUMI's partitions, whose QOS has a
    # per-user submit limit of its own (a partition QOS limit overrides the association's).
    cmds.append(f"add account {NO_PROJECT} Description='jobs without --account' Organization=practice")
    cmds.append(f"modify account {NO_PROJECT} set GrpSubmitJobs=0")
    cmds += [f"add user {user} Account={NO_PROJECT} MaxSubmitJobs=0" for user in users]
    cmds += [f"modify user {user} set DefaultAccount={NO_PROJECT}" for user in users]
    sacctmgr(cmds)


def sacctmgr(cmds):
    """Run sacctmgr commands in one process (each one costs a database round trip)."""
    r = subprocess.run(["sacctmgr", "-i"], input="\n".join(cmds) + "\n", capture_output=True, text=True,
                       env={**os.environ, **env()})
    if "error" in r.stdout.lower() + r.stderr.lower():
        raise ClusterError(f"sacctmgr failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")


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


def start(venv_bin=None):
    """Start the cluster (or reuse a healthy one); return the client environment."""
    preflight()
    if running():
        return env()
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
    project_venv = Path(__file__).resolve().parent.parent / ".venv" / "bin"
    qos = write_config(venv_bin or str(project_venv if project_venv.is_dir() else Path(sys.prefix) / "bin"))
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
    sacctmgr([f"modify qos {name} set " + " ".join(f"{k}={v}" for k, v in q.items() if "TRES" in k)
              for name, q in qos.items() if any("TRES" in k for k in q)])
    for name in NODES:
        start_node(name)

    def all_idle():
        r = client("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        states = dict(zip(r.stdout.split()[::2], r.stdout.split()[1::2]))
        return r.returncode == 0 and sorted(states) == sorted(NODES) and set(states.values()) == {"idle"}
    wait_for("the nodes (state idle)", all_idle)
    return env()


def kill_pidfile(pidfile, sig=signal.SIGTERM):
    """Signal the process a pid file names; return its pid (None: no such file or process)."""
    try:
        pid = int(Path(pidfile).read_text().split()[0])
        os.kill(pid, sig)
        return pid
    except (OSError, ValueError):
        return None


def stop(quiet=False):
    """Stop the daemons and every job process, remove namespaces, bridge and what start() made."""
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
    if quiet:
        return
    if (STATE / "made-munge").exists():
        pid = kill_pidfile("/run/munge/munged.pid")
        for _ in range(100):  # until it has gone: exiting, it removes its socket, which a munged
            if pid is None or not Path(f"/proc/{pid}").exists():  # started right after would need
                break
            time.sleep(0.1)
    shutil.rmtree(STATE, ignore_errors=True)  # logs, spool, modules: nothing is left behind
    print(f"local cluster stopped; {STATE} removed")


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else "status"
    try:
        if cmd == "start":
            start()
            for c in CLUSTERS.values():
                print(f"{c['name']}: nodes {', '.join(c['node']['names'])}; "
                      f"partitions {', '.join(p['name'] for p in c['partition'])}; projects {', '.join(c['accounts'])}")
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
