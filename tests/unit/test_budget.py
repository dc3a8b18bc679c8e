"""GlobalBudget (ssgd.compress.budget) against an oracle written from its definition: a part's k in step s + 1 is
its count among the K = density x d largest |u| of step s over all parts (at least 1), k_of(n, density) before."""
import numpy as np
import pytest
import torch

from ssgd.compress.budget import GlobalBudget

SIZES, DENSITY = (30, 7, 100, 1), 0.1


def oracle_k(us: list[np.ndarray]) -> list[int]:
    """Each part's count among the K largest magnitudes of all parts' u (distinct magnitudes), at least 1."""
    mags = np.abs(np.concatenate(us))
    t = np.sort(mags)[::-1][max(int(mags.size * DENSITY), 1) - 1]
    return [max(int((np.abs(u) >= t).sum()), 1) for u in us]


def top(u: np.ndarray, k: int) -> list[int]:
    return sorted(np.argsort(-np.abs(u), kind="stable")[:k].tolist())


def steps(seed: int, n: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)       # heavy-tailed, so the parts' shares differ from their sizes
    return [[(rng.standard_cauchy(m) * (1 + 9 * (i == 2))).astype(np.float32) for i, m in enumerate(SIZES)]
            for _ in range(n)]


@pytest.mark.parametrize("seed", range(4))
def test_each_part_selects_its_share_of_the_previous_steps_global_top_k(seed):
    budget, members, us = GlobalBudget(DENSITY), {}, steps(seed, 4)
    per_part = [max(int(n * DENSITY), 1) for n in SIZES]
    want_k = [per_part, per_part, oracle_k(us[1]), oracle_k(us[2])]     # step 1 joins the parts: no shares from it
    for s, step in enumerate(us):
        for i, u in enumerate(step):
            if i not in members:
                members[i] = budget.join(u.size)
            got = budget.select(members[i], torch.from_numpy(u))
            assert got.idx.tolist() == top(u, want_k[s][i]), (s, i)
            assert torch.equal(got.val, torch.from_numpy(u)[got.idx])


def test_a_checkpointed_budget_selects_as_the_run_that_went_on():
    us = steps(7, 5)
    straight, resumed = GlobalBudget(DENSITY), GlobalBudget(DENSITY)
    ids = [straight.join(n) for n in SIZES]
    for step in us[:3]:
        for m, u in zip(ids, step):
            straight.select(m, torch.from_numpy(u))
    saved = [straight.state_dict(m) for m in ids]                       # at the step's end
    assert all(isinstance(s["share"], int) and s["share"] >= 1 for s in saved)
    loaded = [resumed.join(n) for n in reversed(SIZES)][::-1]           # joined in another order
    for m, s in zip(loaded, saved):
        resumed.load_state_dict(m, s)
    for step in us[3:]:
        for a, b, u in zip(ids, loaded, step):
            x, y = straight.select(a, torch.from_numpy(u)), resumed.select(b, torch.from_numpy(u))
            assert torch.equal(x.idx, y.idx) and torch.equal(x.val, y.val)


def test_a_bad_density_is_refused():
    with pytest.raises(ValueError, match="density"):
        GlobalBudget(0.0)
