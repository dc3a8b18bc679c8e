"""Gaussian-k: a threshold from the normal inverse CDF instead of an exact Top-k.

Shi, Chu, Cheung, See, "Understanding Top-k Sparsification in Distributed Deep Learning"
(arXiv:1911.08772); released code hclhkbu/GaussianK-SGD compression.py, `GaussianCompressor` /
`gen_threshold_from_normal_distribution`:

    mu, sigma = mean(u), std(u)                      # of the signed values
    thr = mu + Phi^-1(1 - density / 2) * sigma
    repeat up to 3 times:
        I = {j : |u_j| > thr}
        if   |I| < 2k/3: thr *= 0.5
        elif |I| > 4k/3: thr *= 1.5
        else: stop
    send (I, u[I])                                   # |I| is NOT trimmed to k

The selected set is the one of the last iteration (a threshold changed in the third iteration is
not used), so |I| may fall outside [2k/3, 4k/3]; the trainer logs the achieved density. On real
gradients (heavier tails than Gaussian) it often does: FNN-3 sends ~2.7 k per step after the warm-up.

`refinement="bisect"` (not the released code; off by default) is a tighter option for comparisons at
equal achieved density: the same first threshold and x0.5 / x1.5 steps until the count has been seen
on both sides of [2k/3, 4k/3], then bisection between the last threshold that kept too many and the
last that kept too few, for up to `loops` passes in all (each as cheap as a released one, below).

Memory passes (docs/hot-path.md). Read as released, every refinement costs a comparison of all d
entries plus `nonzero` over a d-sized mask, with d-sized temporaries each time. Here u is read once
in all, whatever the number of refinements, and nothing d-sized is written: `BlockPeaks(u, sums=True)`
gives the float64 sums for the statistics and the largest |u_j| of every block of `BLOCK` consecutive
entries in one C loop (four torch reductions where it is unavailable: `sum`, `dot`, `amax`, `amin`). A block can hold an entry with |u_j| > thr only if its max exceeds thr or its min
is below -thr; each refinement compares the d / BLOCK peaks, and only the entries of the candidate
blocks (about BLOCK * k of them near the target density). When the peaks alone prove that the count
is above 4k/3 (more candidate blocks than that) or below 2k/3 (fewer candidate entries than that),
a refinement that is not the last decides without visiting any entry. The result (set, order and
values) is exactly the released loop's, on the same statistics.
"""
from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

from ssgd.compress.base import Compressor
from ssgd.compress.sparse import BlockPeaks, float64_sums, k_of
from ssgd.payload import Sparse
from ssgd.errors import BadArgument

REFINEMENT_LOOPS = 3
REFINEMENTS = ("released", "bisect")


@functools.lru_cache(maxsize=64)
def normal_quantile(p: float) -> float:
    """Phi^-1(p) in float64 (torch.special.ndtri), e.g. 3.2905 for p = 0.9995."""
    return torch.special.ndtri(torch.tensor(p, dtype=torch.float64)).item()


def mean_std(u: Tensor, sums: tuple[float, float] | None = None) -> tuple[float, float]:
    """mean and (unbiased, as torch.std) standard deviation of u, from its float64 sum and sum of squares
    (`sums`, else `float64_sums(u)`), so the statistics equal a float64 torch.std_mean to ~1e-14 relative
    at any d; float32 sums drift, which moves the threshold of Gaussian-k (arXiv:1911.08772, see the
    module docstring) and hence the selected set. When the variance is tiny next to the mean square
    (cancellation would cost digits), falls back to a float64 torch.std_mean.
    """
    n = u.numel()
    if n < 2:
        return float(u.sum(dtype=torch.float64)) / max(n, 1), 0.0
    total, squares = float64_sums(u) if sums is None else sums
    mean = total / n
    var = (squares - total * mean) / (n - 1)
    if not var > 1e-8 * squares / n:          # also catches NaN / inf
        std, m = torch.std_mean(u.reshape(-1).to(torch.float64))
        return float(m), float(std)
    return mean, math.sqrt(var)


class GaussianK(Compressor):
    """Variable-count selection by a Gaussian threshold (see module docstring).

    Args:
        refinement: "released" (default: the GaussianK-SGD loop) or "bisect" (tighter, see above).
        loops: refinement passes at most (default 3, the released count).
    """

    def __init__(self, generator: torch.Generator | None = None, refinement: str = "released",
                 loops: int = REFINEMENT_LOOPS) -> None:
        super().__init__(generator)
        if refinement not in REFINEMENTS:
            raise BadArgument("refinement", refinement, f"allowed: {', '.join(REFINEMENTS)}")
        if isinstance(loops, bool) or not isinstance(loops, int) or loops < 1:
            raise BadArgument("loops", loops, "must be an integer >= 1")
        self.refinement, self.loops = refinement, loops

    selection_cost = "linear"

    def compress(self, u: Tensor, density: float) -> Sparse:
        k = k_of(u.numel(), density)
        peaks = BlockPeaks(u, sums=True)
        mean, std = mean_std(u, peaks.sums)
        thr = mean + normal_quantile(1.0 - density / 2) * std
        many, few = math.nan, math.nan        # bisect: last thresholds that kept too many / too few
        for i in range(self.loops):
            cand = peaks.candidates(thr)
            lower, upper = peaks.bounds(thr, cand)
            if i < self.loops - 1 and upper < 2 * k / 3:       # the peaks decide without visiting entries
                count = upper
            elif i < self.loops - 1 and lower > 4 * k / 3:
                count = lower
            else:
                idx = peaks.above(thr, cand)
                count = idx.numel()
            if count < 2 * k / 3:
                few = thr
                thr = thr * 0.5 if self.refinement == "released" or math.isnan(many) else (many + thr) / 2
            elif count > 4 * k / 3:
                many = thr
                thr = thr * 1.5 if self.refinement == "released" or math.isnan(few) else (few + thr) / 2
            else:
                break
        return Sparse(idx, u.index_select(0, idx), u.numel())
