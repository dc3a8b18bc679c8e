"""Collective checks on real MPI ranks: run as `mpiexec -n P python -m mpi4py tests/mpi/check_collectives.py`.

Every rank draws the same inputs from a shared seed and takes its own; each collective's result on
this rank must equal the independent oracle (tests/oracles.py) and the in-process executor's
result for the same inputs, bitwise for sparse schemes; counted bytes/messages must equal the cost
model. Assertions are collective (one allreduce of the verdicts), so a failing rank cannot strand
the others; the exit status is 1 on every rank if any check failed anywhere.
"""
from __future__ import annotations

import sys
import traceback
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/ for oracles.py
import oracles  # noqa: E402
from ssgd.comm.allgather import SparseAllgather  # noqa: E402
from ssgd.comm.dense import DenseAllreduce  # noqa: E402
from ssgd.comm.gtopk import GTopKAllreduce  # noqa: E402
from ssgd.comm.mpi import run_mpi  # noqa: E402
from ssgd.comm.thread import run_threads  # noqa: E402
from ssgd.payload import Dense, Sparse  # noqa: E402
from ssgd.perf import cost  # noqa: E402

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()


def to_sparse(entries: dict, d: int) -> Sparse:
    idx = sorted(entries)
    return Sparse(torch.tensor(idx, dtype=torch.int64), torch.tensor([float(entries[i]) for i in idx],
                                                                      dtype=torch.float32), d)


def as_dict(s: Sparse) -> dict:
    return {int(i): np.float32(v) for i, v in zip(s.idx.tolist(), s.val.tolist())}


def sparse_inputs(d: int, k: int | None, seed: int) -> list[dict]:
    """Distinct magnitudes across all ranks (top-k unique); exactly k entries each, or ragged sizes."""
    rng = np.random.default_rng(seed)
    mags = rng.permutation(np.arange(1, P * d + 1, dtype=np.float32))[: P * d] / np.float32(P * d)
    out = []
    for r in range(P):
        n = k if k is not None else int(rng.integers(0, d + 1)) * (r % 3 != 2)   # some ranks send nothing
        idx = rng.choice(d, size=n, replace=False)
        signs = rng.choice(np.array([-1, 1], dtype=np.float32), size=n)
        out.append({int(i): np.float32(signs[j] * mags[r * d + j]) for j, i in enumerate(idx)})
    return out


def check_dense(d: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    vectors = [rng.standard_normal(d).astype(np.float32) for _ in range(P)]
    res, log = run_mpi(DenseAllreduce(), Dense(torch.from_numpy(vectors[rank].copy())), comm)
    want = oracles.dense_average(vectors)
    got = res.average().numpy()
    # MPI_Allreduce fixes no summation order: equal to the rank-order oracle up to rounding
    assert np.allclose(got, want, rtol=1e-5, atol=1e-6 * P), f"dense d={d}: max diff {np.abs(got - want).max()}"
    assert (log.stats.messages, log.stats.bytes) == cost.allreduce_sent(rank, P, d)


def check_allgather(d: int, seed: int) -> None:
    entries = sparse_inputs(d, None, seed)
    payloads = [to_sparse(e, d) for e in entries]
    res, log = run_mpi(SparseAllgather(), payloads[rank], comm)
    want = oracles.allgather_average(entries, d)
    assert np.array_equal(res.average().numpy().view(np.int32), want.view(np.int32)), f"allgather d={d}"
    threads, _ = run_threads(SparseAllgather(), payloads)
    assert torch.equal(threads[rank].total.idx, res.total.idx) and torch.equal(threads[rank].total.val, res.total.val)
    assert res.support is None
    assert (log.stats.messages, log.stats.bytes) == cost.allgatherv_sent(rank, [8 * len(e) for e in entries])


def check_gtopk(d: int, k: int, seed: int) -> None:
    entries = sparse_inputs(d, k, seed)
    payloads = [to_sparse(e, d) for e in entries]
    res, log = run_mpi(GTopKAllreduce(), payloads[rank], comm)
    want = oracles.gtopk(entries, k)
    got = as_dict(res.total)
    assert set(got) == set(want), f"gtopk d={d} k={k}: index sets differ"
    assert all(got[i].view(np.int32) == np.float32(want[i]).view(np.int32) for i in want), "gtopk values"
    assert set(res.support.tolist()) == set(want)
    threads, _ = run_threads(GTopKAllreduce(), payloads)
    assert torch.equal(threads[rank].total.idx, res.total.idx) and torch.equal(threads[rank].total.val, res.total.val)
    assert (log.stats.messages, log.stats.bytes) == cost.gtopk_sent(rank, P, k)


CHECKS = [(check_dense, (1, 0)), (check_dense, (1000, 1)), (check_allgather, (1, 2)), (check_allgather, (300, 3)),
          (check_gtopk, (1, 1, 4)), (check_gtopk, (50, 1, 5)), (check_gtopk, (200, 7, 6)), (check_gtopk, (64, 64, 7))]


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
