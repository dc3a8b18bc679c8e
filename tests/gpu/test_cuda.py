"""Every CUDA path, on a real GPU: skipped, with the reason, where torch.cuda.is_available() is False.

`make gpu-check` runs these (marker `gpu`) plus a short NCCL training run, the selection benchmark on the GPU
at d = 25M and 100M, and the DDP-hook and FSDP examples on NCCL (scripts/gpu_check.py). Tests that need two GPUs say so when the host has one.
Ranks are spawned (CUDA does not survive a fork), each under a timeout.

Written and checked on CPU-only machines: until `make gpu-check` has run on a GPU machine, these paths are
untested (docs/gpu-clusters.md).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import collective_checks as checks
from ddp_steps import buckets_async_and_blocking, same_bits, trainer_and_hook
from torch_ranks import run_ranks

ROOT = Path(__file__).resolve().parents[2]
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPUS == 0, reason="no CUDA device: torch.cuda.is_available() "
                                                                   "is False")]
P_GPU = min(2, max(GPUS, 1))          # ranks of one-GPU-per-rank runs: 2 when the host has 2 GPUs, else 1


def need_gpus(n: int):
    return pytest.mark.skipif(GPUS < n, reason=f"needs {n} GPUs, this host has {GPUS}")


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}


def train(run_dir: Path, *overrides: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), f"hydra.run.dir={run_dir}",
                           "trainer.progress=false", "wandb.mode=disabled", *overrides],
                          capture_output=True, text=True, timeout=timeout, cwd=run_dir.parent, env=env())


# -- executors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("P", [1, pytest.param(2, marks=need_gpus(2))])
def test_collectives_on_nccl(P):
    """NCCL, one GPU per rank: every collective case against the oracle; NCCL's all_reduce order is its own."""
    checks.check_ranks(run_ranks(P, checks.run_cases, ("cuda",), timeout=180, backend="nccl"), P)


def test_gloo_stages_cuda_payloads_through_the_host():
    """gloo reads host memory: CUDA payloads are staged (timed as staging_s), results come back on the GPU."""
    per_rank = run_ranks(2, checks.run_cases, ("cuda:0",), timeout=180)
    checks.check_ranks(per_rank, 2)
    assert all(case[4] > 0 for case in per_rank[0])


def test_mpi_stages_cuda_payloads_through_the_host():
    from ssgd.run.launch_mpi import mpiexec_path, worker_env

    proc = subprocess.run([mpiexec_path(), "-n", "2", sys.executable, "-m", "mpi4py",
                           str(ROOT / "tests" / "mpi" / "check_collectives.py")],
                          env={**worker_env(local=True), "SSGD_CHECK_DEVICE": "cuda"}, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"P=2: {len(checks.CASES)} passed, 0 failed" in proc.stdout


# -- one GPU per rank --------------------------------------------------------------------------------
def test_mpi_ranks_take_the_gpu_of_their_local_rank():
    from ssgd.run.launch_mpi import mpiexec_path, worker_env

    proc = subprocess.run([mpiexec_path(), "-n", str(P_GPU), sys.executable, "-m", "mpi4py",
                           str(ROOT / "tests" / "mpi" / "check_local_rank.py")],
                          env=worker_env(local=True), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    for r in range(P_GPU):
        assert f"rank {r}: env {r} split {r}/{P_GPU} device cuda:{r}" in proc.stdout, proc.stdout


@pytest.mark.parametrize("backend", ["torch", "mpi"])
def test_more_ranks_than_gpus_stop_with_one_line(backend, tmp_path):
    proc = train(tmp_path / "run", f"backend={backend}", "device=cuda", f"cluster.world_size={GPUS + 1}",
                 "trainer.max_steps=1")
    assert proc.returncode != 0
    assert f"device=cuda: {GPUS + 1} ranks on this host but {GPUS} GPU(s): one GPU per rank" in proc.stderr, \
        proc.stderr[-3000:]


# -- training ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["thread", "torch", "mpi"])
def test_training_runs_on_cuda(backend, tmp_path):
    """20 gTop-k steps with device=cuda: threads on one GPU; torch (NCCL) and mpi with one GPU per rank."""
    P = 2 if backend == "thread" else P_GPU
    proc = train(tmp_path / "run", f"backend={backend}", "device=cuda", f"cluster.world_size={P}",
                 "trainer.max_steps=20")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 20 and summary["val/acc"] > 0.2, summary


@pytest.mark.parametrize("compressor", ["dense", "gtopk", "topk"])
def test_ddp_hook_on_nccl_equals_the_trainer(compressor, tmp_path):
    """As on CPU (tests/integration/test_ddp_hook.py): one bucket, the hook's weights and residuals equal the
    trainer's bitwise, both on NCCL with one GPU per rank."""
    out = run_ranks(P_GPU, trainer_and_hook, (compressor, str(tmp_path), {"bucket_cap_mb": 100}, "cuda"),
                    timeout=240, backend="nccl")
    for rank, r in enumerate(out):
        assert all(same_bits(a, b) for a, b in zip(r["trainer"], r["hook"])), f"rank {rank}: weights differ"
        assert same_bits(r["trainer_e"], r["hook_e"]), f"rank {rank}: residuals differ"


@pytest.mark.parametrize("compressor", ["gtopk:strict", "topk"])
def test_async_ddp_hook_on_nccl_with_several_buckets(compressor):
    """The asynchronous hook's CUDA path (its communication thread on its own CUDA stream, waiting on an event of
    backward's stream): as on CPU, it returns to backward before reducing, equals the blocking hook bitwise, keeps
    bucket order on every rank and conserves error feedback."""
    args = {"bucket_cap_mb": 0.2, "find_unused_parameters": True}
    out = run_ranks(P_GPU, buckets_async_and_blocking, (compressor, args, "cuda"), timeout=240, backend="nccl")
    for rank, r in enumerate(out):
        a, b = r["async"], r["blocking"]
        assert a["passed"] == [True] and b["passed"] == [False]
        assert a["keys"] == out[0]["async"]["keys"] and a["calls"] == 2 * len(a["steps"])
        assert all(same_bits(x, y) for x, y in zip(a["weights"], b["weights"])), f"rank {rank}: async != blocking"
    for step in range(len(out[0]["async"]["steps"])):
        rows = [r["async"]["steps"][step] for r in out]
        sent = sum(x["g"].astype("float64") + x["e0"] for x in rows)
        kept = P_GPU * rows[0]["avg"].astype("float64") + sum(x["e1"].astype("float64") for x in rows)
        assert abs(sent - kept).max() <= 1e-5 * max(abs(sent).max(), 1e-12), step


def test_the_ddp_example_on_nccl(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(P_GPU), str(ROOT / "examples" / "ddp_gtopk.py"), "--device", "cuda", "--steps", "150"],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"on {P_GPU} ranks (nccl): validation accuracy" in proc.stdout, proc.stdout
