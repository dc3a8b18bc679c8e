"""Inputs and checks of TopkDSA (ssgd.comm.collectives.sparcml) shared by its unit tests and its real-rank runs.

`inputs(kind, P, d, k, seed)` draws P ranks' k entries each from one of three index distributions; every rank of
a real run draws the same from the shared seed and takes its own. `RANK_CASES` are the (kind, d, k, seed) cases
run on real ranks (torch.distributed, MPI); `host_result` turns one rank's result into picklable data and
`check_rank` compares it with the oracle (tests/oracles.py `topkdsa`) and the in-process executor, bit for bit,
and its counted messages and bytes with the oracle's.
"""
from __future__ import annotations

import numpy as np
import torch

import oracles
from ssgd.comm.base import Reduced
from ssgd.comm.collectives.sparcml import SparseRecursiveDoubling
from ssgd.comm.executors.thread import run_threads
from ssgd.payload import Dense, Sparse

F32 = np.float32
DISTRIBUTIONS = ("normal", "heavy", "clustered")
# small and large fill-in: (600, 100) goes dense from P = 4 on, (5000, 30) stays sparse
RANK_CASES = [("normal", 600, 100, 1), ("heavy", 5000, 30, 2), ("clustered", 2000, 60, 3)]


def index_weights(kind: str, d: int, rng: np.random.Generator) -> np.ndarray:
    """Where the ranks' indices fall: a normal bump in the middle, a heavy (Zipf-like) tail from index 0, or
    four narrow clusters shared by every rank (much overlap)."""
    i = np.arange(d, dtype=np.float64)
    if kind == "normal":
        w = np.exp(-0.5 * ((i - d / 2) / (d / 8)) ** 2)
    elif kind == "heavy":
        w = 1.0 / (i + 1.0) ** 1.1
    elif kind == "clustered":
        w = np.full(d, 1e-3)
        for start in rng.choice(d - d // 20, size=4, replace=False):
            w[start:start + d // 20] = 1.0
    else:
        raise ValueError(f"index distribution {kind!r}: allowed: {', '.join(DISTRIBUTIONS)}")
    return w / w.sum()


def inputs(kind: str, P: int, d: int, k: int, seed: int) -> list[dict[int, np.float32]]:
    """P ranks' k entries each, indices drawn from `index_weights` (the same weights for every rank), values
    normal (heavy-tailed, Student t with 2 degrees of freedom, for the heavy kind)."""
    rng = np.random.default_rng(seed)
    w = index_weights(kind, d, rng)
    out = []
    for _ in range(P):
        idx = rng.choice(d, size=k, replace=False, p=w)
        val = (rng.standard_t(2, size=k) if kind == "heavy" else rng.standard_normal(k)).astype(F32)
        out.append({int(i): F32(v) for i, v in zip(idx, val)})
    return out


def to_sparse(entries: dict[int, np.float32], d: int) -> Sparse:
    idx = list(entries)
    return Sparse(torch.tensor(idx, dtype=torch.int64), torch.tensor([entries[i] for i in idx], dtype=torch.float32), d)


def assert_equals_oracle(total, want, d: int) -> None:
    """Sparse totals: the same index set (increasing) and values' bits; dense totals: the same d values' bits."""
    if isinstance(want, dict):
        assert isinstance(total, Sparse) and total.numel == d, f"want a sparse total, got {type(total).__name__}"
        assert bool((total.idx[1:] > total.idx[:-1]).all()), "indices not increasing"
        got = dict(zip(total.idx.tolist(), total.val.numpy().view(np.int32).tolist()))
        assert got == {i: int(F32(v).view(np.int32)) for i, v in want.items()}, "sparse total differs"
    else:
        assert isinstance(total, Dense), f"want a dense total, got {type(total).__name__}"
        assert np.array_equal(total.values.numpy().view(np.int32), want.view(np.int32)), "dense total differs"


def host_result(reduced: Reduced) -> tuple:
    """One rank's result as picklable host data: ("dense", values) or ("sparse", indices, values), and support."""
    t = reduced.total
    data = ("dense", t.values.cpu().numpy().copy()) if isinstance(t, Dense) else \
        ("sparse", t.idx.cpu().numpy().copy(), t.val.cpu().numpy().copy())
    return data, reduced.support


def from_host(data: tuple, d: int) -> Dense | Sparse:
    if data[0] == "dense":
        return Dense(torch.from_numpy(data[1]))
    return Sparse(torch.from_numpy(data[1]), torch.from_numpy(data[2]), d)


def check_rank(case: tuple, rank: int, P: int, result: tuple, messages: int, nbytes: int) -> None:
    """One rank's (`host_result`, counted messages, bytes) of a `RANK_CASES` case: the oracle's total and
    messages, the thread executor's bits, the whole payload sent (support None)."""
    kind, d, k, seed = case
    entries = inputs(kind, P, d, k, seed)
    data, support = result
    total = from_host(data, d)
    want, sent = oracles.topkdsa(entries, d)
    assert support is None
    assert_equals_oracle(total, want[rank], d)
    threads, _ = run_threads(SparseRecursiveDoubling(), [to_sparse(e, d) for e in entries])
    assert_equals_oracle(threads[rank].total, want[rank], d)
    assert (messages, nbytes) == (len(sent[rank]), sum(sent[rank])), f"rank {rank}: counted {messages}, {nbytes}"
