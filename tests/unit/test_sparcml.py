"""TopkDSA, SparCML's sparse recursive doubling (ssgd.comm.collectives.sparcml), against tests/oracles.py `topkdsa`.

Pinned: every rank's total equals the oracle's bit for bit (sparse or dense, the same on every rank) at
P = 1..12 on three index distributions; the dense switch happens exactly when a partial sum's support exceeds
d / 2; each rank's counted messages and bytes equal the oracle's (a count, then the vector, per transfer), and,
with disjoint supports, the worst-case cost functions; modelled clocks stay within `model_seconds`; the SimGrid
executor gives the thread executor's bits and counts. With 16-bit values every partial sum is rounded (the
oracle rounds each addition with tests/unit/test_wire.py's numpy rounding) and the switch comes at 6 n > 2 d.
Real torch.distributed and MPI ranks: tests/integration/test_sparcml_ranks.py.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import oracles
from sparcml_inputs import DISTRIBUTIONS, assert_equals_oracle, inputs, to_sparse
from test_wire import round16
from ssgd.comm.collectives.sparcml import SparseRecursiveDoubling
from ssgd.comm.wire import WireFormat
from ssgd.comm.executors.thread import run_threads
from ssgd.payload import Dense, Sparse
from ssgd.perf import cost
from ssgd.perf.alphabeta import AlphaBeta

F32 = np.float32
NET = AlphaBeta(1e-3, 1e-8)


def run(entries, d, net=None):
    return run_threads(SparseRecursiveDoubling(), [to_sparse(e, d) for e in entries], net=net)


def counts(logs) -> list[tuple[int, int]]:
    return [(log.stats.messages, log.stats.bytes) for log in logs]


# --- the oracle by hand -------------------------------------------------------------------------------------
def test_oracle_by_hand_p3_fold_then_doubling_then_unfold():
    """P = 3, d = 8: rank 2 folds into rank 0 ({0: 1, 1: 2} + {1: 3}), then 0 and 1 swap; rank 2 gets it back."""
    e = [{0: F32(1.0), 1: F32(2.0)}, {7: F32(0.5)}, {1: F32(3.0)}]
    totals, sent = oracles.topkdsa(e, 8)
    assert all(t == {0: F32(1.0), 1: F32(5.0), 7: F32(0.5)} for t in totals)
    assert sent == [[4, 16, 4, 24], [4, 8], [4, 8]]


def test_oracle_grouping_is_the_schedules_not_rank_order():
    """P = 4 on one index: (a0 + a1) + (a2 + a3) = 1 + 2^-23, where the rank-order sum rounds to 1 twice."""
    a = [F32(1.0), F32(0.0), F32(2.0**-24), F32(2.0**-24)]
    totals, _ = oracles.topkdsa([{0: x} for x in a], 4)
    assert all(t == {0: F32(1.0) + F32(2.0**-23)} for t in totals)
    assert oracles.dense_total([np.array([x]) for x in a])[0] == F32(1.0)
    results, _ = run([{0: x} for x in a], 4)
    assert all(res.total.val.item() == 1.0 + 2.0**-23 for res in results)


# --- the program against the oracle ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", DISTRIBUTIONS)
@pytest.mark.parametrize("P", range(1, 13))
@pytest.mark.parametrize("d,k", [(2000, 20), (300, 40)])
def test_every_rank_gets_the_oracles_bits_and_sends_its_messages(kind, P, d, k):
    entries = inputs(kind, P, d, k, seed=P + 100 * k)
    results, logs = run(entries, d)
    want, sent = oracles.topkdsa(entries, d)
    for r, res in enumerate(results):
        assert res.P == P and res.support is None
        assert_equals_oracle(res.total, want[r], d)
    assert counts(logs) == [(len(s), sum(s)) for s in sent]


def test_dense_switch_happens_when_a_partial_sum_passes_half_of_d():
    """P = 8, d = 400, 30 disjoint entries per rank: 30, 60, 120 entries in sparse form (8 n <= 4 d), then the
    last round's 240 > 200 makes the total dense; the messages say so."""
    d, k, P = 400, 30, 8
    perm = np.random.default_rng(1).permutation(d)
    entries = [{int(i): F32(r + 1.5) for i in perm[r * k:(r + 1) * k]} for r in range(P)]
    results, logs = run(entries, d)
    assert all(isinstance(res.total, Dense) for res in results)
    want, sent = oracles.topkdsa(entries, d)
    assert_equals_oracle(results[0].total, want[0], d)
    assert sent[0] == [4, 8 * 30, 4, 8 * 60, 4, 8 * 120]       # every message was still sparse ...
    assert counts(logs) == [(6, 12 + 8 * 210)] * P                  # ... and the switch made no message dense


