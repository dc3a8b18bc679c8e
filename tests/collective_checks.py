"""Collective checks shared by the executors that run one rank per process (MPI, torch.distributed).

Every rank draws the same inputs from a shared seed and takes its own; a check receives one rank's
`Reduced` and `RankLog` from the executor under test and asserts that the result equals the independent
oracle (tests/oracles.py) and the in-process executor's result for the same inputs (bitwise for sparse
schemes), and that the counted bytes/messages equal the cost model. `CASES` lists the (check, args)
pairs; `inputs(kind, P, d, k, seed)` rebuilds any case's inputs from its arguments.

Used by tests/mpi/check_collectives.py (under mpiexec) and tests/integration/test_torch_dist.py.
"""
from __future__ import annotations

import sys
import traceback
from typing import Callable

import numpy as np
import torch

import oracles
from ssgd.comm.collectives.allgather import SparseAllgather
from ssgd.comm.base import Reduced
from ssgd.comm.collectives.dense import DenseAllreduce
from ssgd.comm.collectives.gtopk import GTopKAllreduce
from ssgd.comm.executors.thread import run_threads
from ssgd.payload import Dense, Sparse
from ssgd.perf import cost

F32_EPS = float(np.finfo(np.float32).eps)    # 2^-23


def to_sparse(entries: dict, d: int) -> Sparse:
    idx = sorted(entries)
    return Sparse(torch.tensor(idx, dtype=torch.int64), torch.tensor([float(entries[i]) for i in idx],
                                                                      dtype=torch.float32), d)


def as_dict(s: Sparse) -> dict:
    return {int(i): np.float32(v) for i, v in zip(s.idx.tolist(), s.val.tolist())}


def dense_inputs(P: int, d: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(d).astype(np.float32) for _ in range(P)]


def sparse_inputs(P: int, d: int, k: int | None, seed: int) -> list[dict]:
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


COLLECTIVES = {"dense": DenseAllreduce, "allgather": SparseAllgather, "gtopk": GTopKAllreduce}


def payload(kind: str, rank: int, P: int, d: int, k: int | None, seed: int, device: str = "cpu"):
    """This rank's payload of a case (see CASES), on `device`."""
    if kind == "dense":
        return Dense(torch.from_numpy(dense_inputs(P, d, seed)[rank].copy()).to(device))
    s = to_sparse(sparse_inputs(P, d, k, seed)[rank], d)
    return Sparse(s.idx.to(device), s.val.to(device), d)


def on_host(reduced: Reduced) -> Reduced:
    """A result computed on a GPU, moved to the host for the checks (the values are not changed by the copy)."""
    t = reduced.total
    total = Dense(t.values.cpu()) if isinstance(t, Dense) else Sparse(t.idx.cpu(), t.val.cpu(), t.numel)
    return Reduced(total, reduced.P, None if reduced.support is None else reduced.support.cpu())


def dense_bound(vectors: list[np.ndarray]) -> np.ndarray:
    """How far an all-reduce that adds in its own order may be from the rank-order sum, divided by P, per
    element: each order's float32 error is at most (P - 1) eps/2 sum_r |g_r| (first order), so two orders
    differ by at most (P - 1) eps sum_r |g_r|; then / P, plus one rounding of the result."""
    P = len(vectors)
    magnitude = np.sum([np.abs(v.astype(np.float64)) for v in vectors], axis=0)
    bound = (P - 1) * F32_EPS * magnitude / P + F32_EPS * np.abs(oracles.dense_average(vectors))
    return 1.001 * bound + 1e-45           # 1.001: the second-order terms of the error bound


