"""gTop-k's strict residual rule on real MPI ranks: `mpiexec -n P python -m mpi4py tests/mpi/check_gtopk_strict.py`.

Every rank draws the same inputs from a shared seed and takes its own; its result must equal the
in-process executor's for the same inputs bit for bit (global vector and this rank's strict support),
its support must be the oracle's (tests/oracles.py `gtopk_sent_strict`), and its counted bytes and
messages the cost model's. Verdicts are combined with one allreduce per check, so a failing rank
cannot strand the others; exit status 1 on every rank if any check failed anywhere.
"""
from __future__ import annotations

import sys
import traceback
from pathlib import Path

import torch
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parent))       # check_collectives (inputs, translation)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/ for oracles.py
import oracles  # noqa: E402
from check_collectives import P, as_dict, comm, rank, sparse_inputs, to_sparse  # noqa: E402
from ssgd.comm.gtopk import GTopKAllreduce  # noqa: E402
from ssgd.comm.mpi import run_mpi  # noqa: E402
from ssgd.comm.thread import run_threads  # noqa: E402
from ssgd.perf import cost  # noqa: E402


def check_strict(d: int, k: int, seed: int) -> None:
    entries = sparse_inputs(d, k, seed)
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
    failures = 0
    for fn, args in CHECKS:
        try:
            fn(*args)
            ok = 1
        except Exception:                      # report, then decide collectively
            print(f"[rank {rank}] {fn.__name__}{args} failed:\n{traceback.format_exc()}", file=sys.stderr)
            ok = 0
        if comm.allreduce(ok, op=MPI.MIN) == 0:
            failures += 1
    if rank == 0:
        print(f"P={P}: {len(CHECKS) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