def test_a_dense_partial_sum_travels_dense():
    """P = 16, d = 400, ranks 8..15 repeat the disjoint entries of ranks 0..7 (30 each): 30, 60, 120 entries go
    sparse, the third round's 240 entries are dense, so the fourth round sends 4 d bytes."""
    d, k, P = 400, 30, 16
    perm = np.random.default_rng(2).permutation(d)
    entries = [{int(i): F32(r + 0.25) for i in perm[(r % 8) * k:(r % 8 + 1) * k]} for r in range(P)]
    results, logs = run(entries, d)
    assert all(isinstance(res.total, Dense) for res in results)
    assert counts(logs) == [(8, 16 + 8 * (30 + 60 + 120) + 4 * d)] * P
    assert_equals_oracle(results[5].total, oracles.topkdsa(entries, d)[0][5], d)


def test_low_density_never_switches():
    """Heavy overlap at a low density: the total stays sparse and no message is dense."""
    d, P = 5000, 12
    entries = inputs("clustered", P, d, 25, seed=3)
    results, logs = run(entries, d)
    assert all(isinstance(res.total, Sparse) for res in results)
    _, sent = oracles.topkdsa(entries, d)
    assert all(b < 4 * d for s in sent for b in s) and counts(logs) == [(len(s), sum(s)) for s in sent]


def test_a_payload_denser_than_half_of_d_is_dense_from_the_start():
    d = 10
    entries = [{i: F32(i + 1) for i in range(6)}, {9: F32(2.0)}]
    results, logs = run(entries, d)
    assert counts(logs) == [(2, 4 + 4 * d), (2, 4 + 8)]
    assert_equals_oracle(results[1].total, oracles.topkdsa(entries, d)[0][1], d)


def test_rank_with_no_entries():
    d = 50
    entries = [{}, {3: F32(1.0)}, {}, {3: F32(2.0), 4: F32(-1.0)}, {}]
    results, _ = run(entries, d)
    want, _ = oracles.topkdsa(entries, d)
    for r in range(5):
        assert_equals_oracle(results[r].total, want[r], d)


def test_a_dense_payload_is_refused():
    with pytest.raises(TypeError, match="Sparse payload"):
        run_threads(SparseRecursiveDoubling(), [Dense(torch.zeros(4))] * 2)


def test_the_result_owns_its_tensors():
    """P = 1: the total is a copy, not the payload's own tensors (error feedback may zero them)."""
    p = Sparse(torch.tensor([3, 1]), torch.tensor([1.0, 2.0]), 10)
    (res,), _ = run_threads(SparseRecursiveDoubling(), [p])
    p.val.zero_()
    assert res.total.idx.tolist() == [1, 3] and res.total.val.tolist() == [2.0, 1.0]


# --- 16-bit values: 6 bytes an entry, 2 an element, every partial sum rounded ---------------------------------
@pytest.mark.parametrize("values", ["fp16", "bf16"])
@pytest.mark.parametrize("P", range(1, 13))
def test_16_bit_values_round_every_partial_sum_and_switch_at_6n_over_2d(values, P):
    d, k = 300, 40                                   # dense once a sum has more than 100 entries
    entries = [{i: F32(round16(values, [v])[0]) for i, v in e.items()} for e in inputs("heavy", P, d, k, seed=P)]
    wire = WireFormat(values)
    results, logs = run_threads(SparseRecursiveDoubling(values), [wire.encode(to_sparse(e, d)) for e in entries])
    want, sent = oracles.topkdsa(entries, d, lambda x: F32(round16(values, [x])[0]), entry_bytes=6, value_bytes=2)
    for r, res in enumerate(results):
        assert_equals_oracle(res.total, want[r], d)
    assert counts(logs) == [(len(s), sum(s)) for s in sent]
    assert P < 4 or isinstance(results[0].total, Dense)


def test_16_bit_values_refuse_an_unencoded_payload():
    with pytest.raises(TypeError, match="needs payload values of dtype torch.float16"):
        run_threads(SparseRecursiveDoubling("fp16"), [to_sparse({1: F32(1.0)}, 4)])


