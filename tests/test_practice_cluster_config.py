"""The practice cluster's configuration, rendered from tools/clusters/*.toml without root or a
running cluster (tools/practice_cluster/config.py), and who may stop it (holders.py)."""
import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from practice_cluster import config, daemons, holders
from practice_cluster.__main__ import main

ROOT = Path(__file__).resolve().parent.parent
STATE = Path("/state")  # never written: render() only returns text
FILES = config.render(STATE, "login1", "/venv/bin", 123456)

# What the shipped tables give, line by line: the nodes, the partitions with their limits, the
# QOS limits (sacctmgr) and the job_submit.lua rules.
EXPECTED = {
    "roihu": {
        "nodes": [
            "NodeName=r01g01 NodeAddr=10.77.0.11 CPUs=288 Boards=1 SocketsPerBoard=1 CoresPerSocket=288 "
            "ThreadsPerCore=1 RealMemory=888832 Gres=gpu:gh200:4 State=UNKNOWN",
            "NodeName=r01g02 NodeAddr=10.77.0.12 CPUs=288 Boards=1 SocketsPerBoard=1 CoresPerSocket=288 "
            "ThreadsPerCore=1 RealMemory=888832 Gres=gpu:gh200:4 State=UNKNOWN"],
        "partitions": [
            "PartitionName=gputest Nodes=r01g01,r01g02 MaxTime=15 MinNodes=1 MaxNodes=2 QOS=gputest "
            "AllowAccounts=project_2001234,project_2001235,no_project State=UP DefMemPerGPU=222208 Default=YES",
            "PartitionName=gpumedium Nodes=r01g01,r01g02 MaxTime=2160 MinNodes=1 MaxNodes=4 QOS=gpumedium "
            "AllowAccounts=project_2001234,project_2001235,no_project State=UP DefMemPerGPU=222208",
            "PartitionName=gpularge Nodes=r01g01,r01g02 MaxTime=2160 MinNodes=1 MaxNodes=10 QOS=gpularge "
            "AllowAccounts=project_2001235 State=UP DefMemPerGPU=222208"],
        "qos": {
            "gputest": {"Flags": "DenyOnLimit", "MinTRESPerJob": "gres/gpu=1", "MaxTRESPerNode": "gres/gpu=4"},
            "gpumedium": {"Flags": "DenyOnLimit", "MinTRESPerJob": "gres/gpu=1", "MaxTRESPerJob": "gres/gpu=4"},
            "gpularge": {"Flags": "DenyOnLimit", "MinTRESPerJob": "gres/gpu=4"}},
        "rules": [
            '  ["gputest"] = {cluster = "Roihu-GPU", max_cores_per_gpu = 72, min_gpus_per_node = nil},',
            '  ["gpumedium"] = {cluster = "Roihu-GPU", max_cores_per_gpu = 72, min_gpus_per_node = nil},',
            '  ["gpularge"] = {cluster = "Roihu-GPU", max_cores_per_gpu = 72, min_gpus_per_node = 4},'],
        "gres": ["NodeName=r01g01 Name=gpu Type=gh200 File=/state/dev/r01g01/gpu[0-3]",
                 "NodeName=r01g02 Name=gpu Type=gh200 File=/state/dev/r01g02/gpu[0-3]"],
    },
    "lumi": {
        "nodes": [
            "NodeName=nid005000 NodeAddr=10.77.0.13 CPUs=56 Boards=1 SocketsPerBoard=1 CoresPerSocket=56 "
            "ThreadsPerCore=1 RealMemory=491520 Gres=gpu:mi250:8 State=UNKNOWN",
            "NodeName=nid005001 NodeAddr=10.77.0.14 CPUs=56 Boards=1 SocketsPerBoard=1 CoresPerSocket=56 "
            "ThreadsPerCore=1 RealMemory=491520 Gres=gpu:mi250:8 State=UNKNOWN"],
        "partitions": [
            "PartitionName=small-g Nodes=nid005000,nid005001 MaxTime=4320 MinNodes=1 MaxNodes=4 QOS=small-g "
            "AllowAccounts=project_462000000,no_project State=UP",
            "PartitionName=standard-g Nodes=nid005000,nid005001 MaxTime=2880 MinNodes=1 MaxNodes=1024 QOS=standard-g "
            "AllowAccounts=project_462000000,no_project State=UP OverSubscribe=EXCLUSIVE",
            "PartitionName=dev-g Nodes=nid005000,nid005001 MaxTime=180 MinNodes=1 MaxNodes=32 QOS=dev-g "
            "AllowAccounts=project_462000000,no_project State=UP"],
        "qos": {
            "small-g": {"Flags": "DenyOnLimit", "MaxJobsPerUser": "200", "MaxSubmitJobsPerUser": "210"},
            "standard-g": {"Flags": "DenyOnLimit", "MaxJobsPerUser": "200", "MaxSubmitJobsPerUser": "210"},
            "dev-g": {"Flags": "DenyOnLimit", "MaxJobsPerUser": "1", "MaxSubmitJobsPerUser": "2"}},
        "rules": [
            '  ["small-g"] = {cluster = "LUMI-G", max_cores_per_gpu = nil, min_gpus_per_node = nil},',
            '  ["standard-g"] = {cluster = "LUMI-G", max_cores_per_gpu = nil, min_gpus_per_node = nil},',
            '  ["dev-g"] = {cluster = "LUMI-G", max_cores_per_gpu = nil, min_gpus_per_node = nil},'],
        "gres": ["NodeName=nid005000 Name=gpu Type=mi250 File=/state/dev/nid005000/gpu[0-7]",
                 "NodeName=nid005001 Name=gpu Type=mi250 File=/state/dev/nid005001/gpu[0-7]"],
    },
}


