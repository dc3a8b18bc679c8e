# Sparse S-SGD lab. `make help` lists the targets.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-done
# Deterministic, quiet and fast defaults for every command run from here.
export MALLOC_ARENA_MAX ?= 2
export WANDB_SILENT ?= true

.PHONY: help setup run test test-fast bench-threads bench-comm alphabeta fig-scaling profiles validate-model clean

help:  ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

setup: $(STAMP)  ## create .venv and install the package with pinned dependencies (~2 min)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	$(PY) -c "import torch, torchvision, hydra, mpi4py, wandb; print('setup ok: torch', torch.__version__)"
	touch $(STAMP)

run: $(STAMP)  ## the default job: FNN-3 on embedded MNIST, 4 virtual workers, gTop-k (~40 s)
	$(PY) src/train.py $(ARGS)

test: $(STAMP)  ## the whole test suite, MPI included (~7 min on 2 cores)
	$(PY) -m pytest -q

test-fast: $(STAMP)  ## unit tests only (no subprocess runs of src/train.py)
	$(PY) -m pytest -q -m "not slow"

bench-threads: $(STAMP)  ## threads backend vs a plain loop, same work (~3 min; not a test)
	$(PY) bench/threads_overhead.py $(ARGS)

bench-comm: $(STAMP)  ## collectives on 2/4/8 MPI ranks, d = 1M and 25M: time, bytes, model (not a test)
	$(PY) bench/comm.py $(ARGS)

NAME  ?= measured
WORLD ?= 4
alphabeta: $(STAMP)  ## fit alpha/beta by MPI ping-pong -> conf/cluster/$(NAME).yaml (HOSTFILE=, WORLD=, FORCE=1)
	$(PY) -m ssgd.perf.calibrate --name $(NAME) --world-size $(WORLD) $(if $(HOSTFILE),--hostfile $(HOSTFILE)) $(if $(FORCE),--force)

fig-scaling: $(STAMP)  ## scaling efficiency, comm time vs P, 32-worker breakdown -> paper_figs/out (~10 s)
	$(PY) paper_figs/fig_scaling.py $(ARGS)

profiles: $(STAMP)  ## rebuild src/ssgd/perf/profiles/*.json from the paper's numbers + the real models (~6 s)
	$(PY) -m ssgd.perf.make_profiles

validate-model: $(STAMP)  ## iteration model vs real 2-rank MPI runs, predicted vs measured (~1 min)
	$(PY) paper_figs/validate_model.py $(ARGS)

clean:  ## remove run outputs (keeps .venv)
	rm -rf outputs multirun wandb .pytest_cache
