"""How a job ended, as tools/jobs.py tells it: one wait for a job (_poll) under submit(), wait_job(),
queue_state(), watch() and job_result(), and one line for each way a job ends, the same on the
practice cluster (slurmctld's record, at once) and on a real one (the accounting database's,
later). The first tests need no cluster (Slurm's answers are given); the last end real jobs
on the practice cluster each way it can end them."""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

import jobs
from conftest import stored_output

ROOT = Path(__file__).resolve().parent.parent

# Each final state as scontrol and sacct answer for it, and the line's words after "job N ".
# Where Slurm ends the job, the two ExitCodes differ: scontrol has the signal that ended the
# script, sacct the record written when Slurm ended the job, before that signal was known.
# state, scontrol's ExitCode, sacct's line, how it ended
ENDS = [("COMPLETED", "0:0", "COMPLETED|0:0", "ended with exit code 0"),
        ("FAILED", "3:0", "FAILED|3:0", "ended with exit code 3"),
        # step 7: srun's exit code for a task it ended with SIGTERM; the script itself exited
        ("FAILED", "143:0", "FAILED|143:0", "ended with exit code 143"),
        ("FAILED", "0:9", "FAILED|0:9", "was killed by signal 9 (SIGKILL)"),
        ("FAILED", "0:15", "FAILED|0:15", "was killed by signal 15 (SIGTERM)"),
        # step 1: a job whose output file cannot be opened (a number Python has no name for)
        ("FAILED", "0:53", "FAILED|0:53", "was killed by signal 53"),
        ("FAILED", "0:0", "FAILED|0:0", "ended with Slurm state FAILED"),
        ("CANCELLED", "0:15", "CANCELLED by 0|0:0", "ended with Slurm state CANCELLED"),
        ("TIMEOUT", "0:15", "TIMEOUT|0:0", "ended with Slurm state TIMEOUT"),
        ("NODE_FAIL", "0:9", "NODE_FAIL|0:0", "ended with Slurm state NODE_FAIL"),
        ("PREEMPTED", "0:15", "PREEMPTED|0:15", "ended with Slurm state PREEMPTED"),
        ("BOOT_FAIL", "0:0", "BOOT_FAIL|0:0", "ended with Slurm state BOOT_FAIL"),
        ("DEADLINE", "0:0", "DEADLINE|0:0", "ended with Slurm state DEADLINE"),
        ("OUT_OF_MEMORY", "0:125", "OUT_OF_MEMORY|0:125", "ended with Slurm state OUT_OF_MEMORY")]


def scontrol_line(state, exit_code):
    """`scontrol -o show job`'s line (shortened), with DerivedExitCode (scontrol -d) after ExitCode."""
    return (f"JobId=7 JobName=ends UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=1 Nice=0 "
            f"Account=project_462000000 QOS=small-g JobState={state} Reason=None Dependency=(null) Requeue=0 "
            f"Restarts=0 BatchFlag=1 Reboot=0 ExitCode={exit_code} DerivedExitCode=0:0 RunTime=00:00:02 "
            f"TimeLimit=00:02:00 Partition=small-g NodeList=nid005000\n")


def test_every_final_state_has_its_line():
    assert {state for state, *_ in ENDS} == set(jobs.FINAL)


@pytest.mark.parametrize("state, exit_code, sacct, how", ENDS)
def test_scontrol_and_sacct_give_one_line(state, exit_code, sacct, how):
    by_scontrol = jobs._record("scontrol", scontrol_line(state, exit_code))
    by_sacct = jobs._record("sacct", sacct + "\n")
    assert by_scontrol[0] == by_sacct[0] == state
    assert jobs._how_it_ended(*by_scontrol) == jobs._how_it_ended(*by_sacct) == how


def test_nothing_known_reads_as_unknown():
    assert jobs._record("scontrol", "") is None and jobs._record("sacct", "") is None
    assert jobs._how_it_ended(None, None, None) == "ended with exit code unknown"


class FakeSlurm:
    """squeue's answers, one per look, and the job's records, one per reading (the last of each
    repeats), on a clock that moves only when tools/jobs.py sleeps."""

    def __init__(self, looks, records, output):
        self.looks, self.records, self.output = list(looks), list(records), output
        self.now, self.sleeps, self.squeue_calls = 0.0, [], 0

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds

    def squeue(self, job_id):
        self.squeue_calls += 1
        assert self.squeue_calls < 1000, "the wait does not end"
        return self.looks.pop(0) if len(self.looks) > 1 else self.looks[0]

    def record(self, job_id, sources=None):
        return self.records.pop(0) if len(self.records) > 1 else self.records[0]

    def output_so_far(self, job_id):
        return self.output(self) if callable(self.output) else self.output


