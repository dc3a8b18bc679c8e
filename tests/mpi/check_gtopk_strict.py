"""gTop-k's strict residual rule on real MPI ranks: `mpiexec -n P python -m mpi4py tests/mpi/check_gtopk_strict.py`.

Every rank draws the same inputs from a shared seed and takes its own; its result must equal the
in-process executor's for the same inputs bit for bit (global vector and this rank's strict support),
its support must be the oracle's (tests/oracles.py `gtopk_sent_strict`), and its counted bytes and
messages the cost model's. Verdicts are combined with one allreduce per check, so a failing rank
cannot strand the others; exit status 1 on every rank if any check failed anywhere.
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path

import torch
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/ for oracles.py, collective_checks.py
import oracles  # noqa: E402
from collective_checks import as_dict, run_collectively, sparse_inputs, to_sparse  # noqa: E402
from ssgd.comm.collectives.gtopk import GTopKAllreduce  # noqa: E402
from ssgd.comm.executors.mpi import run_mpi  # noqa: E402
from ssgd.comm.executors.thread import run_threads  # noqa: E402
from ssgd.perf import cost  # noqa: E402

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()


def check_strict(d: int, k: int, seed: int) -> None:
    entries = sparse_inputs(P, d, k, seed)
    payloads = [to_sparse(e, d) for e in entries]
    res, log = run_mpi(GTopKAllreduce("strict"), payloads[rank], comm)
    assert as_dict(res.total) == oracles.gtopk(entries, k), "strict: global vector"
    assert set(res.support.tolist()) == oracles.gtopk_sent_strict(entries, k)[rank], "strict: support"
    threads, _ = run_threads(GTopKAllreduce("strict"), payloads)
    assert torch.equal(threads[rank].total.idx, res.total.idx) and torch.equal(threads[rank].total.val, res.total.val)
    assert torch.equal(threads[rank].support, res.support)
    assert (log.stats.messages, log.stats.bytes) == cost.gtopk_strict_sent(rank, P, k)


CHECKS = [(check_strict, (1, 1, 4)), (check_strict, (50, 1, 5)), (check_strict, (200, 7, 6)),
          (check_strict, (64, 64, 7)), (check_strict, (300, 20, 8))]


def main() -> int:
    named = [(f"{fn.__name__}{args}", functools.partial(fn, *args)) for fn, args in CHECKS]
    return run_collectively(named, rank, P, lambda ok: comm.allreduce(ok, op=MPI.MIN))


if __name__ == "__main__":
    sys.exit(main())
