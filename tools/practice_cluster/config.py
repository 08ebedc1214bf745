"""The practice cluster's configuration, rendered from the tables: pure functions from
tools/clusters/*.toml to the text of slurm.conf, gres.conf, slurmdbd.conf, job_submit.lua, the
sacctmgr commands and the module files. Nothing here needs root, runs a command or writes a file:
daemons.py writes what render() returns and starts the daemons on it.
"""
import os
import tomllib
from pathlib import Path

# --8<-- [start:settings]
TOOLS = Path(__file__).resolve().parent.parent  # tools/: the tables and the templates *.in
STATE = Path(os.environ.get("LOCAL_SLURM_DIR", "/tmp/ddp-tutorial-slurm"))
TABLES = TOOLS / "clusters"   # roihu.toml, lumi.toml
CLUSTERS = {name: tomllib.loads((TABLES / f"{name}.toml").read_text()) for name in ("roihu", "lumi")}
BRIDGE, BRIDGE_IP, SUBNET = "ddpslurm0", "10.77.0.1", "10.77.0"
PORTS = {"slurmctld": 6917, "slurmd": 6918, "mariadb": 6919, "slurmdbd": 6920}  # not Slurm's defaults
LMOD_INIT = "/usr/share/lmod/lmod/init/bash"
APPL = Path("/appl")  # LUMI's software tree path; created empty, filled only inside LUMI nodes
NO_PROJECT = "no_project"  # every user's default account: a job without --account is refused
# An ordinary user with the same projects as root: the tests run every notebook, and the jobs
# they submit, as this user (cluster_user.py), as readers run them on a cluster.
CLUSTER_USER = "tutor"
# Each node's own local disk, a folder STATE/nodes/<node> that only that node mounts: on Roihu
# nodes at NVME, where each job gets $TMPDIR (NVME/job_<id>/tmp, emptied when the job ends);
# on LUMI nodes as /tmp (LUMI's /tmp is the node's RAM, cleaned after each job).
NVME = Path("/run/nvme")
FULL_DISK = NVME / "full"  # on Roihu nodes: a disk with 64 KiB, step 13's full $TMPDIR
# Folders under /tmp that a LUMI node's own /tmp carries along (bind mounts inside it): the
# cluster's state, and the repository whose jobs it runs when that lies under /tmp (a clone in
# /tmp, as CI may make): without them a LUMI job could not see its own batch script's files.
CARRIED = [d for d in (STATE, TOOLS.parent) if d.is_relative_to("/tmp")]
# --8<-- [end:settings]
DB_USER, DB_PASS = "slurm", "practice"  # a database on 127.0.0.1 of this machine only
LAUNCHERS = ("torchrun", "python", "python3", "deepspeed")  # names of launchers-practice on PATH


def nodes(clusters):
    """Node name -> (cluster key, address on the bridge), in the tables' order."""
    found = {}
    for key, c in clusters.items():
        for name in c["node"]["names"]:
            found[name] = (key, f"{SUBNET}.{11 + len(found)}")
    return found


NODES = nodes(CLUSTERS)


def env(state=STATE):
    """The environment variables that client commands and batch jobs need."""
    return {
        "SLURM_CONF": str(state / "slurm.conf"),
        "BASH_ENV": LMOD_INIT,  # gives a plain `#!/bin/bash` batch script the `module` command
        "MODULEPATH": str(state / "modules" / "site"),  # each node mounts its cluster's modules here
    }


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
        # A QOS has no minimum per node (job_submit.lua checks that one), but a job on at least
        # one node has at least that many GPUs: the job's minimum is the larger of the two.
        least = max(p.get("min_gpus_per_job", 0), p.get("min_gpus_per_node", 0))
        if least:
            q["MinTRESPerJob"] = f"gres/gpu={least}"
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


def qos_limits(clusters):
    """Every partition's QOS settings, as partition_lines() gives them: {partition: {key: value}}."""
    qos = {}
    for key, c in clusters.items():
        qos.update(partition_lines(key, c)[1])
    return qos


def node_line(name, addr, c):
    n = c["node"]
    cores = n["sockets"] * n["cores_per_socket"] - n.get("reserved_cores", 0)
    # Nodes advertise the real machine's size (SlurmdParameters=config_overrides); the GPUs are
    # character devices, so Slurm hands them out and sets CUDA_VISIBLE_DEVICES, but torch sees none.
    return (f"NodeName={name} NodeAddr={addr} CPUs={cores} Boards=1 SocketsPerBoard=1 "
            f"CoresPerSocket={cores} ThreadsPerCore=1 RealMemory={n['memory_gib'] * 1024} "
            f"Gres=gpu:{n['gpu_type']}:{n['gpus']} State=UNKNOWN")


