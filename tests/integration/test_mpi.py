"""backend=mpi: collectives on real ranks, equivalence with the threads backend, faults, launching.

Every mpiexec runs under a timeout, so a hang fails the test instead of the CI job. The collective checks
of each rank count (ours against the oracle, the strict residual rule, the released baseline of
`make bench-comm`) share one job (tests/mpi_jobs.py), and the thread == MPI runs of every scheme share one
3-rank job that trains them in turn (tests/mpi/train_runs.py; their thread runs train in this process):
ranks start, and import torch, once per job. The launcher and the worker entry point are tested through
`src/train.py` below.
"""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from conftest import group_options, make_cfg, train as train_here
from equivalence import EQUIV, RANKS, assert_same_runs
from mpi_jobs import checks, mpiexec
from ssgd.run.launch_mpi import prepare, worker_command
from tests.unit.test_paper_data import write_cifar

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def train(run_dir: Path, *overrides: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_SILENT": "true"}
    return subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), f"hydra.run.dir={run_dir}",
                           "trainer.progress=false", "wandb.mode=disabled", *overrides],
                          capture_output=True, text=True, timeout=timeout, cwd=run_dir.parent, env=env)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_collectives_on_real_ranks(n):
    checked = checks(n)["check_collectives"]
    assert checked.status == 0 and f"P={n}: 8 passed, 0 failed" in checked.lines, checked.job


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_gtopk_strict_residual_on_real_ranks(n):
    checked = checks(n)["check_gtopk_strict"]
    assert checked.status == 0 and f"P={n}: 5 passed, 0 failed" in checked.lines, checked.job


# -- the released gTop-k baseline of `make bench-comm` (bench/released_gtopk.py, a re-implementation of
# hclhkbu/gtopkssgd's `gtopk_sparse_allreduce`) equals ours: tests/mpi/check_released_gtopk.py compares
# index sets exactly and values to float32 rounding on every rank. The released code needs P = 2^n.
@pytest.mark.parametrize("n", [2, 4, 8])
def test_released_baseline_equals_ours(n):
    checked = checks(n)["check_released_gtopk"]
    assert checked.status == 0, checked.job
    assert f"P={n}: 4 cases, released gTop-k == ours: yes (0 failures)" in checked.lines, checked.job


def test_released_baseline_refuses_a_non_power_of_two():
    checked = checks(3)["check_released_gtopk"]
    assert checked.status == 1, checked.job
    assert "power-of-two number of ranks, got 3" in checked.lines, checked.job


# -- backend=thread == backend=mpi: one 3-rank job trains every case ------------------------------------
AUGMENT = ["model=fnn3", "compressor=topk", f"cluster.world_size={RANKS}", "trainer.batch_size=4", "trainer.epochs=1",
           "trainer.checkpoint_every=1", "seed=5"]   # 5 steps of 3 x 4 augmented CIFAR-10 images


WIRE_CASES = {"topk-bf16": ("topk", "bf16"), "gtopk-fp16": ("gtopk", "fp16")}


def equivalence_cases(cifar: Path) -> dict[str, list[str]]:
    cases = {name: [f"compressor={name}", *EQUIV] for name in group_options("compressor")}   # every scheme
    cases["gtopk-strict"] = ["compressor=gtopk", "compressor.collective.residual=strict", *EQUIV]
    for name, (scheme, values) in WIRE_CASES.items():            # 16-bit wire formats (dense16 is a scheme)
        cases[name] = [f"compressor={scheme}", f"compressor.wire.values={values}", *EQUIV]
    cases["cifar-augment"] = ["dataset=cifar10", f"dataset.data_dir='{cifar}'", *AUGMENT]
    return cases


