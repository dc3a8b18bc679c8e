"""The package's collectives, run by the thread executor, against independent oracles.

The oracles (tests/oracles.py) are written from the specification with dicts and numpy float32;
here we only translate payloads/results between `Sparse`/`Dense` and that plain data.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/, for `oracles`
import oracles  # noqa: E402

from ssgd.comm.collectives.allgather import SparseAllgather  # noqa: E402
from ssgd.comm.base import Collective, Reduced  # noqa: E402
from ssgd.comm.collectives.dense import DenseAllreduce  # noqa: E402
from ssgd.comm.collectives.gtopk import GTopKAllreduce  # noqa: E402
from ssgd.comm.ops import Recv, Send  # noqa: E402
from ssgd.comm.executors.thread import CollectiveDeadlock, rank_order_sum, run_threads  # noqa: E402
from ssgd.payload import Dense, Sparse  # noqa: E402
from ssgd.perf import cost  # noqa: E402
from ssgd.perf.alphabeta import AlphaBeta  # noqa: E402

F32 = np.float32
P_LIST = [1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 32]
# (d, k): k = 1, a few, and k = d
DK = [(1, 1), (7, 1), (7, 3), (7, 7), (100, 1), (100, 10), (100, 100), (1000, 5), (1000, 50), (1000, 1000)]
SEEDS = [0, 1]
NET = AlphaBeta(1e-3, 1e-8)


# --- translation helpers -------------------------------------------------------------------------
def to_sparse(entries: dict[int, float], d: int) -> Sparse:
    idx = list(entries)
    return Sparse(torch.tensor(idx, dtype=torch.int64).reshape(-1),
                  torch.tensor([float(entries[i]) for i in idx], dtype=torch.float32).reshape(-1), d)


def to_dict(s: Sparse) -> dict[int, np.float32]:
    idx = s.idx.tolist()
    val = s.val.numpy().astype(F32)
    assert len(set(idx)) == len(idx), f"duplicate indices in result: {idx}"
    return {int(i): F32(v) for i, v in zip(idx, val)}


def dense_of(total, d: int) -> np.ndarray:
    if isinstance(total, Sparse):
        assert total.numel == d
        out = np.zeros(d, dtype=F32)
        for i, v in to_dict(total).items():
            out[i] = v
        return out
    return total.values.numpy()


def bits(a: np.ndarray) -> np.ndarray:
    """Compare float32 arrays bit for bit (so -0.0 != 0.0 would be caught and NaN == NaN)."""
    return np.ascontiguousarray(a, dtype=F32).view(np.int32)


def assert_same_dict(got: dict, want: dict) -> None:
    assert set(got) == set(want), f"index sets differ: got-want={set(got) - set(want)} want-got={set(want) - set(got)}"
    for i in want:
        assert F32(got[i]).view(np.int32) == F32(want[i]).view(np.int32), f"index {i}: got {got[i]!r} want {want[i]!r}"


def stats(logs) -> list[tuple[int, int]]:
    return [(log.stats.messages, log.stats.bytes) for log in logs]


# --- input generators ------------------------------------------------------------------------------
def distinct_magnitudes(rng: np.random.Generator, n: int) -> np.ndarray:
    """n float32 values with pairwise distinct |v| in [0.5, 4.5) and random signs."""
    mags = (0.5 + rng.choice(2**22, size=n, replace=False) * 2.0**-20).astype(F32)   # exact in float32
    assert len(np.unique(mags)) == n
    signs = np.where(rng.random(n) < 0.5, F32(-1), F32(1)).astype(F32)
    return (mags * signs).astype(F32)


def gtopk_inputs(P: int, d: int, k: int, seed: int, mode: str = "random") -> list[dict[int, np.float32]]:
    rng = np.random.default_rng(seed)
    vals = distinct_magnitudes(rng, P * k)
    if mode == "same":
        shared = rng.choice(d, size=k, replace=False)
        idx_per_rank = [rng.permutation(shared) for _ in range(P)]
    elif mode == "disjoint":
        assert P * k <= d
        perm = rng.permutation(d)
        idx_per_rank = [perm[r * k:(r + 1) * k] for r in range(P)]
    else:
        idx_per_rank = [rng.choice(d, size=k, replace=False) for _ in range(P)]
    return [{int(i): F32(v) for i, v in zip(idx_per_rank[r], vals[r * k:(r + 1) * k])} for r in range(P)]


def allgather_inputs(P: int, d: int, seed: int) -> list[dict[int, np.float32]]:
    """Ragged per-rank sizes in [0, d], zero entries on every third rank (and possibly others)."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(P):
        n = 0 if r % 3 == 1 else int(rng.integers(0, d + 1))
        idx = rng.choice(d, size=n, replace=False)
        val = rng.standard_normal(n).astype(F32)       # Gaussian-like values, arbitrary index sets
        out.append({int(i): F32(v) for i, v in zip(idx, val)})
    return out


