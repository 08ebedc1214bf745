# Two commands on a fresh machine:
#   make site   installs everything (pinned, into .venv), builds the site and serves it
#   make test   installs the test tools (Slurm, munge, Lmod, ...) and runs every test
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000

.PHONY: site build test install system-deps cluster-start cluster-stop clean gpu-check cluster-env

$(VENV)/.installed: requirements.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q --no-compile -r requirements.txt -c constraints.txt
	@# The bytecode cache, built on every core (pip builds it on one). torch ships one file for
	@# Python 3.12 only (torch/testing/_internal/py312_intrinsics.py): pip skips it quietly, so do we.
	$(PY) -m compileall -qq -j 0 $(VENV)/lib || true
	touch $@

install: $(VENV)/.installed

build: install
	$(PY) -m mkdocs build --strict

site: build
	$(PY) -m mkdocs serve --strict -a 127.0.0.1:$(PORT)

system-deps:
	bash tools/install-system-deps.sh

# pytest (helpers) + nbval strict (every notebook) + mkdocs build --strict + shellcheck +
# every slurm/*.sbatch on the local 2-node Slurm cluster, which the run starts and stops.
test: install system-deps
	$(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder

cluster-start: install system-deps
	PYTHONPATH=tools $(PY) -m practice_cluster start

cluster-stop:
	PYTHONPATH=tools $(PY) -m practice_cluster stop

# On a cluster's login node (Roihu, LUMI, other), no root: a small venv on the cluster's own
# PyTorch (module or container) in DIR (default: the project's application directory when
# SBATCH_ACCOUNT names the project) and the Jupyter kernel "ddp-tutorial".
cluster-env:
	bash tools/cluster-setup.sh $(DIR)

# On a GPU machine, with its own Python and torch (no venv): every step's script on nccl + CUDA and
# step 10's ladder -> benchmarks/gpu-<device>.json. ARGS: --list, --only NAME,..., --missing.
gpu-check:
	$(PYTHON) tools/gpu_check.py $(ARGS)

clean:
	rm -rf site runs logs
