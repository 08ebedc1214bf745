#!/bin/bash
# `make test`: every test, in two pytest processes at once (2 cores, and the cluster part waits
# on Slurm and on processes starting up a third of its time):
#   --part=cluster  the notebooks and the tests that use the practice cluster, in order (it starts
#                   and stops the cluster; a notebook sees it as it shows it: its job alone);
#   --part=local    the tests that need no cluster (site, browser, helpers), beside it.
# `.venv/bin/python -m pytest` without --part runs everything in one process, in order.
set -u
cd "$(dirname "$0")/.." || exit 1
PY=.venv/bin/python
mkdir -p runs
$PY -m pytest --part=local --basetemp=/tmp/pytest-part-local "$@" > runs/test-local.log 2>&1 &
local_pid=$!
$PY -m pytest --part=cluster --basetemp=/tmp/pytest-part-cluster "$@" 2>&1 | tee runs/test-cluster.log
cluster=${PIPESTATUS[0]}
wait $local_pid
local=$?
echo
echo "=== the tests that need no cluster, run beside the cluster part (runs/test-local.log) ==="
cat runs/test-local.log
echo
echo "=== summary: cluster part exit code $cluster, local part exit code $local ==="
grep -hE '^(FAILED|ERROR) |^=+ .*(passed|failed|error).* =+$' runs/test-cluster.log runs/test-local.log
exit $(( cluster || local ))