def of_cluster(text, key, prefix):
    """The lines of `text` that start with `prefix` and name one of the cluster's nodes."""
    names = config.CLUSTERS[key]["node"]["names"]
    return [line for line in text.splitlines() if line.startswith(prefix) and any(n in line for n in names)]


@pytest.mark.parametrize("key", ["roihu", "lumi"])
def test_each_table_gives_its_nodes_partitions_and_limits(key):
    want = EXPECTED[key]
    assert of_cluster(FILES["slurm.conf"], key, "NodeName=") == want["nodes"]
    assert of_cluster(FILES["slurm.conf"], key, "PartitionName=") == want["partitions"]
    assert of_cluster(FILES["gres.conf"], key, "NodeName=") == want["gres"]
    assert config.partition_lines(key, config.CLUSTERS[key]) == (want["partitions"], want["qos"])
    rules = [line for line in FILES["job_submit.lua"].splitlines() if line.startswith("  [")]
    assert [r for r in rules if config.CLUSTERS[key]["name"] in r] == want["rules"]


def test_slurm_conf_names_the_state_folder_host_and_first_job_id():
    conf = FILES["slurm.conf"]
    for line in ["SlurmctldHost=login1(10.77.0.1)", "FirstJobId=123456", "EnforcePartLimits=ALL",
                 "StateSaveLocation=/state/ctld", "Prolog=/state/prolog.sh", "SlurmdLogFile=/state/log/slurmd-%n.log",
                 "AccountingStoragePort=6920", "JobSubmitPlugins=lua"]:
        assert line in conf.splitlines(), line
    assert [line.split()[0] for line in conf.splitlines() if "Default=YES" in line] == ["PartitionName=gputest"]
    assert "LogFile=/state/log/slurmdbd.log" in FILES["slurmdbd.conf"].splitlines()
    assert FILES["cluster-hosts"].splitlines() == ["10.77.0.1 login1", "10.77.0.11 r01g01", "10.77.0.12 r01g02",
                                                   "10.77.0.13 nid005000", "10.77.0.14 nid005001"]
    assert FILES["env.sh"] == ("export SLURM_CONF=/state/slurm.conf\nexport BASH_ENV=/usr/share/lmod/lmod/init/bash\n"
                               "export MODULEPATH=/state/modules/site\n")