def check(kind: str, rank: int, P: int, d: int, k: int | None, seed: int, reduced, log, exact_dense: bool) -> None:
    """Assert that one rank's result of a case is right (module docstring). `exact_dense`: the executor
    promises the rank-order sum for dense (else `dense_bound`). A result on a GPU is checked on the host."""
    reduced = on_host(reduced)
    if kind == "dense":
        vectors = dense_inputs(P, d, seed)
        want, got = oracles.dense_average(vectors), reduced.average().numpy()
        if exact_dense:
            assert np.array_equal(got.view(np.int32), want.view(np.int32)), f"dense d={d}"
        else:
            excess = np.abs(got.astype(np.float64) - want) - dense_bound(vectors)
            assert (excess <= 0).all(), f"dense d={d}: {np.abs(got - want).max()} beyond the bound"
        assert (log.stats.messages, log.stats.bytes) == cost.allreduce_sent(rank, P, d)
        return
    entries = sparse_inputs(P, d, k, seed)
    payloads = [to_sparse(e, d) for e in entries]
    threads, _ = run_threads(COLLECTIVES[kind](), payloads)
    assert torch.equal(threads[rank].total.idx, reduced.total.idx), f"{kind} d={d}: indices differ from threads"
    assert torch.equal(threads[rank].total.val, reduced.total.val), f"{kind} d={d}: values differ from threads"
    if kind == "allgather":
        want = oracles.allgather_average(entries, d)
        assert np.array_equal(reduced.average().numpy().view(np.int32), want.view(np.int32)), f"allgather d={d}"
        assert reduced.support is None
        assert (log.stats.messages, log.stats.bytes) == cost.allgatherv_sent(rank, [8 * len(e) for e in entries])
    else:
        want = oracles.gtopk(entries, k)
        got = as_dict(reduced.total)
        assert set(got) == set(want), f"gtopk d={d} k={k}: index sets differ"
        assert all(got[i].view(np.int32) == np.float32(want[i]).view(np.int32) for i in want), "gtopk values"
        assert set(reduced.support.tolist()) == set(want)
        assert (log.stats.messages, log.stats.bytes) == cost.gtopk_sent(rank, P, k)


def run_cases(rank: int, P: int, device: str = "cpu") -> list:
    """Run every case with `ssgd.comm.executors.torch_dist` in this rank of an initialised process group; returns what
    `check_ranks` needs, as picklable host data: (total, support, messages, bytes, staging seconds) per case."""
    from ssgd.comm.executors.torch_dist import run_torch

    out = []
    for kind, d, k, seed in CASES:
        reduced, log = run_torch(COLLECTIVES[kind](), payload(kind, rank, P, d, k, seed, device))
        total = on_host(reduced).total
        data = total.values.numpy().copy() if kind == "dense" else (total.idx.numpy().copy(), total.val.numpy().copy())
        support = None if reduced.support is None else reduced.support.cpu().numpy().copy()
        out.append((data, support, log.stats.messages, log.stats.bytes, log.staging_s))
    return out


def check_ranks(per_rank: list, P: int, exact_dense: bool = False) -> None:
    """`check` every case of every rank's `run_cases` result; dense results must also be the same bits on
    every rank."""
    from ssgd.comm.ops import RankLog

    for c, (kind, d, k, seed) in enumerate(CASES):
        for rank in range(P):
            data, support, messages, nbytes, _ = per_rank[rank][c]
            total = Dense(torch.from_numpy(data)) if kind == "dense" else \
                Sparse(torch.from_numpy(data[0]), torch.from_numpy(data[1]), d)
            log = RankLog()
            log.stats.add((messages, nbytes))
            reduced = Reduced(total, P, None if support is None else torch.from_numpy(support))
            check(kind, rank, P, d, k, seed, reduced, log, exact_dense)
        if kind == "dense":
            first = per_rank[0][c][0].view(np.int32)
            assert all(np.array_equal(first, per_rank[r][c][0].view(np.int32)) for r in range(P)), \
                f"dense d={d}: ranks received different bits"


# (kind, d, k, seed): dense of one element and of 1,000; ragged allgathers (some ranks send nothing);
# gTop-k with k = 1, 7 and k = d
CASES = [("dense", 1, None, 0), ("dense", 1000, None, 1), ("allgather", 1, None, 2), ("allgather", 300, None, 3),
         ("gtopk", 1, 1, 4), ("gtopk", 50, 1, 5), ("gtopk", 200, 7, 6), ("gtopk", 64, 64, 7)]


def run_collectively(checks: list[tuple[str, Callable[[], None]]], rank: int, P: int,
                     all_ok: Callable[[int], int]) -> int:
    """Run each named check on this rank; `all_ok(1 or 0)` combines the verdicts of every rank (an
    allreduce with MIN), so a failing rank cannot strand the others. Rank 0 prints the count; returns the
    exit status, 1 on every rank if any check failed anywhere."""
    failures = 0
    for name, fn in checks:
        try:
            fn()
            ok = 1
        except Exception:                      # report, then decide collectively
            print(f"[rank {rank}] {name} failed:\n{traceback.format_exc()}", file=sys.stderr)
            ok = 0
        if all_ok(ok) == 0:
            failures += 1
    if rank == 0:
        print(f"P={P}: {len(checks) - failures} passed, {failures} failed")
    return 1 if failures else 0
