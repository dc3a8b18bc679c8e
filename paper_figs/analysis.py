"""The numbers behind the analysis figures, on numpy arrays (papers.md 2.4, 5). No plotting here.

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
    It is how many entries Gaussian-k's first threshold selects, relative to k (papers.md 2.4)."""
    mean, std = normal_fit(u)
    thr = norm.ppf(1.0 - density / 2.0) * std
    return float(np.mean(np.abs(np.asarray(u, dtype=np.float64) - mean) > thr)) / density


def bounds(k: int, d: int) -> tuple[float, float]:
    """The two Top-k bounds on ||u - TopK(u)||^2 / ||u||^2: (1 - k/d, (1 - k/d)^2) (papers.md 5)."""
    r = 1.0 - k / d
    return r, r * r


def epoch_delta(epochs: Sequence[float], err_scheme: Sequence[float],
                err_randk: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """IJCAI delta per epoch: mean over the epoch's records of ||x - A(x)||^2 divided by the same mean
    of ||x - RandK(x)||^2 (papers.md 5). `epochs` are the integer epochs of the records."""
    e = np.asarray(epochs, dtype=np.int64)
    a, b = np.asarray(err_scheme, dtype=np.float64), np.asarray(err_randk, dtype=np.float64)
    keys = np.unique(e)
    return keys, np.array([a[e == k].mean() / b[e == k].mean() for k in keys])


def modelled_time(steps: Sequence[int], iter_model_s: Sequence[float]) -> np.ndarray:
    """Cumulative modelled wall time at each metrics record: records hold interval means over the
    steps since the previous record, so time = sum of mean * (step - previous step)."""
    s = np.asarray(steps, dtype=np.float64)
    return np.cumsum(np.asarray(iter_model_s, dtype=np.float64) * np.diff(s, prepend=0.0))
