"""Collective checks on real MPI ranks: run as `mpiexec -n P python -m mpi4py tests/mpi/check_collectives.py`.

Every case of tests/collective_checks.py (each collective against the independent oracle, tests/oracles.py,
and the in-process executor, bitwise for sparse schemes; counted bytes/messages against the cost model)
runs through `ssgd.comm.mpi.run_mpi`, on CPU tensors or, with SSGD_CHECK_DEVICE=cuda, on each rank's GPU
(staged through the host unless MPI is CUDA-aware: tests/gpu/). MPI_Allreduce fixes no summation order, so dense results are held to
`collective_checks.dense_bound`. Assertions are collective (one allreduce of the verdicts), so a failing
rank cannot strand the others; the exit status is 1 on every rank if any check failed anywhere.
"""
from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import torch
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/ for oracles.py, collective_checks.py
import collective_checks as checks  # noqa: E402
from ssgd.comm.mpi import run_mpi  # noqa: E402

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
DEVICE = os.environ.get("SSGD_CHECK_DEVICE", "cpu")     # cuda: this rank's GPU, cuda:<local rank>


def main() -> int:
    failures = 0
    for kind, d, k, seed in checks.CASES:
        try:
            device = f"cuda:{rank % max(1, torch.cuda.device_count())}" if DEVICE == "cuda" else DEVICE
            reduced, log = run_mpi(checks.COLLECTIVES[kind](), checks.payload(kind, rank, P, d, k, seed, device), comm)
            checks.check(kind, rank, P, d, k, seed, reduced, log, exact_dense=False)
            ok = 1
        except Exception:                      # report, then decide collectively
            print(f"[rank {rank}] {kind} d={d} k={k} seed={seed} failed:\n{traceback.format_exc()}", file=sys.stderr)
            ok = 0
        if comm.allreduce(ok, op=MPI.MIN) == 0:
            failures += 1
    if rank == 0:
        print(f"P={P}: {len(checks.CASES) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
