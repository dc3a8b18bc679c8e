"""Random-k sparsification with error feedback (GaussianK-SGD's `randomkec`)."""
from __future__ import annotations

import torch
from torch import Tensor

from ssgd.compress.base import Compressor
from ssgd.compress.sparse import k_of
from ssgd.payload import Sparse


class RandomK(Compressor):
    """k = max(int(d * density), 1) distinct coordinates drawn uniformly from this rank's generator
    (independent across ranks); values are u at those coordinates, not rescaled."""

    selection_cost = "linear"

    def __init__(self, generator: torch.Generator | None = None) -> None:
        if generator is None:
            raise ValueError("RandomK needs its own torch.Generator (one per rank)")
        super().__init__(generator)

    def compress(self, u: Tensor, density: float) -> Sparse:
        idx = sample_distinct(u.numel(), k_of(u.numel(), density), self.generator).to(u.device)
        return Sparse(idx, u[idx], u.numel())


def sample_distinct(d: int, k: int, generator: torch.Generator) -> Tensor:
    """k distinct indices, uniform over the k-subsets of [0, d), drawn on the CPU from `generator`.

    For k << d: draw with replacement, keep the distinct values (given its size, that set is a
    uniform random subset), top up if short, then keep a uniform random k of them: O(k log k)
    instead of randperm's O(d) (1.4 s at d = 25M). For k > d/4, randperm.
    """
    if 4 * k > d:
        return torch.randperm(d, generator=generator)[:k]
    idx = torch.randint(d, (k + k // 8 + 16,), generator=generator).unique()
    while idx.numel() < k:
        idx = torch.cat([idx, torch.randint(d, (k - idx.numel() + 16,), generator=generator)]).unique()
    return idx[torch.randperm(idx.numel(), generator=generator)[:k]]
