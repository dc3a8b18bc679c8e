"""TopkDSA (ssgd.comm.collectives.sparcml) on real ranks: torch.distributed (gloo, forked ranks) and MPI.

Each rank's total must be the oracle's and the in-process executor's, bit for bit, and its counted messages and
bytes the oracle's (tests/sparcml_inputs.py `check_rank`), for every case of `RANK_CASES`, at P = 1..5 on torch.distributed
and P = 2, 3, 5 on MPI (marked slow: an mpiexec job each, about 20 to 45 s on a shared 2-core machine).
"""
import sys
from pathlib import Path

import pytest

import sparcml_inputs as dsa
from mpi_jobs import mpiexec
from torch_ranks import run_ranks

ROOT = Path(__file__).resolve().parents[2]


def _torch_cases(rank: int, P: int) -> list:
    from ssgd.comm.collectives.sparcml import SparseRecursiveDoubling
    from ssgd.comm.executors.torch_dist import run_torch

    out = []
    for kind, d, k, seed in dsa.RANK_CASES:
        reduced, log = run_torch(SparseRecursiveDoubling(), dsa.to_sparse(dsa.inputs(kind, P, d, k, seed)[rank], d))
        out.append((dsa.host_result(reduced), log.stats.messages, log.stats.bytes))
    return out


@pytest.mark.parametrize("P", [1, 2, 3, 4, 5])
def test_topkdsa_on_real_torch_ranks(P):
    for rank, cases in enumerate(run_ranks(P, _torch_cases, timeout=90)):
        for case, (result, messages, nbytes) in zip(dsa.RANK_CASES, cases):
            dsa.check_rank(case, rank, P, result, messages, nbytes)


@pytest.mark.slow
@pytest.mark.parametrize("P", [2, 3, 5])         # one round; a fold; a fold and two rounds
def test_topkdsa_on_real_mpi_ranks(P):
    proc = mpiexec(P, sys.executable, "-m", "mpi4py", str(ROOT / "tests" / "mpi" / "check_sparcml.py"))
    job = f"exit status {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert proc.returncode == 0 and f"P={P}: {len(dsa.RANK_CASES)} passed, 0 failed" in proc.stdout, job