@pytest.fixture
def slurm(monkeypatch):
    """slurm(looks, records, output, practice): jobs.py talks to a FakeSlurm (job 7) instead."""
    def install(looks, records=(("COMPLETED", 0, 0),), output="", practice=True):
        fake = FakeSlurm(looks, records, output)
        monkeypatch.setattr(jobs, "time", fake)
        monkeypatch.setattr(jobs, "_squeue", fake.squeue)
        monkeypatch.setattr(jobs, "_exit_status", fake.record)
        monkeypatch.setattr(jobs, "_practice", lambda: practice)
        monkeypatch.setattr(jobs, "_sbatch", lambda args: ("7", 0))
        monkeypatch.setattr(jobs, "job_output", lambda job_id: fake.output_so_far(job_id))
        monkeypatch.setattr(jobs, "_output_so_far", fake.output_so_far)
        return fake
    return install


@pytest.mark.parametrize("state, exit_code, sacct, how", ENDS)
def test_both_paths_print_the_same_line_and_raise_unless_completed(slurm, capsys, state, exit_code, sacct, how):
    """submit() on the practice cluster and job_result() on a real one (later, from sacct)."""
    record = jobs._record("scontrol", scontrol_line(state, exit_code))
    slurm([("RUNNING", "None"), (state, "None")], [record], output="the output\n", practice=True)
    assert jobs.submit("ends.sbatch", check=False) == "the output\n"
    assert capsys.readouterr().out == f"job 7 {how}; its output:\nthe output\n"

    slurm([("", "")], [jobs._record("sacct", sacct)], output="the output\n", practice=False)
    assert jobs.job_result("7", check=False) == "the output\n"
    assert capsys.readouterr().out == f"job 7 {how}; its output:\nthe output\n"
    if state == "COMPLETED":
        assert jobs.job_result("7") == "the output\n"
    else:
        with pytest.raises(RuntimeError, match=f"^job 7 {re.escape(how)}$"):
            jobs.job_result("7")


def test_a_requeued_job_and_a_late_record_are_waited_for(slurm, capsys):
    """Requeued, the job has not ended; gone from squeue while sacct still says RUNNING (the
    accounting database a moment behind), neither."""
    fake = slurm([("PENDING", "None"), ("RUNNING", "None"), ("REQUEUED", "None"), ("PENDING", "BeginTime"),
                  ("RUNNING", "None"), ("", "")], [("RUNNING", 0, 0), ("COMPLETED", 0, 0)], output="run 1\n")
    assert [state for state, _, _ in jobs._poll("7")] == ["PENDING", "RUNNING", "REQUEUED", "PENDING", "RUNNING",
                                                         "RUNNING"]
    assert fake.squeue_calls == 7 and fake.sleeps == [0.2] * 6  # the practice cluster's pace
    slurm([("RUNNING", "None"), ("", "")], [("RUNNING", 0, 0), ("RUNNING", 0, 0), ("FAILED", 0, 9)])
    with pytest.raises(RuntimeError, match=r"^job 7 was killed by signal 9 \(SIGKILL\)$"):
        jobs.submit("ends.sbatch")
    assert capsys.readouterr().out == "job 7 was killed by signal 9 (SIGKILL); its output:\n"


def test_a_job_nobody_knows_has_ended(slurm):
    slurm([("", "")], [(None, None, None)])
    assert list(jobs._poll("7")) == []


def test_wait_job_until_text_or_end(slurm):
    slurm([("RUNNING", "None")], output=lambda fake: "epoch 0 loss\n" if fake.now >= 1 else "")
    assert jobs.wait_job("7", until="epoch 0 loss") == "epoch 0 loss\n"

    # the text printed just before the end is still seen
    slurm([("RUNNING", "None"), ("COMPLETED", "None")], output=lambda fake: "done\n" if fake.now > 0 else "")
    assert jobs.wait_job("7", until="done") == "done\n"
    slurm([("RUNNING", "None"), ("COMPLETED", "None")], output="other\n")
    assert jobs.wait_job("7") == "other\n"
    slurm([("RUNNING", "None"), ("CANCELLED", "None")], [("CANCELLED", 0, 15)], output="other\n")
    with pytest.raises(RuntimeError, match=r"^job 7 ended \(CANCELLED\) before printing 'done':\nother\n$"):
        jobs.wait_job("7", until="done")

    fake = slurm([("RUNNING", "None")], practice=False)
    with pytest.raises(RuntimeError, match=r"^job 7: still waiting after 3 s$"):
        jobs.wait_job("7", until="done", timeout=3)
    assert fake.sleeps == [1] * 4  # a real cluster's slurmctld: once a second


