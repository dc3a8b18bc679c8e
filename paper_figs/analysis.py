"""The numbers behind the analysis and convergence figures, on numpy arrays. No plotting here.

Sources: Gaussian-k's threshold and the Top-k bounds from Shi, Chu, Cheung, See, "Understanding Top-k
Sparsification in Distributed Deep Learning" (arXiv:1911.08772) and its released code
hclhkbu/GaussianK-SGD (compression.py); the delta ratio from Shi et al., "A Convergence Analysis of
Distributed SGD with Communication-Efficient Gradient Sparsification" (IJCAI 2019).

Pure functions, tested on hand-made inputs in tests/unit/test_analysis.py.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.stats import norm


def normal_fit(u: np.ndarray) -> tuple[float, float]:
    """Maximum-likelihood normal fit: (mean, population std), accumulated in float64."""
    x = np.asarray(u, dtype=np.float64)
    return float(x.mean()), float(x.std())


def kurtosis(u: np.ndarray) -> float:
    """E[(u - mean)^4] / std^4 (Pearson; 3 for a normal sample, larger for heavier tails)."""
    x = np.asarray(u, dtype=np.float64)
    c = x - x.mean()
    var = float((c * c).mean())
    return float((c**4).mean()) / var**2 if var > 0 else math.nan


def histogram(u: np.ndarray, bins: int = 121, width_sigmas: float = 5.0) -> tuple[np.ndarray, np.ndarray, float]:
    """Density histogram of u over mean +- width_sigmas * std: (bin edges, density, share of u outside).

    `density` integrates to the share of u inside the range, so it is directly comparable with the
    fitted normal's pdf (`normal_pdf`)."""
    x = np.asarray(u, dtype=np.float64)
    mean, std = normal_fit(x)
    half = width_sigmas * std if std > 0 else 1.0
    edges = np.linspace(mean - half, mean + half, bins + 1)
    counts, _ = np.histogram(x, bins=edges)
    density = counts / (x.size * np.diff(edges))
    return edges, density, float(1.0 - counts.sum() / x.size)


def normal_pdf(x: np.ndarray, mean: float, std: float) -> np.ndarray:
    return norm.pdf(x, loc=mean, scale=std)


def qq_points(u: np.ndarray, n: int = 199, lo: float = 1e-4) -> tuple[np.ndarray, np.ndarray]:
    """Normal Q-Q plot: (theoretical N(0,1) quantiles, empirical quantiles of (u - mean) / std) at n
    probabilities from lo to 1 - lo, evenly spaced in normal quantile (so the tails get as many points
    as the centre). A Gaussian u lies on the diagonal; heavier tails bend outwards."""
    p = norm.cdf(np.linspace(norm.ppf(lo), norm.ppf(1.0 - lo), n))
    mean, std = normal_fit(u)
    z = (np.asarray(u, dtype=np.float64) - mean) / (std if std > 0 else 1.0)
    return norm.ppf(p), np.quantile(z, p)


def tail_share_ratio(u: np.ndarray, density: float) -> float:
    """Share of u with |u - mean| > Phi^-1(1 - density/2) * std, divided by `density`: 1 for a Gaussian u.
    It is how many entries Gaussian-k's first threshold selects, relative to k (GaussianK-SGD compression.py)."""
    mean, std = normal_fit(u)
    thr = norm.ppf(1.0 - density / 2.0) * std
    return float(np.mean(np.abs(np.asarray(u, dtype=np.float64) - mean) > thr)) / density


def bounds(k: int, d: int) -> tuple[float, float]:
    """The two Top-k bounds on ||u - TopK(u)||^2 / ||u||^2: (1 - k/d, (1 - k/d)^2)
    (the second is the Top-k paper's, for bell-shaped u; the first holds for any u)."""
    r = 1.0 - k / d
    return r, r * r


