"""Random-k's sampler: k distinct indices, uniform, reproducible from the rank's generator."""
import pytest
import torch

from ssgd.compress.randomk import RandomK, sample_distinct


@pytest.mark.parametrize("d,k", [(10, 1), (10, 3), (10, 10), (1000, 7), (100_000, 100), (100_000, 30_000)])
def test_k_distinct_indices_in_range(d, k):
    idx = sample_distinct(d, k, torch.Generator().manual_seed(0))
    assert idx.numel() == k and idx.unique().numel() == k
    assert int(idx.min()) >= 0 and int(idx.max()) < d


@pytest.mark.parametrize("d,k", [(20, 3), (20, 6)])    # both branches: sparse draw and randperm
def test_every_index_equally_likely(d, k):
    g = torch.Generator().manual_seed(1)
    counts = torch.zeros(d)
    draws = 6000
    for _ in range(draws):
        counts[sample_distinct(d, k, g)] += 1
    expected = draws * k / d
    assert float((counts - expected).abs().max()) < 0.1 * expected


def test_positions_within_the_sample_are_not_sorted():
    """The distinct set comes back sorted from unique(): the final shuffle must remove that order
    (else truncation to k would favour small indices)."""
    g = torch.Generator().manual_seed(2)
    draws = [sample_distinct(1000, 10, g) for _ in range(500)]
    low = sum(int((idx < 500).sum()) for idx in draws)
    assert 2250 < low < 2750                                 # ~half of 5000 draws fall below d/2
    # the order itself is uniform: a sorted sample of 10 has probability 1/10! (~3e-7) per draw, and the
    # smallest index sits at each of the 10 positions with probability 1/10 (50 of 500 draws expected)
    assert not any(torch.equal(idx, idx.sort().values) for idx in draws)
    at = torch.bincount(torch.stack([idx.argmin() for idx in draws]), minlength=10)
    assert int(at.min()) >= 25 and int(at.max()) <= 80, at.tolist()


def test_same_generator_state_same_indices():
    a = RandomK(torch.Generator().manual_seed(5)).compress(torch.randn(5000, generator=torch.Generator().manual_seed(0)), 0.01)
    b = RandomK(torch.Generator().manual_seed(5)).compress(torch.randn(5000, generator=torch.Generator().manual_seed(1)), 0.01)
    assert torch.equal(a.idx, b.idx)