def test_queue_state(slurm):
    slurm([("PENDING", ""), ("PENDING", "None"), ("PENDING", "Dependency")])
    assert jobs.queue_state("7") == "PENDING (Dependency)"
    slurm([("PENDING", "Dependency"), ("PENDING", "DependencyNeverSatisfied")])
    assert jobs.queue_state("7", until="DependencyNeverSatisfied") == "PENDING (DependencyNeverSatisfied)"
    slurm([("PENDING", "Dependency"), ("", "")], [("CANCELLED", 0, 0)])  # it ended first
    assert jobs.queue_state("7", until="DependencyNeverSatisfied") == "CANCELLED"
    slurm([("PENDING", "Dependency")])
    assert jobs.queue_state("7", until="DependencyNeverSatisfied", timeout=1) == "PENDING (Dependency)"


def test_step_5_prints_what_it_stored(slurm, capsys):
    """watch(), job_result() too early and later, as notebooks/05-multinode.ipynb shows them."""
    fake = slurm([("PENDING", "BeginTime")])
    assert jobs.watch("722401", limit=5) is False
    wait = stored_output("05-multinode.ipynb", "queue-wait")
    assert capsys.readouterr().out == wait.split("job 722401 submitted\n", 1)[1]
    assert fake.sleeps == [2] * 3

    assert jobs.job_result("722401") is None
    assert capsys.readouterr().out == stored_output("05-multinode.ipynb", "queue-early")

    later = stored_output("05-multinode.ipynb", "queue-later")
    slurm([("RUNNING", "None"), ("COMPLETED", "None")], output=later.split("\n", 1)[1])
    jobs.wait_job("722401", timeout=3600)
    jobs.job_result("722401")
    assert capsys.readouterr().out == later


def test_watch_stops_when_the_job_ends(slurm, capsys):
    fake = slurm([("PENDING", "Priority")] * 16 + [("RUNNING", "None"), ("COMPLETED", "None")], practice=False)
    assert jobs.watch("7", limit=1800) is True
    out = capsys.readouterr().out
    assert out.count("\r") == 16 and out.endswith("\njob 7: RUNNING, 0:40 waited\n"), out
    assert fake.sleeps == [2] * 15 + [10] * 2  # every 2 s, after 30 s every 10 s


def test_the_notebooks_stored_lines_stay_as_they_are():
    """Every "job N ended with exit code C" line a notebook stored is what the rule prints for a
    batch script that exited with C: none of those jobs was ended by a signal or by Slurm."""
    lines = []
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            for output in cell.get("outputs", []):
                lines += re.findall(r"^job (\d+) ended with exit code (\d+); its output:$",
                                    "".join(output.get("text", "")), flags=re.M)
    assert len(lines) >= 20, lines
    for job, code in lines:
        state = "COMPLETED" if code == "0" else "FAILED"
        assert f"ended with exit code {code}" == jobs._how_it_ended(state, int(code), 0), (job, code)


# On the practice cluster: jobs that end each way it can end them. One task, 1 GiB, on LUMI's
# small-g, so that another test's job finds room beside them.
SCRIPT = """#!/bin/bash
#SBATCH --job-name=job-ends
#SBATCH --account=project_462000000
#SBATCH --partition=small-g
#SBATCH --ntasks=1
#SBATCH --mem=1G
#SBATCH --time=00:02:00
echo "job-ends: started"
{}
"""


def _slurm(cluster, *cmd, check=False):
    return subprocess.run(cmd, env={**os.environ, **cluster}, capture_output=True, text=True, check=check).stdout


def _script(folder, body):
    path = folder / "job-ends.sbatch"
    path.write_text(SCRIPT.format(body))
    return str(path)


def _by_each_source(job):
    """How the job ended as slurmctld tells it (scontrol, while it holds the job: what submit()
    reads) and as the accounting database does (sacct: what job_result() reads later)."""
    by_scontrol = jobs._exit_status(job, sources=("scontrol",))
    by_sacct = jobs.wait_recorded(job)
    return {"scontrol": jobs._how_it_ended(*by_scontrol), "sacct": jobs._how_it_ended(*by_sacct)}


