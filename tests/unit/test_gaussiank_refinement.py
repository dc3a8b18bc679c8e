"""Gaussian-k's refinement, against the rule written out from the paper (`written_out`): the default is the
released loop; the optional bisection follows its stated rule and lands in
[2k/3, 4k/3] where the released three x0.5 / x1.5 steps do not."""
import pytest
import torch

from ssgd.compress.gaussiank import GaussianK
from ssgd.compress.sparse import k_of


def heavy_tailed(d: int, seed: int) -> torch.Tensor:
    """Student-t with 2 degrees of freedom: far heavier tails than the normal the threshold assumes."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(d, generator=g)
    chi2 = torch.randn(d, 2, generator=g).pow(2).sum(1)
    return z / (chi2 / 2).sqrt()


def written_out(u: torch.Tensor, density: float, rule: str = "released", loops: int = 3) -> tuple[set[int], list[int]]:
    """The selection rule written out from its description, not from the package: Shi et al.,
    "Understanding Top-k Sparsification in Distributed Deep Learning" (arXiv:1911.08772), released code
    GaussianK-SGD `gen_threshold_from_normal_distribution`: thr = mean + Phi^-1(1 - density/2) std of the
    signed values (float64, unbiased std); then up to `loops` passes: I = {j : |u_j| > thr}; count < 2k/3:
    thr *= 0.5, count > 4k/3: thr *= 1.5, else stop; the set of the last pass is sent. rule="bisect": the
    same steps until both sides of [2k/3, 4k/3] were seen, then the midpoint of the last threshold that
    kept too many and the last that kept too few. Returns (the set, the count of every pass)."""
    k = max(int(u.numel() * density), 1)
    std, mean = torch.std_mean(u.double())
    thr = float(mean) + float(torch.special.ndtri(torch.tensor(1 - density / 2, dtype=torch.float64))) * float(std)
    many = few = None
    counts = []
    for _ in range(loops):
        chosen = (u.abs() > thr).nonzero().flatten()
        counts.append(chosen.numel())
        if chosen.numel() < 2 * k / 3:
            few, thr = thr, thr * 0.5 if rule == "released" or many is None else (many + thr) / 2
        elif chosen.numel() > 4 * k / 3:
            many, thr = thr, thr * 1.5 if rule == "released" or few is None else (few + thr) / 2
        else:
            break
    return set(chosen.tolist()), counts


@pytest.mark.parametrize("seed", range(6))
def test_default_is_the_released_loop(seed):
    u = heavy_tailed(100_000, seed)
    a, b = GaussianK().compress(u, 0.001), GaussianK(refinement="released", loops=3).compress(u, 0.001)
    assert torch.equal(a.idx, b.idx)
    assert set(a.idx.tolist()) == written_out(u, 0.001)[0]
    assert torch.equal(a.val, u[a.idx])


UNIFORM = torch.arange(1, 1001, dtype=torch.float32) / 100 * torch.tensor([1.0, -1.0]).repeat(500)


@pytest.mark.parametrize("seed,density", [(seed, density) for seed in range(4) for density in (0.001, 0.05)])
def test_bisect_is_the_written_out_rule(seed, density):
    u = heavy_tailed(200_000, seed)
    s = GaussianK(refinement="bisect", loops=12).compress(u, density)
    assert set(s.idx.tolist()) == written_out(u, density, "bisect", 12)[0]


def test_the_inputs_take_every_step_of_both_rules():
    """The vectors above take x0.5 and x1.5 steps and (bisect) midpoints, so a changed step or band
    changes a selection there (the counts are the written-out rule's)."""
    k = 100
    released = [written_out(heavy_tailed(100_000, seed), 0.001)[1] for seed in range(6)]
    assert any(c < 2 * k / 3 for p in released for c in p[:-1])       # a x0.5 step ...
    assert any(c > 4 * k / 3 for p in released for c in p[:-1])       # ... and a x1.5 step were used
    assert written_out(heavy_tailed(200_000, 0), 0.05, "bisect", 12)[1] == [3650, 13531, 6338, 9002]  # k = 10,000
    assert written_out(UNIFORM, 0.01, "bisect", 20)[1] == [0, 256, 0, 70, 0, 24, 0, 12]             # k = 10


def test_bisect_lands_in_the_band_where_the_released_loop_does_not():
    density, outside = 0.001, 0
    for seed in range(8):
        u = heavy_tailed(200_000, seed)
        k = k_of(u.numel(), density)
        released = len(GaussianK().compress(u, density))
        outside += not 2 * k / 3 <= released <= 4 * k / 3
        s = GaussianK(refinement="bisect", loops=12).compress(u, density)
        assert 2 * k / 3 <= len(s) <= 4 * k / 3, seed
        # still a threshold selection: every kept |u| exceeds every dropped one
        kept = torch.zeros_like(u, dtype=torch.bool)
        kept[s.idx] = True
        assert u[kept].abs().min() > u[~kept].abs().max()
        assert torch.equal(s.val, u[s.idx])
    assert outside >= 1                  # the released loop misses the band on some of these vectors


def test_bisect_by_hand():
    # d = 1000, density 0.01: k = 10, band [6.67, 13.33]; |u| = 0.01 ... 10 (uniform, alternating sign):
    # mean -0.005, std 5.77, first threshold 2.576 std = 14.9 keeps nothing; the released loop goes
    # 14.9 (0 kept) -> 7.4 (~260 kept) -> 11.2 (0 kept) and sends nothing; bisection closes in on ~9.9
    u = UNIFORM
    assert len(GaussianK().compress(u, 0.01)) == 0
    s = GaussianK(refinement="bisect", loops=20).compress(u, 0.01)
    assert 7 <= len(s) <= 13
    assert set(s.idx.tolist()) == set(range(1000 - len(s), 1000))     # the largest magnitudes
    assert set(s.idx.tolist()) == written_out(u, 0.01, "bisect", 20)[0]


@pytest.mark.parametrize("kwargs", [{"refinement": "tight"}, {"loops": 0}, {"loops": 2.5}, {"loops": True}])
def test_bad_arguments_are_one_clear_error(kwargs):
    with pytest.raises(ValueError, match=rf"^{next(iter(kwargs))}="):   # the config layer prefixes the node
        GaussianK(**kwargs)