def job_submit_lua(clusters):
    """Rules Slurm has no setting for, per partition: cores per GPU, GPUs per node."""
    rules = []
    for c in clusters.values():
        alloc = c.get("gpu_allocation", {})
        for p in c["partition"]:
            rules.append(f'  ["{p["name"]}"] = {{cluster = "{c["name"]}", '
                         f'max_cores_per_gpu = {alloc.get("max_cores_per_gpu", "nil")}, '
                         f'min_gpus_per_node = {p.get("min_gpus_per_node", "nil")}}},')
    return (TOOLS / "job_submit.lua.in").read_text().replace(
        "--RULES--", "\n".join(rules)).replace("--DEFAULT--", "gputest")


def first_job_id(now):
    """Job ids only grow, as on a real cluster, also across restarts of the replica (from the
    clock, `now` in seconds): a new job never meets the logs/ and runs/ files that an earlier job
    with its id left behind."""
    return 100_000 + int(now) % 890_000


def slurm_conf(state, host, job_id, clusters):
    """slurm.conf: the controller on the bridge, accounting, the nodes and the partitions."""
    logs, ctld = state / "log", state / "ctld"
    conf = f"""# Written by tools/practice_cluster from tools/clusters/*.toml: a replica of Roihu-GPU and LUMI-G.
ClusterName=practice
SlurmctldHost={host}({BRIDGE_IP})
SlurmctldPort={PORTS['slurmctld']}
SlurmdPort={PORTS['slurmd']}
SlurmUser=root
AuthType=auth/munge
AuthInfo=cred_expire=5
StateSaveLocation={ctld}
SlurmdSpoolDir={state}/spool/%n
SlurmctldPidFile={state}/slurmctld.pid
SlurmdPidFile={state}/slurmd-%n.pid
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
FirstJobId={job_id}
ReturnToService=2
SlurmdParameters=config_overrides
# Roihu's per-job $TMPDIR on the node's local disk: made on every node at the start, exported to
# each task, removed at the end (see node_disk_scripts()).
PrologFlags=Alloc
Prolog={state}/prolog.sh
Epilog={state}/epilog.sh
TaskProlog={state}/task-prolog.sh
GresTypes=gpu
"""
    for name, (key, addr) in nodes(clusters).items():
        conf += node_line(name, addr, clusters[key]) + "\n"
    for key, c in clusters.items():
        conf += "\n".join(partition_lines(key, c)[0]) + "\n"
    return conf


def gres_conf(state, clusters):
    """Each node's GPUs: the character devices under STATE/dev/<node> (daemons.py makes them)."""
    gres = ["AutoDetect=off"]
    for name, (key, _) in nodes(clusters).items():
        n = clusters[key]["node"]
        gres.append(f"NodeName={name} Name=gpu Type={n['gpu_type']} File={state}/dev/{name}/gpu[0-{n['gpus'] - 1}]")
    return "\n".join(gres) + "\n"


def slurmdbd_conf(state):
    return f"""AuthType=auth/munge
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
PidFile={state}/slurmdbd.pid
LogFile={state / "log"}/slurmdbd.log
"""


def node_disk_scripts(clusters):
    """Prolog (root, each node, job start), Epilog (job end), TaskProlog (each task): a Roihu
    node makes NVME/job_<id>/tmp, the task gets it as TMPDIR, the job's end removes it."""
    roihu = "|".join(clusters["roihu"]["node"]["names"])
    job = f"{NVME}/job_$SLURM_JOB_ID"
    scripts = {
        "prolog.sh": f'case "$SLURMD_NODENAME" in {roihu})\n'
                     f'  mkdir -p "{job}/tmp" && chown -R "$SLURM_JOB_UID" "{job}" && chmod 700 "{job}";;\nesac\n',
        "epilog.sh": f'case "$SLURMD_NODENAME" in {roihu}) rm -rf "{job}";; esac\nexit 0\n',
        "task-prolog.sh": f'if [ -d "{job}/tmp" ]; then echo "export TMPDIR={job}/tmp"; fi\n',
    }
    return {name: "#!/bin/sh\n# Written by tools/practice_cluster: each node's local disk.\n" + body
            for name, body in scripts.items()}


