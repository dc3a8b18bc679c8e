"""Ok-Topk (ssgd.comm.collectives.oktopk, ssgd.compress.oktopk) against the paper's statement
(tests/oracles.py `oktopk_calls`), at P = 1..12, on normal, heavy-tailed and clustered indices; the error-feedback
invariant; threads == SimGrid bitwise; the counted bytes against `ssgd.perf.cost.oktopk_sent`; threshold reuse."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import oracles
from collective_checks import as_dict, to_sparse
from conftest import simgrid_test_platform
from ssgd.comm.collectives.oktopk import OkTopkAllreduce, _regions
from ssgd.comm.executors.thread import run_threads
from ssgd.compress.oktopk import OkTopkSelect
from ssgd.errors import BadArgument
from ssgd.perf import cost


def selections(P: int, d: int, k: int, seed: int, where: str) -> list[dict]:
    """Each rank's k entries at distinct indices, values of continuous random magnitudes; `where` the
    indices fall: uniform, heavy-tailed (a Zipf-like concentration on low indices) or in a few clusters."""
    rng = np.random.default_rng(seed)
    mags = (np.abs(rng.standard_normal(P * k)) + 0.01).astype(np.float32)   # continuous: sums almost never tie
    out = []
    for r in range(P):
        if where == "uniform":
            idx = rng.choice(d, size=k, replace=False)
        elif where == "heavy":
            idx = np.unique(np.minimum((rng.pareto(1.2, size=8 * k) * d / 50).astype(int), d - 1))[:k]
            idx = idx if len(idx) == k else np.union1d(idx, rng.choice(d, size=2 * k, replace=False))[:k]
        else:
            centres = rng.choice(d - 40, size=4, replace=False)
            pool = np.unique((centres[:, None] + np.arange(40)[None, :]).ravel())
            idx = rng.choice(pool, size=k, replace=False)
        signs = rng.choice(np.array([-1, 1], dtype=np.float32), size=k)
        out.append({int(i): np.float32(signs[j] * mags[r * k + j]) for j, i in enumerate(idx)})
    return out


def run(coll: OkTopkAllreduce, entries: list[dict], d: int, executor=run_threads):
    payloads = [to_sparse(e, d) for e in entries]
    return executor(coll, payloads)


@pytest.mark.parametrize("where", ["uniform", "heavy", "clustered"])
@pytest.mark.parametrize("P", range(1, 13))
def test_exact_calls_give_the_top_k_of_the_sum_of_the_selections(P, where):
    d, k = 400, 12
    entries = selections(P, d, k, seed=P, where=where)
    results, logs = run(OkTopkAllreduce(tau=1, tau_prime=1), entries, d)
    want = oracles.oktopk_calls([entries], tau=1)[0]
    for res in results:
        assert as_dict(res.total) == want
        assert res.support.tolist() == sorted(want)
    assert P == 1 or all(log.stats.messages > 0 for log in logs)


@pytest.mark.parametrize("P", [1, 2, 3, 5, 8, 12])
def test_reused_thresholds_and_regions_follow_the_paper_over_calls(P):
    d, k, tau, calls = 500, 10, 3, 7
    coll = OkTopkAllreduce(tau=tau, tau_prime=2)
    sequence = [selections(P, d, k + (c % tau) * 3, seed=100 * P + c, where="heavy") for c in range(calls)]
    want = oracles.oktopk_calls(sequence, tau=tau)
    for c, entries in enumerate(sequence):
        results, _ = run(coll, entries, d)
        assert all(as_dict(res.total) == want[c] for res in results), c


def test_the_error_feedback_invariant_holds_per_rank():
    P, d, k = 5, 300, 9
    entries = selections(P, d, k, seed=3, where="uniform")
    results, _ = run(OkTopkAllreduce(), entries, d)
    for e, res in zip(entries, results):
        payload = to_sparse(e, d)
        sent = res.sent(payload)
        kept = {i: v for i, v in e.items() if i not in set(sent.idx.tolist())}
        # u == sent + residual, in float64, entry by entry: what was not sent stays, what was sent leaves
        assert {**as_dict(sent), **kept} == {i: np.float32(v) for i, v in e.items()}
        assert set(sent.idx.tolist()) <= set(res.total.idx.tolist())


@pytest.mark.parametrize("values, entry_bytes", [("fp32", 8), ("bf16", 6)])
@pytest.mark.parametrize("P", [1, 2, 4, 7, 12])
def test_counted_bytes_equal_the_closed_form_from_the_sizes(P, values, entry_bytes):
    d, k = 600, 20
    entries = selections(P, d, k, seed=11, where="clustered")
    coll = OkTopkAllreduce(values=values)
    results, logs = run_threads(coll, [coll.encode(to_sparse(e, d)) for e in entries])
    assert all(torch.equal(r.total.idx, results[0].total.idx) and torch.equal(r.total.val, results[0].total.val)
               for r in results)
    bounds = coll.state_dict(0)["bounds"]
    region = lambda i: int(torch.searchsorted(bounds, torch.tensor(i), right=True)) - 1
    union = {i for e in entries for i in e}
    # an exact call: rank j contributes its region's top-min(k, n_j) candidates (n_j: distinct indices there)
    gathered = [min(k, sum(1 for i in union if region(i) == j)) for j in range(P)]
    for r, log in enumerate(logs):
        to_others = sum(1 for i in entries[r] if region(i) != r)
        assert (log.stats.messages, log.stats.bytes) == \
            cost.oktopk_sent(r, P, to_others, gathered, exact=True, regions=True, entry_bytes=entry_bytes)
    assert P < 4 or cost.balance_moves(gathered)        # the case moved pieces (the check saw the balancing)


def test_regions_balance_the_selected_entries():
    P, d = 4, 10_000
    entries = selections(P, d, 200, seed=5, where="heavy")
    programs = [_regions(r, P, to_sparse(e, d)) for r, e in enumerate(entries)]
    blocks = [next(p).buf for p in programs]           # each yields one Allgatherv of its quantiles
    bounds = []
    for p in programs:
        with pytest.raises(StopIteration) as done:
            p.send(blocks)
        bounds.append(done.value.value)
    assert all(torch.equal(b, bounds[0]) for b in bounds)
    per_region = np.histogram([i for e in entries for i in e], bins=bounds[0].numpy())[0]
    assert per_region.max() <= 1.5 * per_region.mean()         # uniform bounds would put most in region 0
    assert np.histogram([i for e in entries for i in e], bins=np.linspace(0, d, P + 1))[0].max() > 2 * per_region.mean()


def test_threads_and_simgrid_agree_bitwise():
    pytest.importorskip("simgrid", reason="SimGrid's Python bindings are not installed (make simgrid)")
    from ssgd.comm.executors.simgrid import run_simgrid
    platform = simgrid_test_platform()
    for P in (3, 8, 12):
        a, b = OkTopkAllreduce(tau=2, tau_prime=3), OkTopkAllreduce(tau=2, tau_prime=3)
        for c in range(4):
            entries = selections(P, 800, 15, seed=c, where="heavy")
            (ra, la), (rb, lb) = run(a, entries, 800), run(b, entries, 800, lambda co, pl: run_simgrid(co, pl, platform))
            assert all(torch.equal(x.total.idx, y.total.idx) and torch.equal(x.total.val, y.total.val) for x, y in zip(ra, rb))
            assert [(l.stats.messages, l.stats.bytes) for l in la] == [(l.stats.messages, l.stats.bytes) for l in lb]


def test_the_selection_reuses_its_threshold_between_exact_calls():
    sel = OkTopkSelect(tau=3)
    g = torch.Generator().manual_seed(0)
    u = torch.randn(10_000, generator=g)
    first = sel.compress(u, 0.01)
    assert len(first) == 100
    second = sel.compress(u * 1.5, 0.01)            # larger values: more entries reach the reused threshold
    assert len(second) > 100 and bool((second.val.abs() >= sel.threshold).all())
    state = sel.state_dict()
    again = OkTopkSelect(tau=3)
    again.load_state_dict(state)
    assert torch.equal(again.compress(u, 0.01).idx, sel.compress(u, 0.01).idx)
    assert len(sel.compress(u, 0.01)) == 100          # call 3: exact again


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_periods_are_refused(bad):
    with pytest.raises(BadArgument, match="tau"):
        OkTopkAllreduce(tau=bad)
    with pytest.raises(BadArgument, match="tau"):
        OkTopkSelect(tau=bad)


def test_a_fresh_instance_keeps_the_periods_but_not_the_state():
    used = OkTopkAllreduce(tau=4, tau_prime=8)
    run(used, selections(3, 200, 5, seed=1, where="uniform"), 200)
    other = used.fresh()
    assert other is not used and (other.tau, other.tau_prime) == (4, 8)
    assert used.state_dict(0)["calls"] == 1 and other.state_dict(0)["calls"] == 0


def _moves_by_position(counts: list[int]) -> list[tuple[int, int, int, int]]:
    """The oracle of `cost.balance_moves`: every position's source and target, runs of equal pairs joined."""
    P, K = len(counts), sum(counts)
    source = [r for r, n in enumerate(counts) for _ in range(n)]
    offset = [i - sum(counts[:source[i]]) for i in range(K)]
    target = [next(j for j in range(P) if j * K // P <= i < (j + 1) * K // P) for i in range(K)]
    runs: list[list[int]] = []
    for i in range(K):
        if source[i] == target[i]:
            continue
        if runs and runs[-1][:2] == [source[i], target[i]] and runs[-1][3] == offset[i]:
            runs[-1][3] += 1
        else:
            runs.append([source[i], target[i], offset[i], offset[i] + 1])
    return sorted(tuple(r) for r in runs)


@pytest.mark.parametrize("seed", range(40))
def test_balance_moves_send_every_position_to_its_balanced_owner(seed):
    """Random counts, zeros and K < P included: the pieces are exactly the runs of positions whose owner changes,
    in source-then-target order."""
    from ssgd.perf import cost

    rng = np.random.default_rng(seed)
    P = int(rng.integers(1, 14))
    counts = [int(c) * int(rng.random() > 0.2) for c in rng.integers(0, 3 if seed % 4 == 0 else 30, size=P)]
    got = cost.balance_moves(counts)
    assert got == sorted(got) == _moves_by_position(counts)
