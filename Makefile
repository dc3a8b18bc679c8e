# Sparse S-SGD lab. `make help` lists the targets.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-done
# Deterministic, quiet and fast defaults for every command run from here.
export MALLOC_ARENA_MAX ?= 2
export WANDB_SILENT ?= true

.PHONY: help setup simgrid report run test test-fast bench-threads bench-comm bench-ddp bench-selection-contention alphabeta fig figs-runs fig-convergence-paper figs figs-quick profiles validate-model clean bench-dlbench bench-trainer bench bench-startup bench-simgrid bench-zoo fsdp-convergence

# `make help`: every target with its comment and, from docs/times.yaml (the one source of the times, also
# quoted by the README), its time and the load average it was measured at; then the timed fig-<entry> targets.
TIMES := docs/times.yaml
help:  ## list the targets, with their times from docs/times.yaml
	@awk -F'"' 'FNR == NR { if ($$0 ~ /^[a-z][a-z-]*: *[{]time:/) { k = substr($$1, 1, index($$1, ":") - 1); \
	    t[k] = "[" $$2 ", load " $$4 "]"; order[++n] = k }; next } \
	  /^[a-zA-Z_-]+:.*## / { k = substr($$0, 1, index($$0, ":") - 1); d = $$0; sub(/^[^#]*## /, "", d); \
	    printf "  %-14s %s%s\n", k, d, (k in t) ? " " t[k] : ""; seen[k] = 1 } \
	  END { for (i = 1; i <= n; i++) if (!(order[i] in seen)) printf "  %-14s one figure of paper_figs/figures.yaml and its runs %s\n", order[i], t[order[i]] }' \
	  $(TIMES) $(firstword $(MAKEFILE_LIST))

setup: $(STAMP)  ## create .venv and install the package with pinned dependencies

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[test]"
	$(PY) -c "import torch, torchvision, hydra, mpi4py, wandb; print('setup ok: torch', torch.__version__)"
	$(PY) -m ssgd.native || echo "setup: without the C kernels (above); everything works, gTop-k merges and selections are slower"
	scripts/simgrid/install.sh $(VENV) || echo "setup: without SimGrid (above); everything but cluster.network.engine=simgrid and the simulated figures works"
	touch $(STAMP)

simgrid: $(STAMP)  ## SimGrid's Python bindings into .venv (root + apt: python3-simgrid; docs/simgrid.md#install)
	scripts/simgrid/install.sh $(VENV)

.PHONY: simgrid-scaling
simgrid-scaling: $(STAMP)  ## whole iterations of the paper's 5 models on simulated 32x1gbe/32x10gbe (SimGrid), P = 2..1024 -> paper_figs/measured/simgrid_scaling.csv (4.5 GB; docs/scaling-model.md)
	PYTHONPATH=src $(PY) -m ssgd.tools.simgrid_replay --all --out paper_figs/measured/simgrid_scaling.csv $(ARGS)

report: $(STAMP)  ## a run's figure, or a sweep's table + overlay: make report DIR=<run or sweep dir> (docs/reports.md)
	PYTHONPATH=src $(PY) -m ssgd.report $(DIR)

run: $(STAMP)  ## the default job: FNN-3 on embedded MNIST, 4 virtual workers, gTop-k
	$(PY) src/train.py $(ARGS)

# make test: two pytest-xdist workers (a test file stays on one worker: its module fixtures run once), then
# the `serial` tests (wall-clock bounds: signals, failing ranks) one at a time on a machine left to them.
test: $(STAMP)  ## the whole test suite, MPI, gloo and SLURM included (testbed and SLURM up)
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not serial"
	$(PY) -m pytest -q -m serial

test-fast: $(STAMP)  ## the tests not marked slow, on all cores: in-process, plus ranks forked from a preloaded server; no train.py or fresh-interpreter runs, real wandb, paper-size models or figure scripts
	$(PY) -m pytest -q -m "not slow" -n auto

