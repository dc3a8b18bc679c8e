"""Gaussian-k's optional bisection refinement: the default stays the released loop, the option lands in
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


@pytest.mark.parametrize("seed", range(4))
def test_default_is_the_released_loop(seed):
    u = heavy_tailed(100_000, seed)
    a, b = GaussianK().compress(u, 0.001), GaussianK(refinement="released", loops=3).compress(u, 0.001)
    assert torch.equal(a.idx, b.idx)


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
    u = torch.arange(1, 1001, dtype=torch.float32) / 100 * torch.tensor([1.0, -1.0]).repeat(500)
    assert len(GaussianK().compress(u, 0.01)) == 0
    s = GaussianK(refinement="bisect", loops=20).compress(u, 0.01)
    assert 7 <= len(s) <= 13
    assert set(s.idx.tolist()) == set(range(1000 - len(s), 1000))     # the largest magnitudes


@pytest.mark.parametrize("kwargs", [{"refinement": "tight"}, {"loops": 0}, {"loops": 2.5}, {"loops": True}])
def test_bad_arguments_are_one_clear_error(kwargs):
    with pytest.raises(ValueError, match=rf"^{next(iter(kwargs))}="):   # the config layer prefixes the node
        GaussianK(**kwargs)
