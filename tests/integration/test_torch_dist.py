"""backend=torch on CPU (gloo): collectives on real ranks, equivalence with the threads backend, launching, faults.

The collective and equivalence tests run in forked ranks of a real gloo process group (tests/torch_ranks.py,
each under a timeout); the launching and fault tests run `src/train.py`, `torchrun` and the worker entry point
as a user would, in subprocesses under a timeout.
"""
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

import collective_checks as checks
from conftest import group_options, make_cfg
from equivalence import EQUIV, assert_same_runs
from torch_ranks import run_ranks

ROOT = Path(__file__).resolve().parents[2]
# The collective tests run in light forked ranks (seconds); the rest, marked `slow`, train or start interpreters.


# -- collectives on real ranks ----------------------------------------------------------------------
@pytest.mark.parametrize("P", [1, 2, 3, 4, 5])
def test_collectives_on_real_torch_ranks(P):
    """Every case of tests/collective_checks.py: oracle, in-process executor (bitwise for sparse), cost model;
    gloo's all_reduce sums in its own order, so dense results are held to `dense_bound`, and every rank
    must receive the same bits."""
    checks.check_ranks(run_ranks(P, checks.run_cases, timeout=90), P)


def as_older_torch(older: bool) -> None:
    """In this rank only: torch.distributed as torch 2.11 has it, without `all_gather_single` (its older name,
    `all_gather_into_tensor`, is what remains; pyproject.toml allows torch from 2.4)."""
    if older:
        del torch.distributed.all_gather_single


OLDER_TORCH = pytest.mark.parametrize("older", [False, True], ids=["torch", "torch-without-all_gather_single"])


def _allgatherv_cases(rank: int, P: int, older: bool = False) -> list:
    """Padded all_gather: blocks of sizes 0..P-1 (rank r sends r elements), dtype kept, all empty."""
    from ssgd.comm.ops import Allgatherv, RankLog
    from ssgd.comm.executors.torch_dist import TorchExecutor

    as_older_torch(older)
    execute, out = TorchExecutor(), []
    for dtype in (torch.int32, torch.float32):
        log = RankLog()
        blocks = execute(Allgatherv(torch.arange(rank, dtype=dtype) + 10 * rank), log)
        out.append(([b.tolist() for b in blocks], [b.dtype for b in blocks], log.stats.bytes))
    log = RankLog()
    out.append(([b.tolist() for b in execute(Allgatherv(torch.empty(0, dtype=torch.int32)), log)], None, 0))
    return out


@OLDER_TORCH
def test_allgatherv_pads_and_trims_ragged_blocks(older):
    from ssgd.perf import cost

    P = 4
    for rank, cases in enumerate(run_ranks(P, _allgatherv_cases, (older,), timeout=60)):
        for dtype, (blocks, dtypes, nbytes) in zip((torch.int32, torch.float32), cases[:2]):
            assert blocks == [[10 * r + i for i in range(r)] for r in range(P)]
            assert all(t == dtype for t in dtypes)
            assert nbytes == cost.allgatherv_sent(rank, [4 * r for r in range(P)])[1]
        assert cases[2][0] == [[] for _ in range(P)]


def _world_exchanges(rank: int, P: int, older: bool = False) -> tuple:
    from ssgd.worlds.torch_dist import OBJECT_SLOT, TorchWorld

    as_older_torch(older)
    world = TorchWorld.joined()
    small = world.allgather([{"rank": rank, "x": 0.5 * rank}])
    big = world.allgather([b"x" * (3 * OBJECT_SLOT if rank == 1 else rank)])        # one pickle over the slot
    root = world.gather_root({rank: f"state of {rank}"})
    return small, [len(b) for b in big], root


@OLDER_TORCH
def test_torch_world_exchanges_python_values(older):
    """allgather: one collective with a fixed slot per rank, and a second one when a pickle does not fit."""
    from ssgd.worlds.torch_dist import OBJECT_SLOT

    P = 3
    for rank, (small, big, root) in enumerate(run_ranks(P, _world_exchanges, (older,), timeout=60)):
        assert small == [{"rank": r, "x": 0.5 * r} for r in range(P)]
        assert big == [0, 3 * OBJECT_SLOT, 2]
        assert root == ({r: f"state of {r}" for r in range(P)} if rank == 0 else {})


# -- backend=thread == backend=torch ----------------------------------------------------------------
def _train_torch_rank(rank: int, P: int, overrides: list[str], run_dir: str) -> int:
    from ssgd.run import build
    from ssgd.worlds.torch_dist import TorchWorld

    trainer, writer, world = build.trainer(make_cfg(*overrides), Path(run_dir), TorchWorld.joined())
    try:
        trainer.fit()
    finally:
        writer.close()
    return trainer.step_count