def epoch_delta(epochs: Sequence[float], err_scheme: Sequence[float],
                err_randk: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """IJCAI delta per epoch: mean over the epoch's records of ||x - A(x)||^2 divided by the same mean
    of ||x - RandK(x)||^2 (IJCAI 2019 norm figure). `epochs` are the integer epochs of the records."""
    e = np.asarray(epochs, dtype=np.int64)
    a, b = np.asarray(err_scheme, dtype=np.float64), np.asarray(err_randk, dtype=np.float64)
    keys = np.unique(e)
    return keys, np.array([a[e == k].mean() / b[e == k].mean() for k in keys])


def modelled_time(steps: Sequence[int], iter_s: Sequence[float]) -> np.ndarray:
    """Cumulative modelled wall time at each metrics record: records hold interval means over the
    steps since the previous record, so time = sum of mean * (step - previous step)."""
    s = np.asarray(steps, dtype=np.float64)
    return np.cumsum(np.asarray(iter_s, dtype=np.float64) * np.diff(s, prepend=0.0))


def interval_lengths(steps: Sequence[int]) -> np.ndarray:
    """Steps each metrics record covers: records hold means over the steps since the previous record."""
    return np.diff(np.asarray(steps, dtype=np.float64), prepend=0.0)


def steady_density(steps: Sequence[int], achieved: Sequence[float], target: Sequence[float],
                   density: float) -> float:
    """Mean over training steps of the achieved density, over the records whose target density is
    `density` (the steps after the density warm-up; a record that straddles the warm-up's end is left
    out). NaN when no record qualifies."""
    w = interval_lengths(steps)
    keep = np.isclose(np.asarray(target, dtype=np.float64), density, rtol=1e-9, atol=0.0)
    if not keep.any():
        return math.nan
    return float(np.sum(w[keep] * np.asarray(achieved, dtype=np.float64)[keep]) / np.sum(w[keep]))


def step_mean(steps: Sequence[int], values: Sequence[float]) -> float:
    """Mean over training steps of a per-record interval mean (e.g. density/achieved over a whole run)."""
    w = interval_lengths(steps)
    return float(np.sum(w * np.asarray(values, dtype=np.float64)) / np.sum(w)) if w.sum() > 0 else math.nan


def time_at(steps: Sequence[int], iter_s: Sequence[float], at: Sequence[float]) -> np.ndarray:
    """Cumulative modelled time after step `at` (0 at step 0), linear within a record's interval
    (exact at the records' own steps, where it equals `modelled_time`)."""
    s = np.concatenate([[0.0], np.asarray(steps, dtype=np.float64)])
    t = np.concatenate([[0.0], modelled_time(steps, iter_s)])
    return np.interp(np.asarray(at, dtype=np.float64), s, t)


def first_reach(steps: Sequence[int], acc: Sequence[float], target: float) -> int | None:
    """The first step whose validation accuracy is >= target, or None if it never is."""
    for s, a in zip(steps, acc):
        if a >= target:
            return int(s)
    return None


def seed_band(series: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, min, max) over seeds, pointwise, of equally long series (cut to the shortest first)."""
    n = min(len(x) for x in series)
    a = np.array([np.asarray(x[:n], dtype=np.float64) for x in series])
    return a.mean(axis=0), a.min(axis=0), a.max(axis=0)


def density_phases(steps: Sequence[int], achieved: Sequence[float], target: Sequence[float],
                   density: float, parts: int = 3) -> list[tuple[int, int, float]]:
    """Achieved / target density, averaged over the steps of each phase: the density warm-up (records
    whose target is not `density`; left out when there are none), then `parts` spans of about equal
    numbers of steps. Returns (first step, last step, ratio) per phase; a phase is a run of whole
    records, so its bounds are record steps."""
    s = np.asarray(steps, dtype=np.float64)
    w = interval_lengths(steps)
    ratio = np.asarray(achieved, dtype=np.float64) / np.asarray(target, dtype=np.float64)
    warm = ~np.isclose(np.asarray(target, dtype=np.float64), density, rtol=1e-9, atol=0.0)
    n_warm = int(np.argmin(warm)) if not warm.all() else len(warm)
    cuts = [0, n_warm] if n_warm else [0]
    start = s[n_warm - 1] if n_warm else 0.0
    for i in range(1, parts + 1):      # the first record whose step reaches each share of the rest
        cuts.append(int(np.searchsorted(s, start + (s[-1] - start) * i / parts, side="left")) + 1)
    out = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        b = min(b, len(s))
        if b > a:
            out.append((int(s[a - 1]) + 1 if a else 1, int(s[b - 1]),
                        float(np.sum(w[a:b] * ratio[a:b]) / np.sum(w[a:b]))))
    return out


def line_condition(u: np.ndarray, k: int) -> dict[str, float | bool]:
    """The shape condition under which ||u - TopK(u)||^2 <= (1 - k/d)^2 ||u||^2 holds (derived here).

    s_1 >= ... >= s_d are the sorted u_i^2 and L(i) = s_k (d - i) / (d - k) the line through (k, s_k) and (d, 0).
    The Top-k paper's tighter bound rests on the bell shape of u (Shi et al., arXiv:1911.08772): its sorted squares
    fall as a convex curve that ends near 0, so the tail lies under L and the head over it. What the bound needs is
    only the two areas: tail = sum_{i>k} s_i <= sum_{i>k} L(i) = s_k (d - k - 1) / 2 and
    head = sum_{i<=k} s_i >= sum_{i<=k} L(i) = s_k (kd - k(k + 1)/2) / (d - k); together they give an error share
    tail / (head + tail) <= (d - k)(d - k - 1) / (d(d - 1)) <= (1 - k/d)^2. Returns ``holds`` (both), the two
    margins ``tail_over_line`` (<= 1 needed) and ``head_over_line`` (>= 1 needed), and ``entries_off_line``, the
    share of entries on the wrong side of L (sampling noise puts a few next to k and d even for a Gaussian u).
    A flat u (all |u_i| equal) fails: its tail is 2 (d - k) / (d - k - 1) times the line's.
    """
    d = u.size
    if not 1 <= k < d - 1:
        raise ValueError(f"k must be in [1, d - 1) (d = {d}), got {k}")
    s = np.sort(np.asarray(u, dtype=np.float64) ** 2)[::-1]
    if s[k - 1] == 0.0:  # at most k non-zero entries: Top-k keeps them all, the error is 0
        return {"holds": True, "tail_over_line": 0.0, "head_over_line": float("inf"), "entries_off_line": 0.0}
    line = s[k - 1] * (d - np.arange(1, d + 1)) / (d - k)
    tail, head = s[k:].sum() / line[k:].sum(), s[:k].sum() / line[:k].sum()
    off = np.concatenate([s[:k] < line[:k], s[k:] > line[k:]])
    eps = 1e-12  # float rounding of the sums; the line profile itself sits at 1 exactly
    return {"holds": bool(tail <= 1.0 + eps and head >= 1.0 - eps), "tail_over_line": float(tail), "head_over_line": float(head),
            "entries_off_line": float(off.mean())}