def test_every_template_is_filled():
    assert not [name for name, text in FILES.items() if "@VENV_BIN@" in text or "@LAUNCHERS@" in text
                or "--RULES--" in text or "--DEFAULT--" in text]
    assert 'local DEFAULT_PARTITION = "gputest"' in FILES["job_submit.lua"]
    assert 'real="/venv/bin"' in FILES["launchers/launchers-practice"]
    module = FILES["modules/site/python-pytorch/2.10.lua"]
    assert 'prepend_path("PATH", "/venv/bin")' in module and 'prepend_path("PATH", "/state/launchers")' in module
    bindings = FILES["lumi/appl/local/laifs/modules/lumi-aif-singularity-bindings.lua"]
    assert 'prepend_path("PATH", "/state/lumi/bin")' in bindings
    for sif in config.CLUSTERS["lumi"]["containers"]:
        assert "lumi/appl/" + sif.removeprefix("/appl/") in FILES, sif


def test_only_roihu_nodes_make_a_job_disk():
    for name in ("prolog.sh", "epilog.sh"):
        assert 'case "$SLURMD_NODENAME" in r01g01|r01g02)' in FILES[name], name
    assert FILES["task-prolog.sh"].startswith("#!/bin/sh\n")


def test_the_modes_name_files_render_writes():
    assert config.EXECUTABLE | config.SECRET <= set(FILES)
    assert "slurmdbd.conf" in config.SECRET and "lumi/bin/singularity" in config.EXECUTABLE


def test_render_writes_nothing(tmp_path):
    files = config.render(tmp_path / "state", "login1", "/venv/bin", 1)
    assert f"StateSaveLocation={tmp_path}/state/ctld" in files["slurm.conf"]
    assert not (tmp_path / "state").exists()


def test_minutes_and_job_ids():
    assert [config.minutes(t) for t in ["00:15:00", "03:00:00", "1-12:00:00", "3-00:00:00", "00:00:30"]] == [
        15, 180, 2160, 4320, 1]
    assert config.first_job_id(1000) == 101_000 and config.first_job_id(1001) == 101_001
    assert 100_000 <= config.first_job_id(1_700_000_000.7) < 990_000


def with_partition(**limits):
    """Roihu's table with one partition of these GPU limits."""
    c = copy.deepcopy(config.CLUSTERS["roihu"])
    c["partition"] = [{"name": "test", "max_time": "01:00:00", "nodes": [1, 2], **limits}]
    return c


@pytest.mark.parametrize("limits, least", [
    ({"min_gpus_per_job": 2, "min_gpus_per_node": 4}, "gres/gpu=4"),
    ({"min_gpus_per_job": 8, "min_gpus_per_node": 4}, "gres/gpu=8"),
    ({"min_gpus_per_job": 1}, "gres/gpu=1"),
    ({"min_gpus_per_node": 4}, "gres/gpu=4"),
    ({}, None),
])
def test_a_partition_keeps_both_gpu_minimums(limits, least):
    """The job's minimum is the larger of the two (a job on one node or more has at least its
    per-node minimum); the per-node minimum stays job_submit.lua's rule."""
    c = with_partition(**limits)
    qos = config.partition_lines("roihu", c)[1]["test"]
    assert qos.get("MinTRESPerJob") == least
    assert config.tres_commands({"test": qos}) == ([f"modify qos test set MinTRESPerJob={least}"] if least else [])
    rule = next(line for line in config.job_submit_lua({"roihu": c}).splitlines() if '["test"]' in line)
    assert rule.endswith(f"min_gpus_per_node = {limits.get('min_gpus_per_node', 'nil')}}},")


def test_sacctmgr_commands_refuse_jobs_without_a_project():
    qos = config.qos_limits(config.CLUSTERS)
    assert qos == {**EXPECTED["roihu"]["qos"], **EXPECTED["lumi"]["qos"]}
    cmds = config.accounting_commands(qos, ["root", "tutor"], config.CLUSTERS)
    assert cmds[0] == "add cluster practice" and not [c for c in cmds if "TRES" in c]
    for line in ["add qos gputest", "modify qos gputest set Flags=DenyOnLimit",
                 "modify qos dev-g set Flags=DenyOnLimit MaxJobsPerUser=1 MaxSubmitJobsPerUser=2",
                 "add user tutor Account=project_2001235", "add user root Account=project_462000000",
                 "modify account no_project set GrpSubmitJobs=0", "add user tutor Account=no_project MaxSubmitJobs=0",
                 "modify user tutor set DefaultAccount=no_project"]:
        assert line in cmds, line
    # each account exists before its users, each user before its default account is set
    assert cmds.index("add account project_2001234 Description='Roihu-GPU project' Organization=practice") < cmds.index(
        "add user root Account=project_2001234")
    assert cmds.index("add user root Account=no_project MaxSubmitJobs=0") < cmds.index(
        "modify user root set DefaultAccount=no_project")
    assert config.tres_commands(qos) == [
        "modify qos gputest set MinTRESPerJob=gres/gpu=1 MaxTRESPerNode=gres/gpu=4",
        "modify qos gpumedium set MinTRESPerJob=gres/gpu=1 MaxTRESPerJob=gres/gpu=4",
        "modify qos gpularge set MinTRESPerJob=gres/gpu=4"]