def _train_thread(overrides: list[str], run_dir: Path) -> None:
    from ssgd.run import build

    trainer, writer, world = build.trainer(make_cfg(*overrides), run_dir)
    try:
        trainer.fit()
    finally:
        world.close()
        writer.close()


@pytest.mark.slow
@pytest.mark.parametrize("compressor", group_options("compressor"))     # every scheme in conf/compressor/
def test_thread_and_torch_end_with_the_same_parameters(compressor, tmp_path):
    """Sparse schemes: bitwise equal weights and residuals. Dense: gloo's all_reduce adds in its own order, so
    weights agree to 1e-5 after 5 steps (tests/equivalence.py, the bound the MPI test states too)."""
    overrides = [f"compressor={compressor}", *EQUIV]
    _train_thread([*overrides, "backend=thread"], tmp_path / "thread")
    steps = run_ranks(3, _train_torch_rank, ([*overrides, "backend=torch"], str(tmp_path / "torch")), timeout=120)
    assert steps == [5, 5, 5]
    assert_same_runs(tmp_path / "thread", tmp_path / "torch", compressor)


@pytest.mark.slow
@pytest.mark.parametrize("compressor, values", [("topk", "bf16"), ("gtopk", "fp16")])
def test_thread_and_torch_agree_with_16bit_wire_values(compressor, values, tmp_path):
    """16-bit values on the wire (6-byte entries): bitwise equal weights and residuals, as with fp32."""
    overrides = [f"compressor={compressor}", f"compressor.wire.values={values}", *EQUIV]
    _train_thread([*overrides, "backend=thread"], tmp_path / "thread")
    steps = run_ranks(3, _train_torch_rank, ([*overrides, "backend=torch"], str(tmp_path / "torch")), timeout=120)
    assert steps == [5, 5, 5]
    assert_same_runs(tmp_path / "thread", tmp_path / "torch", compressor)


@pytest.mark.slow
@pytest.mark.parametrize("values", ["fp32", "bf16"])
def test_thread_and_torch_agree_with_narrow_indices(values, tmp_path):
    """uint16 indices (`compressor.collective.narrow_indices`, the DDP hook's default) on a model of
    d = 52,650 <= 2^16: thread == torch bitwise, and both equal the int32-index thread run."""
    overrides = ["compressor=topk", f"compressor.wire.values={values}", *EQUIV, "model.hidden=[64,32]"]
    narrow = [*overrides, "+compressor.collective.narrow_indices=true"]
    _train_thread([*narrow, "backend=thread"], tmp_path / "thread")
    _train_thread([*overrides, "backend=thread"], tmp_path / "int32")
    steps = run_ranks(3, _train_torch_rank, ([*narrow, "backend=torch"], str(tmp_path / "torch")), timeout=120)
    assert steps == [5, 5, 5]
    assert_same_runs(tmp_path / "thread", tmp_path / "torch", "topk")
    assert_same_runs(tmp_path / "thread", tmp_path / "int32", "topk")
    params = torch.load(tmp_path / "thread" / "checkpoint.pt", weights_only=False)["shared"]["params"]
    d = sum(p.numel() for p in params)
    assert d == 52_650 <= 2**16
    sent = [json.loads((tmp_path / run / "summary.json").read_text())["comm/bytes_sent"] for run in ("thread", "int32")]
    per = {"fp32": (6, 8), "bf16": (4, 6)}[values]          # bytes per entry: uint16 vs int32 indices
    assert sent[0] * per[1] == sent[1] * per[0] > 0


# -- launching, as a user does -----------------------------------------------------------------------
def train(run_dir: Path, *overrides: str, timeout: int = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_SILENT": "true"}
    return subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), f"hydra.run.dir={run_dir}",
                           "trainer.progress=false", "wandb.mode=disabled", *overrides],
                          capture_output=True, text=True, timeout=timeout, cwd=run_dir.parent, env=env)


@pytest.mark.slow
def test_train_py_launches_local_torch_ranks(tmp_path):
    proc = train(tmp_path / "run", "backend=torch", "cluster=local", "trainer.max_steps=8", "compressor=gaussiank")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "final val accuracy" in proc.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["backend"], summary["world_size"], summary["steps"]) == ("torch", 4, 8)
    assert OmegaConf.load(tmp_path / "run" / "worker_config.yaml").backend == "torch"