def run_gtopk(entries, d, net=None):
    return run_threads(GTopKAllreduce(), [to_sparse(e, d) for e in entries], net=net)


def check_gtopk(results: list[Reduced], want: dict, P: int, d: int) -> None:
    """Every rank: total == want (index set + values by index), support == I_g, average, identity."""
    want_avg = np.zeros(d, dtype=F32)
    for i, v in want.items():
        want_avg[i] = F32(v / F32(P))
    for r, res in enumerate(results):
        assert res.P == P
        assert isinstance(res.total, Sparse) and res.total.numel == d
        assert_same_dict(to_dict(res.total), want)
        assert res.support is not None
        assert sorted(res.support.tolist()) == sorted(want), f"rank {r}: support != I_g"
        np.testing.assert_array_equal(bits(res.average().numpy()), bits(want_avg))
        # identical on every rank, bit for bit and in the same order
        assert torch.equal(res.total.idx, results[0].total.idx)
        assert torch.equal(res.total.val, results[0].total.val)
        assert torch.equal(res.support, results[0].support)


# --- 0. the oracles themselves, on hand-made cases --------------------------------------------------
def test_oracle_pairs_p8_match_authors_schedule():
    assert oracles.gtopk_pairs(8) == [[(0, 1), (2, 3), (4, 5), (6, 7)], [(0, 2), (4, 6)], [(0, 4)]]
    assert oracles.gtopk_pairs(1) == []
    assert oracles.gtopk_pairs(3) == [[(0, 1)], [(0, 2)]]
    assert oracles.gtopk_pairs(6) == [[(0, 1), (2, 3), (4, 5)], [(0, 2)], [(0, 4)]]


def tree_beats_exact_example():
    """P=4, k=1, d=3. Round 0: 0<-1 {0:3, 1:2} -> {0:3}; 2<-3 {1:1.9, 2:2.5} -> {2:2.5}.
    Round 1: 0<-2 {0:3, 2:2.5} -> {0:3}. Exact sum is {0:3, 1:3.9, 2:2.5}, whose top-1 is index 1."""
    return [{0: F32(3.0)}, {1: F32(2.0)}, {1: F32(1.9)}, {2: F32(2.5)}]


def test_oracle_simulates_the_tree_by_hand():
    entries = tree_beats_exact_example()
    assert oracles.gtopk(entries, 1) == {0: F32(3.0)}
    assert oracles.exact_topk_of_sum(entries, 1) == {1: F32(2.0) + F32(1.9)}


def test_oracle_dense_is_rank_order():
    # ((1e8 + 1) - 1e8) + 1 = 1 in float32, whereas the tree (1e8+1) + (-1e8+1) gives 0
    g = [np.array([x], dtype=F32) for x in (1e8, 1.0, -1e8, 1.0)]
    assert oracles.dense_total(g)[0] == F32(1.0)


