"""Gaussian-k: a threshold from the normal inverse CDF instead of an exact Top-k.

Shi et al., "Understanding Top-k Sparsification in Distributed Deep Learning" (arXiv 1911.08772);
released code `GaussianCompressor` / `gen_threshold_from_normal_distribution` (papers.md 2.4):

    mu, sigma = mean(u), std(u)                      # of the signed values
    thr = mu + Phi^-1(1 - density / 2) * sigma
    repeat up to 3 times:
        I = {j : |u_j| > thr}
        if   |I| < 2k/3: thr *= 0.5
        elif |I| > 4k/3: thr *= 1.5
        else: stop
    send (I, u[I])                                   # |I| is NOT trimmed to k

The selected set is the one of the last iteration (a threshold changed in the third iteration is
not used), so |I| may fall outside [2k/3, 4k/3]; the trainer logs the achieved density.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ssgd.compress.base import Compressor
from ssgd.compress.sparse import Sparse, k_of

REFINEMENT_LOOPS = 3


class GaussianK(Compressor):
    """Variable-count selection by a Gaussian threshold (see module docstring)."""

    def compress(self, u: Tensor, density: float) -> Sparse:
        k = k_of(u.numel(), density)
        std, mean = torch.std_mean(u, correction=1 if u.numel() > 1 else 0)  # torch.std, as released
        z = torch.special.ndtri(torch.tensor(1.0 - density / 2, dtype=torch.float64)).item()
        thr = mean.item() + z * std.item()
        mag = u.abs()
        for _ in range(REFINEMENT_LOOPS):
            idx = torch.nonzero(mag > thr).view(-1)
            if idx.numel() < 2 * k / 3:
                thr *= 0.5
            elif idx.numel() > 4 * k / 3:
                thr *= 1.5
            else:
                break
        return Sparse(idx, u[idx], u.numel())
