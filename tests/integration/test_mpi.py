"""backend=mpi: collectives on real ranks, equivalence with the threads backend, faults, launching.

Every mpiexec runs under a timeout, so a hang fails the test instead of the CI job.
"""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import group_options
from equivalence import EQUIV, assert_same_runs
from ssgd.launch import mpiexec_path, worker_command, worker_env

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def mpiexec(n: int, *argv: str, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run([mpiexec_path(), "-n", str(n), *argv], env=worker_env(local=True), capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def train(run_dir: Path, *overrides: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_SILENT": "true"}
    return subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), f"hydra.run.dir={run_dir}",
                           "trainer.progress=false", "wandb.mode=disabled", *overrides],
                          capture_output=True, text=True, timeout=timeout, cwd=run_dir.parent, env=env)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_collectives_on_real_ranks(n):
    proc = mpiexec(n, sys.executable, "-m", "mpi4py", str(ROOT / "tests" / "mpi" / "check_collectives.py"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"P={n}: 8 passed, 0 failed" in proc.stdout


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_gtopk_strict_residual_on_real_ranks(n):
    proc = mpiexec(n, sys.executable, "-m", "mpi4py", str(ROOT / "tests" / "mpi" / "check_gtopk_strict.py"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"P={n}: 5 passed, 0 failed" in proc.stdout


@pytest.mark.parametrize("compressor", group_options("compressor"))     # every scheme in conf/compressor/
def test_thread_and_mpi_end_with_the_same_parameters(compressor, tmp_path):
    for backend in ("thread", "mpi"):
        proc = train(tmp_path / backend, f"backend={backend}", f"compressor={compressor}", *EQUIV)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert_same_runs(tmp_path / "thread", tmp_path / "mpi", compressor)


def test_thread_and_mpi_agree_with_the_strict_gtopk_residual(tmp_path):
    """The strict rule's extra mask messages run on real ranks too: same parameters and residuals."""
    for backend in ("thread", "mpi"):
        proc = train(tmp_path / backend, f"backend={backend}", "compressor=gtopk", "compressor.collective.residual=strict",
                     *EQUIV)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert_same_runs(tmp_path / "thread", tmp_path / "mpi", "gtopk")


@pytest.mark.parametrize("mode", ["raise", "kill"])
def test_a_failing_rank_ends_the_job_quickly(mode, tmp_path):
    start = time.monotonic()
    proc = train(tmp_path / "run", "backend=mpi", "cluster=local", "debug.fail_rank=1", "debug.fail_step=3",
                 f"debug.fail_mode={mode}", timeout=120)
    assert proc.returncode != 0
    assert time.monotonic() - start < 60        # includes 4 ranks importing torch on 2 cores
    # the failing rank's one line is what the user sees (no traceback wall, no Open MPI abort boilerplate)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: backend=mpi: rank 1 "), proc.stderr[-3000:]
    assert ("RuntimeError: injected failure at step 3" if mode == "raise" else "killed by signal 9") in lines[0]


def test_world_size_disagreeing_with_mpiexec_is_a_clear_error(tmp_path):
    assert train(tmp_path / "run", "backend=mpi", "cluster.world_size=2", "trainer.max_steps=1").returncode == 0
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
