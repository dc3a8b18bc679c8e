"""TopkDSA on real MPI ranks: run as `mpiexec -n P python -m mpi4py tests/mpi/check_sparcml.py`.

Every case of tests/sparcml_inputs.py `RANK_CASES` runs through `ssgd.comm.executors.mpi.run_mpi`; each rank's
total must equal the oracle's (tests/oracles.py `topkdsa`) and the in-process executor's bit for bit, and its
counted messages and bytes the oracle's. Verdicts are combined collectively (collective_checks.run_collectively):
rank 0 prints "P=<n>: <passed> passed, <failed> failed" and every rank exits 1 if any check failed anywhere.
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path

from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/ for oracles.py, sparcml_inputs.py
import collective_checks as checks  # noqa: E402
import sparcml_inputs as dsa  # noqa: E402
from ssgd.comm.collectives.sparcml import SparseRecursiveDoubling  # noqa: E402
from ssgd.comm.executors.mpi import run_mpi  # noqa: E402

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()


def case(kind: str, d: int, k: int, seed: int) -> None:
    mine = dsa.to_sparse(dsa.inputs(kind, P, d, k, seed)[rank], d)
    reduced, log = run_mpi(SparseRecursiveDoubling(), mine, comm)
    dsa.check_rank((kind, d, k, seed), rank, P, dsa.host_result(reduced), log.stats.messages, log.stats.bytes)


def main() -> int:
    named = [(f"topkdsa {kind} d={d} k={k} seed={seed}", functools.partial(case, kind, d, k, seed))
             for kind, d, k, seed in dsa.RANK_CASES]
    return checks.run_collectively(named, rank, P, lambda ok: comm.allreduce(ok, op=MPI.MIN))


if __name__ == "__main__":
    sys.exit(main())
