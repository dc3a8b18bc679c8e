"""gTop-k's residual rules: which local entries count as sent.

`released` (default, hclhkbu/gtopkssgd `add_residuals`): a local entry whose index is in the global set
I_g, even if this rank's value was dropped in an intermediate merge. `strict`: only local entries whose
value reached rank 0's final sum; found by a top-down pass of k-byte survival masks along the reduce
tree, whose bytes, messages and time the cost model counts exactly.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/, for `oracles`
import oracles  # noqa: E402
from conftest import make_cfg  # noqa: E402
from test_collectives import P_LIST, check_gtopk, gtopk_inputs, stats, to_dict, to_sparse  # noqa: E402

from ssgd.run import build  # noqa: E402
from ssgd.comm.collectives.gtopk import GTopKAllreduce, merge_entries  # noqa: E402
from ssgd.comm.ops import Recv, Send  # noqa: E402
from ssgd.comm.executors.thread import run_threads  # noqa: E402
from ssgd.payload import Sparse  # noqa: E402
from ssgd.perf import cost  # noqa: E402
from ssgd.perf.alphabeta import AlphaBeta  # noqa: E402
from ssgd.loop.sync import RankCompression  # noqa: E402

F32 = np.float32
NET = AlphaBeta(1e-3, 1e-8)


def quirk_example():
    """P = 4, k = 1. Round 0: 0<-1 {5: 1, 3: 4} keeps {3: 4}: rank 0's value at index 5 is dropped;
    2<-3 {5: 10, 7: 0.5} keeps {5: 10}. Round 1: 0<-2 {3: 4, 5: 10} keeps {5: 10}. I_g = {5}, V_g = 10:
    rank 0's 1.0 at index 5 was never added, yet index 5 is in I_g."""
    return [{5: F32(1.0)}, {3: F32(4.0)}, {5: F32(10.0)}, {7: F32(0.5)}]


def sent_sets(results, entries, d):
    return [set(to_dict(res.sent(to_sparse(e, d)))) for res, e in zip(results, entries)]


# --- by hand --------------------------------------------------------------------------------------
def test_the_quirk_by_hand():
    entries, d = quirk_example(), 8
    released, _ = run_threads(GTopKAllreduce(), [to_sparse(e, d) for e in entries])
    strict, _ = run_threads(GTopKAllreduce("strict"), [to_sparse(e, d) for e in entries])
    check_gtopk(released, {5: F32(10.0)}, 4, d)
    for res in strict:                          # the same global vector on every rank under either rule
        assert to_dict(res.total) == {5: F32(10.0)}
    assert sent_sets(released, entries, d) == [{5}, set(), {5}, set()]    # rank 0's 1.0 counts as sent
    assert sent_sets(strict, entries, d) == [set(), set(), {5}, set()]     # ... and stays in its residual
    assert [s.tolist() for s in (r.support for r in strict)] == [[], [], [5], []]
    assert oracles.gtopk_sent_strict(entries, 1) == [set(), set(), {5}, set()]


def test_a_common_index_that_survives_counts_for_both_ranks():
    """P = 2, k = 2. Index 4 is common: 1.0 + (-0.5) = 0.5. With rank 0's 2.0 at index 1 the top-2 of
    {1: 2, 4: 0.5, 6: 3} is {1, 6}: the sum at 4 is dropped for both ranks. With 0.25 at index 1 the
    sum 0.5 survives, and then it counts as sent for BOTH ranks whose values it adds."""
    d = 8
    entries = [{1: F32(2.0), 4: F32(1.0)}, {4: F32(-0.5), 6: F32(3.0)}]
    strict, _ = run_threads(GTopKAllreduce("strict"), [to_sparse(e, d) for e in entries])
    assert to_dict(strict[0].total) == {1: F32(2.0), 6: F32(3.0)}
    assert sent_sets(strict, entries, d) == [{1}, {6}]
    entries = [{1: F32(0.25), 4: F32(1.0)}, {4: F32(-0.5), 6: F32(3.0)}]       # now the sum 0.5 beats 0.25
    strict, _ = run_threads(GTopKAllreduce("strict"), [to_sparse(e, d) for e in entries])
    assert to_dict(strict[0].total) == {4: F32(0.5), 6: F32(3.0)}
    assert sent_sets(strict, entries, d) == [{4}, {4, 6}]


