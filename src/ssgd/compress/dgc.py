"""DGC-style sampled-threshold selection (GaussianK-SGD's `dgcsampling`).

Lin et al., "Deep Gradient Compression" (ICLR'18), section 5, estimate the Top-k threshold from a
small sample; the GaussianK-SGD code ships it as `DGCSamplingCompressor` (hclhkbu/GaussianK-SGD,
compression.py). Its algorithm, with k = max(int(d * density), 1):

    S   = 1 % of the positions (released code: randperm(d)[:int(0.01 d)])
    thr = k-th largest |u| over S                    # the SAME k as for the whole vector
    I   = {j : |u_j| > thr}                          # strict
    if |I| > 4k/3: I = the k entries of I with the largest |u|   (exact top-k of the survivors)
    send (I, u[I])

Reading of "take the top-k of the sample" (documented choice): the released code takes the top-k of
the sample with the unscaled k, so for density < 1 % the threshold is the (1 - density / 0.01)
quantile of |u| (the 90th percentile at density 0.001): about d * density / 0.01 entries pass
(10 k), the 4k/3 branch always runs, and exactly k entries are sent. That is the default
(`scale_k=False`). DGC's own description scales k to the sample, k_s = max(int(|S| * density), 1),
so thr estimates the k-th largest |u| of the whole vector; `scale_k=True` does that, and then the
count varies per step in [0, 4k/3] (or is exactly k after the trim), like Gaussian-k.

Deviations from the released code, on purpose:
- The sample is drawn WITH replacement, |S| = int(fraction * d) positions from `torch.randint` on this
  rank's generator: O(|S|), instead of a full `torch.randperm(d)` every step (O(d) plus RNG cost,
  which also biases selection-time comparisons against DGC). For |S| = 0.01 d about 0.5 % of the
  sample are repeats, which moves a quantile estimate by a negligible amount.
- |S| = max(int(fraction * d), k) capped at d: the released code crashes (top-k of fewer than k values)
  once density > fraction, e.g. in the first warm-up epoch at density 0.015625.

Passes over u (docs/selection-cost.md): the survivors are counted through u's block peaks
(`BlockPeaks`, one read of u), visiting only the blocks whose peak passes thr. When the peaks alone
prove more than 4k/3 survivors (more candidate blocks than that), the trim's result is the exact
top-k of u (every survivor count >= k puts the k-th largest |u| above thr), so it is taken by
`select_topk` from the same peaks, without visiting the ~10 k survivors: the same set as released
(ties at the k-th magnitude aside, as for any exact top-k), in increasing index order.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ssgd.compress.base import Compressor
from ssgd.compress.sparse import BLOCK, BlockPeaks, k_of, select_topk, topk_block
from ssgd.payload import Sparse
from ssgd.errors import BadArgument

SAMPLE_FRACTION = 0.01    # the released `DGCSamplingCompressor` samples 1 % of the entries


def sample_size(d: int, k: int, fraction: float) -> int:
    """|S| = max(int(fraction * d), k), at most d (so that the k-th sampled value exists)."""
    return min(d, max(int(fraction * d), k, 1))


def sample_threshold(u: Tensor, size: int, rank_in_sample: int, generator: torch.Generator) -> float:
    """The `rank_in_sample`-th largest |u_j| over `size` positions j drawn uniformly WITH replacement
    from `generator` (on the CPU, then moved to u's device). 1 <= rank_in_sample <= size."""
    pos = torch.randint(u.numel(), (size,), generator=generator).to(u.device)
    return float(torch.topk(u[pos].abs(), rank_in_sample, sorted=False).values.min())


class DGCSampling(Compressor):
    """Threshold = k-th largest |u| of a random sample, exact top-k of the survivors if more than
    4k/3 pass (module docstring). Sends at most 4k/3 entries (exactly k after a trim); values are
    copies of u."""

    selection_cost = "linear"

    def __init__(self, generator: torch.Generator | None = None, sample_fraction: float = SAMPLE_FRACTION,
                 scale_k: bool = False) -> None:
        if generator is None:
            raise ValueError("DGCSampling needs its own torch.Generator (one per rank)")
        if not 0.0 < sample_fraction <= 1.0:
            raise BadArgument("sample_fraction", sample_fraction, "must be in (0, 1]")
        super().__init__(generator)
        self.sample_fraction = float(sample_fraction)
        self.scale_k = bool(scale_k)

    def compress(self, u: Tensor, density: float) -> Sparse:
        d = u.numel()
        k = k_of(d, density)
        size = sample_size(d, k, self.sample_fraction)
        k_sample = max(int(size * density), 1) if self.scale_k else k
        thr = sample_threshold(u, size, min(k_sample, size), self.generator)
        peaks = BlockPeaks(u, topk_block(u, k) or BLOCK)
        cand = peaks.candidates(thr)
        lower, _ = peaks.bounds(thr, cand)
        if 3 * lower > 4 * k and peaks.nan_free:       # > 4k/3 survivors, proven by the peaks: the trim is the top-k
            return select_topk(u, k, peaks)
        idx = peaks.above(thr, cand)           # |u| > thr (strict; NaN never passes, as in abs(u) > thr)
        if 3 * idx.numel() > 4 * k:            # more than 4k/3 survivors (exact integer test)
            idx = idx[torch.topk(u[idx].abs(), k, sorted=False).indices]
        return Sparse(idx, u[idx], d)