# make faults: every row of docs/faults.md's fault matrices replayed from the command line (scripts/faults.py); the
# full-disk rows mount small tmpfs file systems and are skipped (with the reason) when not root, the SLURM requeue
# rows when no cluster of scripts/slurm/cluster.sh is up.
.PHONY: faults
faults: $(STAMP)  ## replay every row of docs/faults.md as a user would, a table of ok / short / skip (root for the full-disk rows)
	$(PY) scripts/faults.py $(ARGS)

# Benchmark outputs: OUT=dir puts every result (JSON, tables, charts, summary) there instead of
# bench/results (results) and paper_figs/out (charts).
OUT ?=
RESULTS_DIR = $(or $(OUT),bench/results)
CHARTS_DIR  = $(or $(OUT),paper_figs/out)

bench-threads: $(STAMP)  ## threads backend vs a plain loop, interleaved, noise-checked (ARGS=--quick: ~1 min; OUT=dir)
	$(PY) bench/threads_overhead.py --out-dir $(RESULTS_DIR) $(ARGS)

bench-comm: $(STAMP)  ## collectives + gTop-k ours vs released on 2/4/8 MPI ranks, d = 1M, 25M (OUT=dir)
	$(PY) bench/comm.py --out-dir $(RESULTS_DIR) $(ARGS)

TOOLS       ?= 1
TOOLS_VENV  := .venv-tools
TOOLS_STAMP := $(TOOLS_VENV)/.setup-done

# JAX and TensorFlow (Keras 3) for bench-dlbench, in their own environment; a failed install only skips them.
$(TOOLS_STAMP): bench/requirements-tools.txt
	@echo "bench-dlbench: installing JAX and TensorFlow into $(TOOLS_VENV) (~1 min, once; TOOLS=0 skips them)"
	@$(PYTHON) -m venv $(TOOLS_VENV) && $(TOOLS_VENV)/bin/python -m pip install --quiet --upgrade pip \
	  && $(TOOLS_VENV)/bin/python -m pip install --quiet -r bench/requirements-tools.txt && touch $@ \
	  || echo "bench-dlbench: could not install bench/requirements-tools.txt into $(TOOLS_VENV); JAX and TensorFlow are skipped"

bench-dlbench: $(STAMP) $(if $(filter 1,$(TOOLS)),$(TOOLS_STAMP))  ## DLBench workloads: ms/mini-batch, eager/compile/TF/JAX x threads, interleaved (OUT=dir)
	$(PY) bench/dlbench.py --results $(RESULTS_DIR)/dlbench.json --out-dir $(CHARTS_DIR) \
	  $(if $(filter 1,$(TOOLS)),,--tools torch torch_compile) $(ARGS)

bench-ddp: $(STAMP)  ## DDP hooks on 2 gloo ranks: allreduce, fp16, PowerSGD, ssgd.ddp gTop-k/Top-k async vs blocking, interleaved (OUT=dir; ARGS="--testbed --hidden 4608 --density 0.001": 1 GbE testbed, d = 25M)
	$(PY) bench/ddp.py --out-dir $(RESULTS_DIR) $(ARGS)

bench-selection-contention: $(STAMP)  ## Top-k/Gaussian-k/Random-k/DGC quiet vs a busy core, 1 and 2 threads, d = 25M (estimated; ARGS=--quick: ~15 s; OUT=dir)
	$(PY) bench/selection_contention.py --results-dir $(RESULTS_DIR) $(ARGS)

bench-trainer: $(STAMP)  ## our trainer vs plain loop, vs DDP (gloo; mpi and torch backends), sparse vs dense, gTop-k call torch vs MPI, as ratios (OUT=dir)
	$(PY) bench/trainer_vs_peers.py --out-dir $(RESULTS_DIR) $(ARGS)

bench-simgrid: $(STAMP)  ## SimGrid's own cost: one gTop-k call at P = 32 ... 1,024, d = 25M: wall time and peak memory (OUT=dir)
	$(PY) bench/simgrid_cost.py --out-dir $(RESULTS_DIR) $(ARGS)

