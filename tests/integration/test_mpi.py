"""backend=mpi: collectives on real ranks, equivalence with the threads backend, faults, launching.

Every mpiexec runs under a timeout, so a hang fails the test instead of the CI job.
"""
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from conftest import CONF, group_options
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


EQUIV = ["cluster.world_size=3", "trainer.batch_size=256", "trainer.epochs=1", "trainer.checkpoint_every=1",
         "model.dropout=0.2", "seed=5", "capture.stats=true", "capture.u_steps=[3]"]
# 5 steps of 3 x 256 digits, dropout on, capture on (it must work, and agree, on both backends)


@pytest.mark.parametrize("compressor", group_options("compressor"))     # every scheme in conf/compressor/
def test_thread_and_mpi_end_with_the_same_parameters(compressor, tmp_path):
    runs = {}
    for backend in ("thread", "mpi"):
        proc = train(tmp_path / backend, f"backend={backend}", f"compressor={compressor}", *EQUIV)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[backend] = torch.load(tmp_path / backend / "checkpoint.pt", weights_only=False)
    a, b = runs["thread"], runs["mpi"]
    assert a["shared"]["step"] == b["shared"]["step"] == 5
    collective = OmegaConf.load(CONF / "compressor" / f"{compressor}.yaml").collective._target_
    if collective == "ssgd.comm.dense.DenseAllreduce":
        # MPI_Allreduce sums in an order of its own: equal up to float32 rounding of 5 steps
        for x, y in zip(a["shared"]["params"], b["shared"]["params"]):
            assert torch.allclose(x, y, rtol=0, atol=1e-5), (x - y).abs().max()
    else:
        assert all(torch.equal(x, y) for x, y in zip(a["shared"]["params"], b["shared"]["params"]))
        for r in range(3):      # every rank's residual too
            memory_a, memory_b = a["ranks"][r]["memory"], b["ranks"][r]["memory"]
            assert memory_a.keys() == memory_b.keys()
            assert all(torch.equal(memory_a[key], memory_b[key]) for key in memory_a)
    stats = {backend: [json.loads(line) for line in (tmp_path / backend / "capture" / "stats.jsonl").read_text()
                       .splitlines()] for backend in runs}
    assert [r["step"] for r in stats["mpi"]] == [1, 2, 3, 4, 5]
    for x, y in zip(stats["thread"], stats["mpi"]):     # rank 0's u: equal; x = mean of u: MPI's sum order
        assert x.keys() == y.keys() and all(math.isclose(x[k], y[k], rel_tol=1e-5, abs_tol=1e-12) for k in x)
    u = [torch.load(tmp_path / b / "capture" / "u_step000003.pt", weights_only=False)["u"] for b in runs]
    assert torch.allclose(u[0], u[1], rtol=0, atol=1e-6)


def test_thread_and_mpi_agree_with_the_strict_gtopk_residual(tmp_path):
    """The strict rule's extra mask messages run on real ranks too: same parameters and residuals."""
    runs = {}
    for backend in ("thread", "mpi"):
        proc = train(tmp_path / backend, f"backend={backend}", "compressor=gtopk", "compressor.collective.residual=strict",
                     *EQUIV)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[backend] = torch.load(tmp_path / backend / "checkpoint.pt", weights_only=False)
    a, b = runs["thread"], runs["mpi"]
    assert all(torch.equal(x, y) for x, y in zip(a["shared"]["params"], b["shared"]["params"]))
    assert all(torch.equal(a["ranks"][r]["memory"]["e"], b["ranks"][r]["memory"]["e"]) for r in range(3))


@pytest.mark.parametrize("mode", ["raise", "kill"])
def test_a_failing_rank_ends_the_job_quickly(mode, tmp_path):
    start = time.monotonic()
    proc = train(tmp_path / "run", "backend=mpi", "cluster=local", "debug.fail_rank=1", "debug.fail_step=3",
                 f"debug.fail_mode={mode}", timeout=120)
    assert proc.returncode != 0
    assert time.monotonic() - start < 60        # includes 4 ranks importing torch on 2 cores
    assert "rank 1" in proc.stderr and "error: backend=mpi: the MPI job failed" in proc.stderr


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