def test_strict_equals_released_when_nothing_is_dropped():
    """k = d: every merge keeps everything, so every local entry reaches the root under both rules."""
    d, P = 6, 5
    entries = gtopk_inputs(P, d, d, seed=1)
    released, _ = run_threads(GTopKAllreduce(), [to_sparse(e, d) for e in entries])
    strict, _ = run_threads(GTopKAllreduce("strict"), [to_sparse(e, d) for e in entries])
    assert sent_sets(strict, entries, d) == sent_sets(released, entries, d) == [set(range(d))] * P


def test_masks_down_the_tree_by_hand():
    """The quirk example's extra messages: 0 -> 2 then 0 -> 1 (latest merge first), 2 -> 3; 1 byte each."""
    from test_collectives import Recording

    class Snapshots(Recording):         # send buffers are reused: keep their content when yielded
        def record(self, rank, op):
            super().record(rank, op)
            if isinstance(op, Send) and op.buf.dtype == torch.uint8:
                self.masks.setdefault(rank, []).append((op.dest, op.buf.tolist()))

    rec = Snapshots(GTopKAllreduce("strict"))
    rec.masks = {}
    run_threads(rec, [to_sparse(e, 8) for e in quirk_example()])
    assert rec.masks == {0: [(2, [1]), (1, [0])], 2: [(3, [0])]}
    received = {r: [op.source for op in rec.ops[r] if isinstance(op, Recv) and op.buf.dtype == torch.uint8]
                for r in range(4)}
    assert received == {0: [], 1: [0], 2: [0], 3: [2]}


# --- against the oracle ---------------------------------------------------------------------------
@pytest.mark.parametrize("P", P_LIST)
@pytest.mark.parametrize("d,k", [(7, 1), (7, 3), (100, 10), (1000, 50), (1000, 1000)])
@pytest.mark.parametrize("seed", [0, 1])
def test_strict_equals_oracle(P, d, k, seed):
    entries = gtopk_inputs(P, d, k, seed=7 * P + d + k + seed)
    results, logs = run_threads(GTopKAllreduce("strict"), [to_sparse(e, d) for e in entries])
    want = oracles.gtopk(entries, k)
    for res in results:                                          # the global vector is the released one
        assert to_dict(res.total) == want
    want_sent = oracles.gtopk_sent_strict(entries, k)
    assert sent_sets(results, entries, d) == want_sent
    for r, res in enumerate(results):                           # support: exactly the strict entries
        assert res.support.tolist() == sorted(want_sent[r])     # in increasing order
        assert want_sent[r] <= set(want) & set(entries[r])      # never more than the released rule sends
    assert stats(logs) == [cost.gtopk_strict_sent(r, P, k) for r in range(P)]
    # independent of cost.py: the released counts plus P - 1 masks of k bytes
    assert sum(m for m, _ in stats(logs)) == 3 * (P - 1)
    assert sum(b for _, b in stats(logs)) == 2 * (P - 1) * 8 * k + (P - 1) * k


@pytest.mark.parametrize("P", [3, 4, 5, 8, 9])
def test_random_inputs_do_hit_the_quirk(P):
    """The rules differ on ordinary inputs (so the strict tests above can fail)."""
    differs = 0
    for seed in range(10):
        entries = gtopk_inputs(P, 30, 4, seed=seed)
        want = set(oracles.gtopk(entries, 4))
        strict = oracles.gtopk_sent_strict(entries, 4)
        differs += sum(strict[r] != want & set(entries[r]) for r in range(P))
    assert differs >= 1