bench-zoo: $(STAMP)  ## SIMULATED race (SimGrid) of dense/TopkA/gTop-k/Ok-Topk, P = 2..64, d = 1M, 25M, 1 and 10 GbE -> bench/results/zoo.csv + paper_figs/measured/zoo.csv (docs/zoo.md)
	PYTHONPATH=src $(PY) bench/zoo.py $(ARGS)

fsdp-convergence: $(STAMP)  ## FSDP Top-k (ssgd.fsdp) beside DDP Top-k (ssgd.ddp), FNN-3 and SmallCNN, densities 0.01 / 0.001, 3 seeds, 2 gloo ranks -> bench/results/fsdp_convergence.csv (docs/fsdp.md)
	$(PY) bench/fsdp_convergence.py --out $(RESULTS_DIR)/fsdp_convergence.csv $(ARGS)

bench-startup: $(STAMP)  ## seconds to refuse bad input, a good run's start-up phases, and thread/mpi/torch time outside training, interleaved (ARGS="--part backends --baseline-src DIR")
	$(PY) bench/startup.py $(ARGS)

bench: $(STAMP)  ## every benchmark + <OUT or bench/results>/summary.md, with progress
	@$(PY) bench/progress.py start $(RESULTS_DIR)
	@$(PY) bench/progress.py next $(RESULTS_DIR) bench-dlbench
	$(MAKE) --no-print-directory bench-dlbench ARGS=
	@$(PY) bench/progress.py next $(RESULTS_DIR) bench-trainer
	$(MAKE) --no-print-directory bench-trainer ARGS=
	@$(PY) bench/progress.py next $(RESULTS_DIR) bench-threads
	$(MAKE) --no-print-directory bench-threads ARGS=--quick
	@$(PY) bench/progress.py next $(RESULTS_DIR) bench-comm
	$(MAKE) --no-print-directory bench-comm ARGS=
	@$(PY) bench/progress.py next $(RESULTS_DIR) fig-selection
	$(MAKE) --no-print-directory fig-selection ARGS=
	@$(PY) bench/progress.py end $(RESULTS_DIR)
	$(PY) bench/summary.py --results-dir $(RESULTS_DIR) --start-file $(RESULTS_DIR)/.bench-start

NAME  ?= measured
WORLD ?= 4
alphabeta: $(STAMP)  ## fit alpha/beta by MPI ping-pong -> conf/cluster/$(NAME).yaml (HOSTFILE=, WORLD=, FORCE=1)
	$(PY) -m ssgd.tools.calibrate --name $(NAME) --world-size $(WORLD) $(if $(HOSTFILE),--hostfile $(HOSTFILE)) $(if $(FORCE),--force)

# Figures: OUT=dir (figure folder, default paper_figs/out), RUNS=dir (training runs, default paper_figs/runs),
# JOBS=n (runs trained at once, one thread each; default 2). figs-quick defaults to outputs/figs-quick/.
FIGS_OUT   = $(or $(OUT),paper_figs/out)
FIGS_RUNS  = $(or $(RUNS),paper_figs/runs)
QUICK_OUT  = $(or $(OUT),outputs/figs-quick/out)
QUICK_RUNS = $(or $(RUNS),outputs/figs-quick/runs)
JOBS ?= 2

figs-runs: $(STAMP)  ## train the runs the analysis and convergence figures read -> paper_figs/runs or RUNS= (resumes; JOBS=2)
	$(PY) paper_figs/runs.py --out $(FIGS_RUNS) --jobs $(JOBS) $(ARGS)

# One figure of the registry paper_figs/figures.yaml (fig-scaling, fig-histograms, fig-bounds, fig-convergence,
# fig-density, fig-selection, and any entry added there): the runs it reads (resumes), then its script, into
# paper_figs/out or OUT= (a script's results, e.g. fig-selection's selection.json, into OUT= too, else
# bench/results); ARGS= go to the script. Under `make -n` make_figs.py prints the commands it would run.
FIG_DRY = $(if $(findstring n,$(firstword -$(MAKEFLAGS))),--dry-run)
fig-%: $(STAMP)
	+$(PY) paper_figs/make_figs.py --figure $* $(if $(OUT),--out $(OUT) --results-dir $(OUT)) \
	  $(if $(RUNS),--runs $(RUNS)) --jobs $(JOBS) $(FIG_DRY) $(if $(ARGS),-- $(ARGS))