@pytest.fixture(scope="module")
def timed_out(cluster, tmp_path_factory):
    """A job past its time limit. --time=1 is Slurm's least (a minute), and slurmctld looks at
    time limits every 30 s: 60 to 90 s, with no quicker way to a TIMEOUT. Submitted when this
    file's first job test starts, so that its minute passes while the other jobs run."""
    job = jobs.start(_script(tmp_path_factory.mktemp("timeout"), "sleep 150"), options=["--time=1"])
    yield job
    _slurm(cluster, "scancel", job)


@pytest.mark.parametrize("body, how", [("exit 0", "ended with exit code 0"),
                                       ("exit 3", "ended with exit code 3"),
                                       ("kill -KILL $$", "was killed by signal 9 (SIGKILL)"),
                                       ("kill -TERM $$", "was killed by signal 15 (SIGTERM)")])
def test_a_job_that_ends_by_itself(cluster, timed_out, tmp_path, capsys, monkeypatch, body, how):
    out = jobs.submit(_script(tmp_path, body), check=False)
    printed = capsys.readouterr().out
    job = re.search(r"^job (\d+) .*; its output:$", printed, flags=re.M).group(1)
    assert out.startswith("job-ends: started\n") and printed.endswith(f"\njob {job} {how}; its output:\n{out}"), printed
    assert _by_each_source(job) == {"scontrol": how, "sacct": how}
    monkeypatch.setenv("JOBS_AS_REAL_CLUSTER", "1")  # a real cluster's job_result(): the same line
    if body == "exit 0":
        assert jobs.job_result(job) == out
    else:
        with pytest.raises(RuntimeError, match=f"^job {job} {re.escape(how)}$"):
            jobs.job_result(job)
    assert capsys.readouterr().out == f"job {job} {how}; its output:\n{out}"


def _ended_by_slurm(job, state, monkeypatch, capsys):
    """Once Slurm has ended the job: its line from both sources, and job_result() as on a real
    cluster prints it and raises; returns the job's output."""
    jobs.wait_job(job, timeout=120)
    how = f"ended with Slurm state {state}"
    assert _by_each_source(job) == {"scontrol": how, "sacct": how}
    capsys.readouterr()
    monkeypatch.setenv("JOBS_AS_REAL_CLUSTER", "1")
    with pytest.raises(RuntimeError, match=f"^job {job} {how}$"):
        jobs.job_result(job)
    out = jobs.job_output(job)
    assert out.startswith("job-ends: started\n"), out
    assert capsys.readouterr().out == f"job {job} {how}; its output:\n{out}"
    return out


def test_scancel_ends_a_job_as_cancelled(cluster, tmp_path, capsys, monkeypatch):
    job = jobs.start(_script(tmp_path, "sleep 100"))
    try:
        jobs.wait_job(job, until="job-ends: started", timeout=240)  # others' jobs may hold the nodes a while
        _slurm(cluster, "scancel", job)
        out = _ended_by_slurm(job, "CANCELLED", monkeypatch, capsys)
        assert f"*** JOB {job} ON " in out and " CANCELLED AT " in out, out  # slurmstepd's line
    finally:
        _slurm(cluster, "scancel", job)


def test_a_node_set_down_ends_a_job_that_may_not_requeue(cluster, tmp_path, capsys, monkeypatch):
    """`scontrol update state=down` stops the node's jobs at once (tests/test_reliability.py
    loses a node the slow way, and its job requeues). --exclusive: no other test's job is there."""
    job = jobs.start(_script(tmp_path, "sleep 100"), options=["--no-requeue", "--exclusive"])
    node = None
    try:
        jobs.wait_job(job, until="job-ends: started", timeout=240)
        node = _slurm(cluster, "squeue", "-h", "-j", job, "-o", "%N").strip()
        assert re.fullmatch(r"nid\d+", node), node
        _slurm(cluster, "scontrol", "update", f"nodename={node}", "state=down", "reason=test_job_ends", check=True)
        _ended_by_slurm(job, "NODE_FAIL", monkeypatch, capsys)
    finally:
        _slurm(cluster, "scancel", job)
        if node:
            _slurm(cluster, "scontrol", "update", f"nodename={node}", "state=resume")
    assert "down" not in _slurm(cluster, "sinfo", "-h", "-n", node, "-o", "%T"), node


def test_the_time_limit_ends_a_job_as_timeout(cluster, timed_out, capsys, monkeypatch):
    jobs.wait_job(timed_out, until="job-ends: started", timeout=240)
    jobs.wait_job(timed_out, timeout=240)
    out = _ended_by_slurm(timed_out, "TIMEOUT", monkeypatch, capsys)
    assert " DUE TO TIME LIMIT ***" in out, out  # slurmstepd's line
