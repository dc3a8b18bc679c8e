"""Random-k sparsification with error feedback (GaussianK-SGD's `randomkec`)."""
from __future__ import annotations

import torch
from torch import Tensor

from ssgd.compress.base import Compressor
from ssgd.compress.sparse import Sparse, k_of


class RandomK(Compressor):
    """k = max(int(d * density), 1) distinct coordinates drawn uniformly from this rank's generator
    (independent across ranks); values are u at those coordinates, not rescaled."""

    def __init__(self, generator: torch.Generator | None = None) -> None:
        if generator is None:
            raise ValueError("RandomK needs its own torch.Generator (one per rank)")
        super().__init__(generator)

    def compress(self, u: Tensor, density: float) -> Sparse:
        k = k_of(u.numel(), density)
        idx = torch.randperm(u.numel(), generator=self.generator)[:k].to(u.device)   # CPU draw: same on any device
        return Sparse(idx, u[idx], u.numel())