fig: fig-$(NAME)  ## one figure and its runs: make fig NAME=<entry of paper_figs/figures.yaml>, the same as make fig-<entry>

# The paper's own run (hours on a CPU; not part of `make figs`): DATA= CIFAR-10's python batches, DEVICE=cpu|cuda,
# STEPS=n stops every run after n steps (a short check); ARGS="--estimate-only" prints the estimate only.
fig-convergence-paper: $(STAMP)  ## gTop-k paper convergence: ResNet-20 on CIFAR-10, dense/Top-k/gTop-k/Gaussian-k, 141 epochs; prints its estimate (DATA=dir [DEVICE=cuda] [STEPS=n])
	$(PY) paper_figs/convergence_paper.py --data "$(DATA)" --device $(or $(DEVICE),cpu) --runs $(FIGS_RUNS) \
	  --out $(FIGS_OUT) $(if $(STEPS),--max-steps $(STEPS)) $(ARGS)

figs: $(STAMP)  ## every figure + paper_figs/README.md (OUT=dir writes elsewhere; resumes)
	$(PY) paper_figs/make_figs.py --out $(FIGS_OUT) --runs $(FIGS_RUNS) --jobs $(JOBS)

figs-quick: $(STAMP)  ## QUICK convergence preview (2 seeds x 300 steps) -> outputs/figs-quick/
	$(PY) paper_figs/make_figs.py --quick --out $(QUICK_OUT) --runs $(QUICK_RUNS) --jobs $(JOBS)

profiles: $(STAMP)  ## rebuild src/ssgd/perf/profiles/*.json from the paper's numbers + the real models (~6 s)
	$(PY) -m ssgd.tools.make_profiles

.PHONY: profile
profile: $(STAMP)  ## measure the configured model's compute on THIS machine (ARGS: the run's overrides, e.g. device=cuda; OUT=file) -> outputs/profiles/<name>.json, for a run's cluster.compute_profile=FILE (docs/scaling-model.md)
	PYTHONPATH=src $(PY) -m ssgd.tools.measure $(if $(OUT),out=$(OUT)) $(ARGS)

validate-model: $(STAMP)  ## iteration model vs real threads (4 workers) and 2-rank MPI runs, predicted vs measured (OUT=dir)
	$(PY) paper_figs/validate_model.py $(if $(OUT),--out $(OUT)) $(ARGS)

.PHONY: gpu-check
gpu-check: $(STAMP)  ## every CUDA path: GPU tests, NCCL run, selection on the GPU, DDP hook on NCCL, one table (on one H200; no GPU: says so, exit 0)
	$(PY) scripts/gpu_check.py $(if $(OUT),--out $(OUT)) $(ARGS)

.PHONY: testbed-up testbed-down testbed-status alphabeta-testbed bench-testbed bench-testbed-e2e bench-testbed-replay simgrid-calibrate bench-testbed-simgrid
P  ?= 4
BW ?= 1gbit
testbed-up:  ## P hosts (network namespaces, root) on BW links (tc tbf) -> cluster=testbed, outputs/testbed/hosts (P=4 BW=1gbit; docs/testbed.md)
	scripts/testbed/testbed.sh up $(P) $(BW)

testbed-down:  ## remove every namespace, link and qdisc testbed-up made (also after a failed up)
	scripts/testbed/testbed.sh down

alphabeta-testbed:  ## fit alpha/beta (by regime) by MPI ping-pong between testbed hosts 1 and 2, full token buckets -> outputs/testbed/alphabeta.yaml
	PYTHONPATH=src $(PY) -m ssgd.tools.calibrate --from-cluster testbed --name testbed --out outputs/testbed/alphabeta.yaml --fit regimes --points outputs/testbed/pingpong.json --idle-ms 4 --force