def software_files(state, venv_bin, clusters):
    """Roihu's python-pytorch module; LUMI's AI Factory module, containers and `singularity`:
    {path under the state folder: text}."""
    roihu, lumi = clusters["roihu"], clusters["lumi"]
    # Both put tools/launchers-practice.in first on PATH, as torchrun, python, python3 and
    # deepspeed (LAUNCHERS): it lets GPU-only launcher options run on these GPU-less nodes (see the file).
    launchers = state / "launchers"
    files = {"launchers/launchers-practice": (TOOLS / "launchers-practice.in").read_text()
             .replace("@VENV_BIN@", venv_bin)}
    files[f"modules/site/{roihu['module']}/{roihu['module_version']}.lua"] = (
        f'help([[Practice cluster: stands in for CSC\'s {roihu["module"]}/{roihu["module_version"]} on '
        f'Roihu; it loads this tutorial\'s virtualenv (torch 2.10.0, as CSC\'s default).]])\n'
        f'prepend_path("PATH", "{venv_bin}")\n'
        f'prepend_path("PATH", "{launchers}")  -- practice cluster only: before the virtualenv\n')
    # LUMI nodes mount STATE/lumi/appl on /appl and STATE/lumi/modules on the module path above.
    mods = "lumi/appl/" + lumi["module_path"].removeprefix("/appl/")
    files[f"{mods}/{lumi['module']}.lua"] = (
        'help([[Practice cluster: stands in for the LUMI AI Factory\'s singularity bindings.]])\n'
        'setenv("SINGULARITY_BIND", "/scratch,/project,/flash")\n'
        f'prepend_path("PATH", "{state}/lumi/bin")  -- the stand-in `singularity` (on LUMI: /usr/bin)\n')
    for sif in lumi["containers"]:
        files["lumi/appl/" + sif.removeprefix("/appl/")] = (
            "practice-cluster stand-in for a LUMI AI Factory container image\n")
    files["lumi/bin/singularity"] = ((TOOLS / "singularity.in").read_text()
                                     .replace("@VENV_BIN@", venv_bin).replace("@LAUNCHERS@", str(launchers)))
    return files


EXECUTABLE = {"prolog.sh", "epilog.sh", "task-prolog.sh", "launchers/launchers-practice", "lumi/bin/singularity"}
SECRET = {"slurmdbd.conf"}  # holds the database password: root's only


def render(state, host, venv_bin, job_id, clusters=CLUSTERS):
    """Every file the cluster's start writes under the state folder: {relative path: text}
    (modes: EXECUTABLE 755, SECRET 600, the others the umask's)."""
    files = {
        "slurm.conf": slurm_conf(state, host, job_id, clusters),
        "gres.conf": gres_conf(state, clusters),
        "cgroup.conf": "CgroupPlugin=autodetect\n",
        "job_submit.lua": job_submit_lua(clusters),
        **node_disk_scripts(clusters),
        "slurmdbd.conf": slurmdbd_conf(state),
        # Names resolve as on a real cluster: a DNS server (dnsmasq on the bridge) holds one address
        # per node name, forward and reverse; each node mounts its own /etc/hosts and resolv.conf.
        "cluster-hosts": "".join(f"{addr} {name}\n" for addr, name in
                                 [(BRIDGE_IP, host), *((a, n) for n, (_, a) in nodes(clusters).items())]),
        "hosts": "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n",
        "resolv.conf": f"nameserver {BRIDGE_IP}\n",
        **software_files(state, venv_bin, clusters),
        "env.sh": "".join(f"export {k}={v}\n" for k, v in env(state).items()),
    }
    return files


def accounting_commands(qos, users, clusters):
    """sacctmgr's commands before slurmctld runs: the cluster, the QOS without their gres/gpu
    limits (tres_commands(), once slurmctld has registered that TRES), projects and users."""
    cmds = ["add cluster practice"]
    for name, q in qos.items():
        cmds += [f"add qos {name}", f"modify qos {name} set " + " ".join(f"{k}={v}" for k, v in q.items() if "TRES" not in k)]
    for c in clusters.values():
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
    return cmds


def tres_commands(qos):
    """sacctmgr's commands once slurmctld runs: the QOS limits on gres/gpu."""
    return [f"modify qos {name} set " + " ".join(f"{k}={v}" for k, v in q.items() if "TRES" in k)
            for name, q in qos.items() if any("TRES" in k for k in q)]