@pytest.mark.parametrize("P", [1, 2, 3, 4, 5, 8, 9, 17])
@pytest.mark.parametrize("k", [1, 10])
def test_strict_clock_equals_the_cost_model(P, k):
    entries = gtopk_inputs(P, 100, k, seed=P)
    _, logs = run_threads(GTopKAllreduce("strict"), [to_sparse(e, 100) for e in entries], net=NET)
    got = max(log.clock for log in logs)
    assert got == pytest.approx(cost.gtopk_strict_seconds(NET, P, k))
    assert got == pytest.approx(GTopKAllreduce("strict").model_seconds(NET, P, 100, [k] * P))
    rounds = int(np.ceil(np.log2(P))) if P > 1 else 0            # by hand: + one k-byte message per round
    assert got == pytest.approx(2 * rounds * (1e-3 + 8 * k * 1e-8) + rounds * (1e-3 + k * 1e-8))


def test_reduce_children_by_hand():
    assert [cost.reduce_children(r, 8) for r in range(8)] == [[1, 2, 4], [], [3], [], [5, 6], [], [7], []]
    assert [cost.reduce_children(r, 5) for r in range(5)] == [[1, 2, 4], [], [3], [], []]
    assert cost.reduce_children(0, 1) == []


def test_merge_trace_maps_survival_back_to_the_operands():
    a = Sparse(torch.tensor([9, 1, 4]), torch.tensor([-0.5, 1.0, 5.0]), 12)
    b = Sparse(torch.tensor([0, 11, 4]), torch.tensor([-3.0, 0.25, 0.5]), 12)
    idx, val, trace = merge_entries(a.idx, a.val, b.idx, b.val, 3)
    assert idx.tolist() == [0, 1, 4] and val.tolist() == [-3.0, 1.0, 5.5]
    survived_a, survived_b = trace.survivors(torch.tensor([True, False, True]))   # 1 dropped higher up
    assert survived_a.tolist() == [False, False, True] and survived_b.tolist() == [True, False, True]


# --- error feedback conserves the gradient under both rules ---------------------------------------
@pytest.mark.parametrize("rule", ["released", "strict"])
@pytest.mark.parametrize("P", [1, 3, 4, 8])
def test_conservation_under_both_rules(rule, P):
    scheme = build.scheme(make_cfg("compressor=gtopk", f"compressor.collective.residual={rule}"), seed=0)
    assert scheme.collective.residual == rule
    d = 300
    syncs = [RankCompression(scheme, r, d) for r in range(P)]
    gen = torch.Generator().manual_seed(P)
    lost = 0.0
    for step in range(8):
        grads = [torch.randn(d, generator=gen) for r in range(P)]
        us, payloads = [], []
        for sync, g in zip(syncs, grads):
            us.append((sync.memory.e.clone() + g).double())
            payloads.append(sync.compress(g.clone(), 0.05)[1])
        results, _ = run_threads(scheme.collective, payloads)
        applied = results[0].total.to_dense().double()
        sent_total = torch.zeros(d, dtype=torch.float64)
        for sync, u, payload, res in zip(syncs, us, payloads, results):
            sent = res.sent(payload).to_dense().double()
            sync.settle(payload, res)
            assert torch.equal(sent + sync.memory.e.double(), u), "error feedback lost or invented gradient"
            sent_total += sent
        lost += float((sent_total - applied).abs().sum())
        if rule == "strict":    # what counts as sent is exactly what the global sum contains
            assert torch.allclose(sent_total, applied, rtol=1e-6, atol=1e-6)
    if rule == "released" and P > 1:
        assert lost > 0         # the released rule drops values that were never applied


def test_a_bad_rule_is_refused():
    with pytest.raises(ValueError, match="residual='loose': must be one of released, strict"):
        GTopKAllreduce("loose")