bench-testbed: $(STAMP)  ## every scheme's collective on the testbed vs the token-bucket link model, alpha-beta and the floor -> bench/results/testbed_<BW>.csv (P=4)
	PYTHONPATH=src $(PY) bench/testbed_comm.py $(ARGS)

bench-testbed-e2e: $(STAMP)  ## FNN-3 trained on the testbed: dense, Top-k, gTop-k, Ok-Topk, TopkDSA, 3 seeds, time to 0.90 val acc (~4 min at P=4, quiet)
	PYTHONPATH=src $(PY) bench/testbed_e2e.py $(ARGS)

bench-testbed-replay: $(STAMP)  ## the paper's 5 models replayed (GPU compute by sleeping) on the testbed, dense/Top-k/gTop-k at P=2 and P: scaling efficiency -> paper_figs/measured/ (P=4)
	PYTHONPATH=src $(PY) bench/testbed_replay.py $(ARGS)
	@if [ -f bench/results/testbed_replay_1gbit.csv ]; then mkdir -p paper_figs/measured && cp bench/results/testbed_replay_1gbit.csv paper_figs/measured/ && echo "copied to paper_figs/measured/ (make fig-scaling draws it)"; fi

TB_BW = $$(sed -n 's/^SSGD_TESTBED_BW=//p' outputs/testbed/env 2>/dev/null)
TB_UP = [ -f outputs/testbed/env ] || { echo "error: the testbed is down: make testbed-up P=4 (docs/testbed.md)"; exit 2; }

simgrid-calibrate: $(STAMP)  ## SimGrid's platform of the testbed: latency + bandwidth factor fitted to the ping-pong and a P=2 dense allreduce (d=4M) -> outputs/testbed/simgrid_<BW>.yaml (docs/simgrid-validation.md)
	@$(TB_UP)
	PYTHONPATH=src $(PY) bench/testbed_comm.py --P 2 --sizes 4M --out-dir outputs/testbed/calibration
	bw=$(TB_BW); PYTHONPATH=src $(PY) -m ssgd.tools.simgrid_calibrate --pingpong outputs/testbed/pingpong.json \
	  --allreduce outputs/testbed/calibration/testbed_$$bw.json --bw $$bw --out outputs/testbed/simgrid_$$bw.yaml

bench-testbed-simgrid: $(STAMP)  ## every collective at P=2,4, d=0.27M-61M on the testbed: measured vs SimGrid (calibrated here) vs token bucket vs alpha-beta -> docs/data/simgrid_validation.csv
	@$(TB_UP)
	PYTHONPATH=src $(PY) bench/testbed_simgrid.py --measure $(ARGS)
	bw=$(TB_BW); PYTHONPATH=src $(PY) -m ssgd.tools.simgrid_calibrate --pingpong outputs/testbed/pingpong.json \
	  --allreduce outputs/testbed/validation/measured_$$bw.json --bw $$bw --out outputs/testbed/simgrid_$$bw.yaml && \
	PYTHONPATH=src $(PY) bench/testbed_simgrid.py --measured outputs/testbed/validation/measured_$$bw.json \
	  --platform outputs/testbed/simgrid_$$bw.yaml --csv docs/data/simgrid_validation.csv

testbed-status:  ## the testbed's hosts and shaping; exit 0 when it is up
	scripts/testbed/testbed.sh status

.PHONY: slurm-up slurm-down test-slurm
slurm-up:  ## single-node SLURM cluster on this machine: installs Debian's slurm + munge as root, starts them (first time)
	scripts/slurm/cluster.sh up

slurm-down:  ## stop the daemons slurm-up started
	scripts/slurm/cluster.sh down

test-slurm: $(STAMP)  ## only the tests against the SLURM cluster (make slurm-up first)
	$(PY) -m pytest -q -m slurm tests/slurm

clean:  ## remove run outputs (keeps .venv)
	rm -rf outputs multirun wandb .pytest_cache paper_figs/runs