# --- 1. dense allreduce ----------------------------------------------------------------------------
@pytest.mark.parametrize("P", P_LIST)
@pytest.mark.parametrize("d", [1, 7, 100, 1000])
@pytest.mark.parametrize("seed", SEEDS)
def test_dense_equals_oracle(P, d, seed):
    gen = torch.Generator().manual_seed(1000 * P + d + seed)
    # mixed magnitudes so that summation order changes the float32 bits
    grads = [torch.randn(d, generator=gen) * 10.0 ** torch.randint(-3, 4, (d,), generator=gen) for _ in range(P)]
    grads = [g.to(torch.float32).contiguous() for g in grads]
    originals = [g.clone() for g in grads]
    results, logs = run_threads(DenseAllreduce(), [Dense(g) for g in grads])
    want_total = oracles.dense_total([g.numpy() for g in originals])
    want_avg = oracles.dense_average([g.numpy() for g in originals])
    for r, res in enumerate(results):
        assert res.P == P and res.support is None
        assert isinstance(res.total, Dense)
        assert res.total.values.dtype == torch.float32 and res.total.values.shape == (d,)
        np.testing.assert_array_equal(bits(res.total.values.numpy()), bits(want_total))
        assert torch.equal(res.total.values, rank_order_sum(originals))
        np.testing.assert_array_equal(bits(res.average().numpy()), bits(want_avg))
    for g, o in zip(grads, originals):
        assert torch.equal(g, o), "payload modified in place"
    assert stats(logs) == [cost.allreduce_sent(r, P, d) for r in range(P)]


def test_dense_sum_is_left_to_right_bitwise():
    g = [Dense(torch.tensor([x], dtype=torch.float32)) for x in (1e8, 1.0, -1e8, 1.0)]
    results, _ = run_threads(DenseAllreduce(), g)
    for res in results:
        assert res.total.values.item() == 1.0          # any other association gives 0.0
        assert res.average().item() == 0.25


def test_dense_counts_by_hand():
    _, logs = run_threads(DenseAllreduce(), [Dense(torch.ones(8)) for _ in range(4)])
    assert stats(logs) == [(6, 48)] * 4                  # 2(P-1) messages, 2(d - d/P) * 4 bytes
    _, logs = run_threads(DenseAllreduce(), [Dense(torch.ones(8))])
    assert stats(logs) == [(0, 0)]


@pytest.mark.parametrize("P,d", [(2, 1), (3, 7), (5, 13), (8, 1000), (17, 100)])
def test_dense_counts_totals(P, d):
    """Ring allreduce moves every element 2(P-1) times in all, whatever the chunking."""
    _, logs = run_threads(DenseAllreduce(), [Dense(torch.ones(d)) for _ in range(P)])
    assert all(log.stats.messages == 2 * (P - 1) for log in logs)
    assert sum(log.stats.bytes for log in logs) == 2 * (P - 1) * d * 4