# --- the cost model: disjoint supports are the worst case ----------------------------------------------------
def disjoint(P: int, d: int, ks: list[int], seed: int) -> list[dict[int, np.float32]]:
    perm, at = np.random.default_rng(seed).permutation(d), 0
    out = []
    for k in ks:
        out.append({int(i): F32(0.5 + j) for j, i in enumerate(perm[at:at + k])})
        at += k
    return out


@pytest.mark.parametrize("values", ["fp32", "fp16"])
@pytest.mark.parametrize("P", range(1, 13))
@pytest.mark.parametrize("d", [3000, 400])
def test_counts_with_disjoint_supports_equal_the_worst_case_cost(P, d, values):
    ks, wire = [5 + 3 * r for r in range(P)], WireFormat(values)
    payloads = [wire.encode(to_sparse(e, d)) for e in disjoint(P, d, ks, seed=P)]
    _, logs = run_threads(SparseRecursiveDoubling(values), payloads)
    assert counts(logs) == [cost.topkdsa_worst_sent(r, P, d, ks, wire.entry_bytes, wire.value_bytes)
                            for r in range(P)]


@pytest.mark.parametrize("P", range(1, 13))
def test_overlap_sends_at_most_the_worst_case(P):
    d, ks = 1000, [30] * P
    _, logs = run(inputs("clustered", P, d, 30, seed=P), d)
    for r, (m, b) in enumerate(counts(logs)):
        wm, wb = cost.topkdsa_worst_sent(r, P, d, ks)
        assert m == wm and b <= wb


@pytest.mark.parametrize("P", range(1, 13))
def test_modelled_clocks_stay_within_model_seconds(P):
    d, ks = 3000, [40] * P
    _, logs = run(disjoint(P, d, ks, seed=P), d, net=NET)
    bound = SparseRecursiveDoubling().model_seconds(NET, P, d, ks)
    assert max(log.clock for log in logs) <= bound * (1 + 1e-12)
    if P & (P - 1) == 0:                          # every pair alike: the bound is the critical path
        assert max(log.clock for log in logs) == pytest.approx(bound, rel=1e-12)


def test_model_seconds_by_hand_p4():
    """P = 4, k = 10 each, d = 1000: two rounds, each 2 x (count + vector) one after another."""
    r0 = 2 * (NET.message(4) + NET.message(80))
    r1 = 2 * (NET.message(4) + NET.message(160))
    assert SparseRecursiveDoubling().model_seconds(NET, 4, 1000, [10] * 4) == pytest.approx(r0 + r1, rel=1e-15)


# --- SimGrid: the same program, the same bits ---------------------------------------------------------------
@pytest.mark.parametrize("values", ["fp32", "bf16"])
@pytest.mark.parametrize("P", range(1, 13))
def test_simgrid_gives_the_thread_executors_bits_and_counts(P, values):
    pytest.importorskip("simgrid", reason="SimGrid's Python bindings are not installed (make simgrid)")
    from conftest import SIMGRID_TEST_PLATFORM
    from ssgd.comm.executors.simgrid import run_simgrid
    from ssgd.perf.platform import Platform, TcpModel

    platform = Platform(hosts=SIMGRID_TEST_PLATFORM["hosts"], bandwidth=SIMGRID_TEST_PLATFORM["bandwidth"],
                        latency=SIMGRID_TEST_PLATFORM["latency"], tcp=TcpModel(*SIMGRID_TEST_PLATFORM["tcp"]))
    d = 600
    entries = inputs("normal", P, d, 100, seed=P)         # P >= 4 fill in past d / 2: dense messages too
    payloads = lambda: [WireFormat(values).encode(to_sparse(e, d)) for e in entries]     # noqa: E731
    want, want_logs = run_threads(SparseRecursiveDoubling(values), payloads())
    got, got_logs = run_simgrid(SparseRecursiveDoubling(values), payloads(), platform, cpu="none")
    for a, b in zip(want, got):
        assert type(a.total) is type(b.total) and a.support is None and b.support is None
        if isinstance(a.total, Dense):
            assert torch.equal(a.total.values, b.total.values)
        else:
            assert torch.equal(a.total.idx, b.total.idx) and torch.equal(a.total.val, b.total.val)
    assert counts(got_logs) == counts(want_logs)
