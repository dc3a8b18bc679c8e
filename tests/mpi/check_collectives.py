"""Collective checks on real MPI ranks: run as `mpiexec -n P python -m mpi4py tests/mpi/check_collectives.py`.

Every case of tests/collective_checks.py (each collective against the independent oracle, tests/oracles.py,
and the in-process executor, bitwise for sparse schemes; counted bytes/messages against the cost model)
runs through `ssgd.comm.executors.mpi.run_mpi`, on CPU tensors or, with SSGD_CHECK_DEVICE=cuda, on each rank's GPU
(staged through the host unless MPI is CUDA-aware: tests/gpu/). MPI_Allreduce fixes no summation order, so dense results are held to
`collective_checks.dense_bound`. Assertions are collective (one allreduce of the verdicts), so a failing
rank cannot strand the others; the exit status is 1 on every rank if any check failed anywhere.
"""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import torch
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/ for oracles.py, collective_checks.py
import collective_checks as checks  # noqa: E402
from ssgd.comm.executors.mpi import run_mpi  # noqa: E402

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
DEVICE = os.environ.get("SSGD_CHECK_DEVICE", "cpu")     # cuda: this rank's GPU, cuda:<local rank>


def case(kind: str, d: int, k: int | None, seed: int) -> None:
    device = f"cuda:{rank % max(1, torch.cuda.device_count())}" if DEVICE == "cuda" else DEVICE
    reduced, log = run_mpi(checks.COLLECTIVES[kind](), checks.payload(kind, rank, P, d, k, seed, device), comm)
    checks.check(kind, rank, P, d, k, seed, reduced, log, exact_dense=False)


def main() -> int:
    named = [(f"{kind} d={d} k={k} seed={seed}", functools.partial(case, kind, d, k, seed))
             for kind, d, k, seed in checks.CASES]
    return checks.run_collectively(named, rank, P, lambda ok: comm.allreduce(ok, op=MPI.MIN))


if __name__ == "__main__":
    sys.exit(main())