@pytest.mark.parametrize("P", [1, 2, 3, 5, 8])
def test_dense_clock(P):
    _, logs = run_threads(DenseAllreduce(), [Dense(torch.ones(100)) for _ in range(P)], net=NET)
    assert max(log.clock for log in logs) == pytest.approx(cost.allreduce_seconds(NET, P, 100))
    # by hand: 2(P-1) ring steps, each bounded by the largest chunk, ceil(100 / P) floats
    assert max(log.clock for log in logs) == pytest.approx(
        0.0 if P == 1 else 2 * (P - 1) * (1e-3 + 4 * -(-100 // P) * 1e-8))


# --- 2. sparse allgather ---------------------------------------------------------------------------
@pytest.mark.parametrize("P", P_LIST)
@pytest.mark.parametrize("d", [1, 7, 100, 1000])
@pytest.mark.parametrize("seed", SEEDS)
def test_allgather_equals_oracle(P, d, seed):
    entries = allgather_inputs(P, d, seed=7919 * P + d + seed)
    payloads = [to_sparse(e, d) for e in entries]
    results, logs = run_threads(SparseAllgather(), payloads)
    want_total = oracles.allgather_total(entries, d)
    want_avg = oracles.allgather_average(entries, d)
    for r, res in enumerate(results):
        assert res.P == P and res.support is None
        np.testing.assert_array_equal(bits(dense_of(res.total, d)), bits(want_total))
        np.testing.assert_array_equal(bits(res.average().numpy()), bits(want_avg))
        np.testing.assert_array_equal(res.average().numpy(), results[0].average().numpy())
    counts = [len(e) for e in entries]
    assert stats(logs) == [cost.allgatherv_sent(r, [8 * n for n in counts]) for r in range(P)]
    if P > 1:   # ring allgather: every block travels P-1 hops in all
        assert all(log.stats.messages == P - 1 for log in logs)
        assert sum(log.stats.bytes for log in logs) == (P - 1) * 8 * sum(counts)


def test_allgather_ragged_by_hand():
    d = 10
    entries = [{1: F32(1.0), 4: F32(2.0)}, {}, {4: F32(0.5), 0: F32(-3.0), 9: F32(1.25), 2: F32(4.0), 1: F32(-1.0)}]
    results, logs = run_threads(SparseAllgather(), [to_sparse(e, d) for e in entries])
    want = np.zeros(d, dtype=F32)
    want[[0, 1, 2, 4, 9]] = [-3.0, 0.0, 4.0, 2.5, 1.25]
    for res in results:
        np.testing.assert_array_equal(dense_of(res.total, d), want)
        np.testing.assert_array_equal(res.average().numpy(), want / F32(3))
        assert res.support is None
    # rank r sends every block but that of rank (r+1)%3: sizes (2, 0, 5) entries of 8 bytes
    assert stats(logs) == [(2, 56), (2, 16), (2, 40)]


def test_allgather_all_empty():
    results, logs = run_threads(SparseAllgather(), [to_sparse({}, 5) for _ in range(3)])
    for res in results:
        np.testing.assert_array_equal(res.average().numpy(), np.zeros(5, dtype=F32))
    assert stats(logs) == [(2, 0)] * 3


@pytest.mark.parametrize("counts", [[3], [2, 0, 5], [0, 4, 4, 1], [5, 5, 5, 5, 5, 5, 5, 5]])
def test_allgather_clock(counts):
    d = 20
    rng = np.random.default_rng(len(counts))
    entries = [{int(i): F32(1.0) for i in rng.choice(d, size=n, replace=False)} for n in counts]
    _, logs = run_threads(SparseAllgather(), [to_sparse(e, d) for e in entries], net=NET)
    P = len(counts)
    assert max(log.clock for log in logs) == pytest.approx(cost.sparse_allgather_seconds(NET, counts))
    assert max(log.clock for log in logs) == pytest.approx((P - 1) * (1e-3 + 8 * max(counts) * 1e-8))


# --- 3. gTopKAllReduce -----------------------------------------------------------------------------
@pytest.mark.parametrize("P", P_LIST)
@pytest.mark.parametrize("d,k", DK)
@pytest.mark.parametrize("seed", SEEDS)
def test_gtopk_equals_oracle(P, d, k, seed):
    entries = gtopk_inputs(P, d, k, seed=104729 * P + 31 * d + k + seed)
    want = oracles.gtopk(entries, k)
    results, logs = run_gtopk(entries, d)
    check_gtopk(results, want, P, d)
    assert stats(logs) == [cost.gtopk_sent(r, P, k) for r in range(P)]
    # independent of cost.py: P-1 reduce messages + P-1 broadcast messages of 8k bytes each
    assert sum(log.stats.messages for log in logs) == 2 * (P - 1)
    assert sum(log.stats.bytes for log in logs) == 2 * (P - 1) * 8 * k


@pytest.mark.parametrize("P", [2, 3, 4, 5, 8, 9, 17])
@pytest.mark.parametrize("mode", ["same", "disjoint"])
def test_gtopk_overlap_modes(P, mode):
    d, k = 200, 6
    entries = gtopk_inputs(P, d, k, seed=P, mode=mode)
    results, _ = run_gtopk(entries, d)
    check_gtopk(results, oracles.gtopk(entries, k), P, d)


def test_gtopk_p1_returns_own_vector():
    e = {3: F32(-1.5), 0: F32(2.0), 7: F32(0.25)}
    results, logs = run_gtopk([e], 8)
    check_gtopk(results, e, 1, 8)
    assert stats(logs) == [(0, 0)]


def test_gtopk_tree_differs_from_exact_topk_by_hand():
    entries = tree_beats_exact_example()
    results, _ = run_gtopk(entries, 3)
    check_gtopk(results, {0: F32(3.0)}, 4, 3)


def test_gtopk_tree_differs_from_exact_topk_random():
    """The oracle (and the package) keep intermediate truncation: on random inputs the result is
    often not the exact top-k of the sum, yet always the tree's."""
    differs = 0
    for seed in range(10):
        P, d, k = 8, 30, 4
        entries = gtopk_inputs(P, d, k, seed=seed)
        want = oracles.gtopk(entries, k)
        differs += want != oracles.exact_topk_of_sum(entries, k)
        results, _ = run_gtopk(entries, d)
        check_gtopk(results, want, P, d)
    assert differs >= 1


def test_gtopk_cancellation_to_zero_is_kept_when_within_k():
    d = 5
    entries = [{0: F32(1.5), 1: F32(-2.25), 2: F32(0.75)}, {0: F32(-1.5), 1: F32(3.0), 2: F32(0.5)}]
    want = {0: F32(0.0), 1: F32(0.75), 2: F32(1.25)}
    assert oracles.gtopk(entries, 3) == want
    results, _ = run_gtopk(entries, d)
    check_gtopk(results, want, 2, d)


def test_gtopk_cancellation_to_zero_loses_to_nonzero():
    d = 5
    entries = [{0: F32(1.5), 1: F32(2.5)}, {0: F32(-1.5), 2: F32(0.5)}]
    want = {1: F32(2.5), 2: F32(0.5)}             # |0.0| is the smallest: index 0 is dropped
    assert oracles.gtopk(entries, 2) == want
    results, _ = run_gtopk(entries, d)
    check_gtopk(results, want, 2, d)


@pytest.mark.parametrize("P", [3, 5, 6, 7, 12, 17])
def test_gtopk_no_rank_is_dropped(P):
    """Each rank holds one huge value at its own index; all P must reach the global set (k = P)."""
    d, k = 100, P
    rng = np.random.default_rng(P)
    entries = []
    for r in range(P):
        small = rng.choice(50, size=k - 1, replace=False)
        e = {int(i): F32(rng.uniform(-1, 1)) for i in small}
        e[50 + r] = F32(1e6 * (r + 1))
        entries.append(e)
    want = oracles.gtopk(entries, k)
    assert want == {50 + r: F32(1e6 * (r + 1)) for r in range(P)}
    results, _ = run_gtopk(entries, d)
    check_gtopk(results, want, P, d)


class Recording(Collective):
    """Wraps a collective and records the ops each rank's program yields."""

    name = "recording"

    def __init__(self, inner: Collective):
        self.inner = inner
        self.ops: dict[int, list] = {}

    def program(self, rank, P, payload):
        self.ops[rank] = []
        gen = self.inner.program(rank, P, payload)
        value = None
        while True:
            try:
                op = gen.send(value)
            except StopIteration as stop:
                return stop.value
            self.record(rank, op)
            value = yield op

    def record(self, rank: int, op) -> None:
        """Called with each op as it is yielded (send buffers may be reused afterwards)."""
        self.ops[rank].append(op)

    def model_seconds(self, net, P, d, counts):
        return self.inner.model_seconds(net, P, d, counts)


def reduce_schedule(rec: Recording, P: int) -> tuple[dict[int, list[int]], dict[int, int]]:
    """Per rank: sources received from higher ranks (the reduce), and the first send downwards."""
    children = {r: [op.source for op in rec.ops[r] if isinstance(op, Recv) and op.source > r] for r in range(P)}
    parent = {}
    for r in range(1, P):
        sends = [op.dest for op in rec.ops[r] if isinstance(op, Send) and op.dest < r]
        assert len(sends) == 1, f"rank {r} sends down the tree {sends}"
        parent[r] = sends[0]
    return children, parent


def test_gtopk_pairing_p8_is_the_authors():
    entries = gtopk_inputs(8, 100, 5, seed=3)
    rec = Recording(GTopKAllreduce())
    results, _ = run_threads(rec, [to_sparse(e, 100) for e in entries])
    check_gtopk(results, oracles.gtopk(entries, 5), 8, 100)
    children, parent = reduce_schedule(rec, 8)
    assert children == {0: [1, 2, 4], 1: [], 2: [3], 3: [], 4: [5, 6], 5: [], 6: [7], 7: []}
    assert parent == {1: 0, 2: 0, 3: 2, 4: 0, 5: 4, 6: 4, 7: 6}


@pytest.mark.parametrize("P", [2, 3, 5, 6, 9, 12, 17])
def test_gtopk_pairing_matches_oracle_schedule(P):
    entries = gtopk_inputs(P, 100, 3, seed=P)
    rec = Recording(GTopKAllreduce())
    run_threads(rec, [to_sparse(e, 100) for e in entries])
    children, parent = reduce_schedule(rec, P)
    want_children = {r: [] for r in range(P)}
    want_parent = {}
    for pairs in oracles.gtopk_pairs(P):
        for receiver, sender in pairs:
            want_children[receiver].append(sender)
            want_parent[sender] = receiver
    assert children == want_children
    assert parent == want_parent


def test_gtopk_counts_by_hand_p8():
    k = 10
    entries = gtopk_inputs(8, 100, k, seed=0)
    _, logs = run_gtopk(entries, 100)
    # broadcast children: 0 -> 1, 2, 4; 1 -> 3, 5; 2 -> 6; 3 -> 7; plus one reduce send per rank > 0
    msgs = [3, 1 + 2, 1 + 1, 1 + 1, 1, 1, 1, 1]
    assert stats(logs) == [(m, 80 * m) for m in msgs]


def test_gtopk_counts_by_hand_p5():
    k = 10
    entries = gtopk_inputs(5, 100, k, seed=0)
    _, logs = run_gtopk(entries, 100)
    # broadcast children: 0 -> 1, 2, 4; 1 -> 3; plus one reduce send per rank > 0
    msgs = [3, 2, 1, 1, 1]
    assert stats(logs) == [(m, 80 * m) for m in msgs]


@pytest.mark.parametrize("P", [1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17])
@pytest.mark.parametrize("k", [1, 10])
def test_gtopk_clock(P, k):
    entries = gtopk_inputs(P, 100, k, seed=P)
    _, logs = run_gtopk(entries, 100, net=NET)
    got = max(log.clock for log in logs)
    assert got == pytest.approx(cost.gtopk_seconds(NET, P, k))
    # by hand: ceil(log2 P) reduce rounds + as many broadcast rounds, each one 8k-byte message
    rounds = int(np.ceil(np.log2(P))) if P > 1 else 0
    assert got == pytest.approx(2 * rounds * (1e-3 + 8 * k * 1e-8))


def test_gtopk_clock_by_hand_p4_k100():
    entries = gtopk_inputs(4, 1000, 100, seed=0)
    _, logs = run_gtopk(entries, 1000, net=NET)
    assert max(log.clock for log in logs) == pytest.approx(2 * 2 * (1e-3 + 800 * 1e-8))


# --- 4. residual rule ------------------------------------------------------------------------------
def test_accounted_by_hand():
    payload = Sparse(torch.tensor([5, 2, 9, 0]), torch.tensor([1.0, 2.0, 3.0, 4.0]), 10)
    kept = Reduced(payload, 1, support=torch.tensor([9, 5, 7])).sent(payload)
    assert to_dict(kept) == {5: F32(1.0), 9: F32(3.0)}
    assert to_dict(kept) == oracles.accounted(to_dict(payload), {9, 5, 7})
    assert kept.numel == 10
    assert to_dict(payload.restrict(None)) == to_dict(payload)
    assert len(payload.restrict(torch.tensor([], dtype=torch.int64))) == 0
    dense = Dense(torch.arange(4.0))
    assert torch.equal(Reduced(dense, 1).sent(dense).to_dense(), dense.values)


def test_accounted_with_gtopk_support():
    """After gTop-k, each rank's sent part is exactly its entries in the global set I_g."""
    d, k, P = 50, 4, 4
    entries = gtopk_inputs(P, d, k, seed=11)
    results, _ = run_gtopk(entries, d)
    I_g = set(oracles.gtopk(entries, k))
    for r in range(P):
        sent = results[r].sent(to_sparse(entries[r], d))
        assert to_dict(sent) == oracles.accounted(entries[r], I_g)


# --- deadlock --------------------------------------------------------------------------------------
class BothReceive(Collective):
    """Rank 0 and rank 1 both wait to receive from each other: an MPI deadlock."""

    name = "both_receive"

    def program(self, rank, P, payload):
        buf = torch.zeros(1)
        yield Recv(1 - rank, buf)
        return Reduced(buf, P)

    def model_seconds(self, net, P, d, counts):
        return 0.0


class SendWrongTag(Collective):
    """Rank 0 sends with tag 1, rank 1 receives with tag 0."""

    name = "wrong_tag"

    def program(self, rank, P, payload):
        buf = torch.zeros(1)
        yield (Send(1, payload, tag=1) if rank == 0 else Recv(0, buf))
        return Reduced(buf, P)

    def model_seconds(self, net, P, d, counts):
        return 0.0


@pytest.mark.timeout(20)
@pytest.mark.parametrize("collective", [BothReceive(), SendWrongTag()])
def test_deadlock_is_reported(collective):
    with pytest.raises(CollectiveDeadlock):
        run_threads(collective, [torch.ones(1), torch.ones(1)])


# --- model size limit of the int32 wire format ------------------------------------------------------
@pytest.mark.parametrize("collective", [SparseAllgather(), GTopKAllreduce()])
def test_sparse_collectives_refuse_models_their_wire_cannot_index(collective):
    collective.check_numel(2**31 - 1)
    with pytest.raises(ValueError, match=collective.name) as err:
        collective.check_numel(2**31)
    assert "\n" not in str(err.value)
    too_long = [to_sparse({0: 1.0}, 2**31), to_sparse({1: 1.0}, 2**31)]
    with pytest.raises(ValueError, match="int32 wire format"):      # and the executor never sends it
        run_threads(collective, too_long)


def test_dense_allreduce_has_no_size_limit():
    DenseAllreduce().check_numel(2**40)


def test_every_op_kind_states_its_cost_and_the_thread_executor_knows_every_collective():
    """Adding an op kind touches ops.py (with `sent` and `simulate`) and each executor's table."""
    from typing import get_args

    from ssgd.comm import ops
    from ssgd.comm.executors.thread import RESULTS

    kinds = set(get_args(ops.Op))
    assert kinds == {ops.Send, ops.Recv, ops.Allreduce, ops.Allgatherv, ops.Bcast}
    assert all(hasattr(kind, "sent") or kind is ops.Recv for kind in kinds)
    assert all(hasattr(kind, "simulate") or kind is ops.Recv for kind in kinds)
    assert set(RESULTS) == kinds - {ops.Send, ops.Recv}