# Who may stop the cluster: holders.py, and daemons.start/release and the command line on it,
# with the root-only steps (preflight, the daemons themselves) replaced.

def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_holders_count_until_they_let_go(tmp_path):
    assert holders.holders(tmp_path) == []
    holders.hold(tmp_path, "pytest-1", os.getpid())
    holders.hold(tmp_path, holders.HAND)
    holders.hold(tmp_path, holders.HAND)  # a second `start` by hand is the same hand
    holders.hold(tmp_path, "pytest-2", dead_pid())  # a run that was killed: stale
    assert holders.holders(tmp_path) == ["hand", "pytest-1"]
    assert holders.let_go(tmp_path, "pytest-1") == ["hand"]
    assert holders.let_go(tmp_path, "pytest-1") == ["hand"]  # twice: no harm
    assert holders.let_go(tmp_path, holders.HAND) == []


@pytest.fixture
def fake_cluster(tmp_path, monkeypatch):
    """daemons with the state folder in tmp_path and no daemons: returns the calls to stop()."""
    up, stops = [False], []
    monkeypatch.setattr(daemons, "STATE", tmp_path)
    monkeypatch.setattr(daemons, "preflight", lambda: None)
    monkeypatch.setattr(daemons, "running", lambda: up[0])
    monkeypatch.setattr(daemons, "fresh_start", lambda venv_bin: up.__setitem__(0, True))

    def stop(quiet=False):  # as daemons.stop: a stopped cluster has no holders
        stops.append(quiet)
        shutil.rmtree(holders.folder(tmp_path), ignore_errors=True)
        up[0] = False
    monkeypatch.setattr(daemons, "stop", stop)
    return stops


def test_a_test_run_leaves_the_cluster_to_a_hand_that_began_using_it(fake_cluster, capsys):
    daemons.start(holder="pytest-1", pid=os.getpid())  # the test run starts it
    assert main(["start"]) == 0  # a hand, from another shell, meanwhile
    assert daemons.release("pytest-1", quiet=True) == ["hand"] and fake_cluster == []  # the run ends
    assert main(["stop"]) == 0 and fake_cluster == [False]  # the hand's stop stops it


def test_a_hand_stop_leaves_the_cluster_to_a_running_test_run(fake_cluster, capsys):
    assert main(["start"]) == 0
    daemons.start(holder="pytest-1", pid=os.getpid())
    assert main(["stop"]) == 0 and fake_cluster == []
    assert "left running: still used by pytest-1" in capsys.readouterr().out
    assert daemons.release("pytest-1", quiet=True) == [] and fake_cluster == [True]


def test_stop_force_stops_whoever_holds_it(fake_cluster, capsys):
    daemons.start(holder="pytest-1", pid=os.getpid())
    assert main(["stop", "--force"]) == 0 and fake_cluster == [False]


def test_a_cluster_up_without_holders_is_a_hands(fake_cluster, monkeypatch):
    """Up, but nobody counted (a cluster started before holders were counted, or by hand with
    holder=None): a test run that reuses it does not stop it."""
    monkeypatch.setattr(daemons, "running", lambda: True)
    daemons.start(holder="pytest-1", pid=os.getpid())
    assert daemons.release("pytest-1") == ["hand"] and fake_cluster == []


@pytest.mark.parametrize("how", [["-m", "practice_cluster"], ["tools/practice_cluster"]])
def test_the_command_line_answers_without_root(how):
    r = subprocess.run([sys.executable, *how, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "tools")})
    assert r.returncode == 0 and "python -m practice_cluster start|stop" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, *how, "nonsense"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "tools")})
    assert r.returncode == 2