@pytest.mark.slow
@pytest.mark.serial                     # bounds its wall-clock time
def test_a_killed_rank_ends_the_job_naming_it(tmp_path):
    """A dead rank ends the job within seconds, not after dist.timeout_s (300 s): the launcher watches its ranks.
    (The launcher runs in this process on a composed config: what `python src/train.py backend=torch` calls. A
    rank that raises instead exits with status 1, named the same way: `describe_exit`, tests/unit.)"""
    from ssgd.run import launch_torch

    cfg = make_cfg("backend=torch", "cluster.world_size=2", "debug.fail_rank=1", "debug.fail_step=3",
                   "debug.fail_mode=kill")
    start = time.monotonic()
    status = launch_torch.run(cfg, tmp_path / "run")
    elapsed = time.monotonic() - start
    assert status == 1
    assert elapsed < 60, elapsed              # start-up of 2 ranks on 2 busy cores included
    line = str(launch_torch.ending(status, tmp_path / "run"))   # rank 0's reset may show in the same poll: named after
    assert line.startswith("backend=torch: rank 1 was killed by signal 9 (SIGKILL); ") and \
        line.endswith("the other ranks were stopped"), line


@pytest.mark.slow
def test_torchrun_runs_the_written_worker_config(tmp_path, caplog):
    """`dist.launch=false` writes the worker config and prints the torchrun / srun commands; torchrun (its agent
    hosts the rendezvous store) then runs the ranks."""
    from ssgd.run import launch_torch

    caplog.set_level(logging.INFO, logger="ssgd.train")
    run_dir = tmp_path / "run"
    cfg = make_cfg("backend=torch", "dist.launch=false", "cluster.world_size=2", "trainer.max_steps=3",
                   "compressor=gtopk")
    assert launch_torch.run(cfg, run_dir) == 0
    assert "torchrun --nnodes N --nproc-per-node G -m ssgd.run.worker torch" in caplog.text
    assert f"srun -n 2 {sys.executable} -m ssgd.run.worker torch {run_dir / 'worker_config.yaml'}" in caplog.text
    assert not (run_dir / "summary.json").exists()
    def torchrun() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                               "-m", "ssgd.run.worker", "torch", str(run_dir / "worker_config.yaml")],
                              capture_output=True, text=True, timeout=150,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"})

    first = torchrun()
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["backend"], summary["world_size"], summary["steps"]) == ("torch", 2, 3)
    # the same directory again: rank 0 alone finds the problem; the ranks end together on its one line
    again = torchrun()
    assert again.returncode != 0
    assert again.stderr.startswith(f"error: {run_dir / 'metrics.jsonl'}: already holds the records of another run")
    assert "[rank 1]" not in again.stderr, again.stderr[-3000:]


def worker(config: Path, env: dict[str, str], timeout: int = 120) -> subprocess.CompletedProcess:
    """`python -m ssgd.run.worker torch <config>` with `env` and none of the launchers' variables from this process."""
    clean = {k: v for k, v in os.environ.items()
             if k not in {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"} and not k.startswith("SLURM_")}
    return subprocess.run([sys.executable, "-m", "ssgd.run.worker", "torch", str(config)], capture_output=True,
                          text=True, timeout=timeout, env={**clean, "PYTHONPATH": str(ROOT / "src"), **env})


@pytest.mark.slow
@pytest.mark.parametrize("env, line", [
    ({}, "error: backend=torch: no rank in the environment: RANK (torchrun) and SLURM_PROCID (srun) are both unset"),
    ({"RANK": "0"}, "error: backend=torch: WORLD_SIZE is not set"),
    ({"RANK": "0", "WORLD_SIZE": "2"}, "error: backend=torch: LOCAL_RANK is not set"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"}, "error: backend=torch: SLURM_PROCID is set but "
     "SLURM_STEP_ID is not"),
])
def test_the_worker_names_a_missing_variable(env, line, tmp_path):
    proc = worker(tmp_path / "worker_config.yaml", env, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith(line), proc.stderr
    assert proc.stderr.count("\n") == 1


@pytest.mark.slow
def test_a_world_size_disagreeing_with_the_job_is_refused(tmp_path):
    cfg = make_cfg("backend=torch", "cluster.world_size=2")
    from ssgd.run.launch_mpi import prepare

    config = prepare(cfg, tmp_path / "run")
    proc = worker(config, {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "cluster.world_size=2 but this torch.distributed job has 1 ranks; start it with torchrun " \
           "--nproc-per-node 2" in proc.stderr