@pytest.fixture(scope="module")
def equivalence_runs(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """<root>/<case>/{thread,mpi}: each case trained here on threads and, all in one job, on 3 MPI ranks."""
    root = tmp_path_factory.mktemp("equivalence")
    write_cifar(root / "cifar", per_batch=12)
    cases, configs = equivalence_cases(root / "cifar"), []
    for name, overrides in cases.items():
        train_here(root / name / "thread", *overrides, "backend=thread")
        configs.append(str(prepare(make_cfg(*overrides, "backend=mpi"), root / name / "mpi")))
    train_here(root / "cifar-augment" / "plain", *cases["cifar-augment"], "backend=thread", "dataset.augment=false")
    proc = mpiexec(RANKS, sys.executable, "-m", "mpi4py", str(ROOT / "tests" / "mpi" / "train_runs.py"), *configs,
                   timeout=600)
    return root, proc


def trained(runs: tuple[Path, subprocess.CompletedProcess], case: str) -> Path:
    root, proc = runs
    assert f"trained {root / case / 'mpi'}: 5 steps" in proc.stdout, \
        f"exit status {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return root / case


@pytest.mark.parametrize("compressor", group_options("compressor"))     # every scheme in conf/compressor/
def test_thread_and_mpi_end_with_the_same_parameters(compressor, equivalence_runs):
    case = trained(equivalence_runs, compressor)
    assert_same_runs(case / "thread", case / "mpi", compressor)


def test_thread_and_mpi_agree_with_the_strict_gtopk_residual(equivalence_runs):
    """The strict rule's extra mask messages run on real ranks too: same parameters and residuals."""
    case = trained(equivalence_runs, "gtopk-strict")
    assert_same_runs(case / "thread", case / "mpi", "gtopk")


@pytest.mark.parametrize("case", sorted(WIRE_CASES))
def test_thread_and_mpi_agree_with_16bit_wire_values(case, equivalence_runs):
    """16-bit values on the wire (6-byte entries): the same bits on both backends, weights and residuals."""
    assert_same_runs(trained(equivalence_runs, case) / "thread", trained(equivalence_runs, case) / "mpi",
                     WIRE_CASES[case][0])


def test_thread_and_mpi_draw_the_same_crops(equivalence_runs):
    """CIFAR-10 augmentation under backend=mpi draws the crops of backend=thread: virtual rank r and MPI rank r
    read the same generator (seed, rank, epoch, step), so the two backends end with the same parameters; and
    the augmentation changes them (against the same run without it)."""
    case = trained(equivalence_runs, "cifar-augment")
    params = {name: torch.load(case / name / "checkpoint.pt", weights_only=False)["shared"]
              for name in ("thread", "mpi", "plain")}
    assert params["thread"]["step"] == params["mpi"]["step"] == 5
    assert all(torch.equal(a, b) for a, b in zip(params["thread"]["params"], params["mpi"]["params"]))
    assert not all(torch.equal(a, b) for a, b in zip(params["thread"]["params"], params["plain"]["params"]))


@pytest.mark.serial                     # bounds its wall-clock time
@pytest.mark.parametrize("mode", ["raise", "kill"])
def test_a_failing_rank_ends_the_job_quickly(mode, tmp_path):
    start = time.monotonic()
    proc = train(tmp_path / "run", "backend=mpi", "cluster=local", "cluster.world_size=3", "debug.fail_rank=1",
                 "debug.fail_step=3", f"debug.fail_mode={mode}", timeout=120)
    assert proc.returncode != 0
    assert time.monotonic() - start < 60        # includes 3 ranks importing torch on 2 cores
    # the failing rank's one line is what the user sees (no traceback wall, no Open MPI abort boilerplate)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: backend=mpi: rank 1 "), proc.stderr[-3000:]
    assert ("RuntimeError: injected failure at step 3" if mode == "raise" else "killed by signal 9") in lines[0]


def test_world_size_disagreeing_with_mpiexec_is_a_clear_error(tmp_path):
    # mpi.launch=false: the launcher only writes the worker config (and prints the command for your own mpirun)
    assert train(tmp_path / "run", "backend=mpi", "cluster.world_size=2", "mpi.launch=false").returncode == 0
    cfg = OmegaConf.load(tmp_path / "run" / "worker_config.yaml")
    assert cfg.cluster.world_size == 2
    proc = mpiexec(3, *worker_command(tmp_path / "run" / "worker_config.yaml"), timeout=120)
    assert proc.returncode == 2
    assert "cluster.world_size=2 but this MPI job has 3 ranks" in proc.stderr


def test_default_mpi_run_from_a_shell(tmp_path):
    proc = train(tmp_path / "run", "backend=mpi", "compressor=gtopk", "cluster=local", "trainer.epochs=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "final val accuracy" in proc.stdout
    assert (tmp_path / "run" / "summary.json").is_file() and (tmp_path / "run" / "metrics.jsonl").is_file()


def test_alphabeta_calibration_writes_a_usable_cluster_file(tmp_path):
    out = tmp_path / "measured.yaml"
    proc = subprocess.run([sys.executable, "-m", "ssgd.tools.calibrate", "--name", "measured", "--world-size", "8",
                           "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    cfg = OmegaConf.load(out)
    assert cfg.name == "measured" and cfg.world_size == 8 and cfg.hostfile is None
    assert cfg.network.alpha > 0 and cfg.network.beta > 0
    again = subprocess.run([sys.executable, "-m", "ssgd.tools.calibrate", "--out", str(out)], capture_output=True,
                           text=True, timeout=60, cwd=ROOT)
    assert again.returncode == 2 and "exists" in again.stderr      # nothing already written is lost
