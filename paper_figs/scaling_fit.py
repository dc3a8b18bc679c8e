"""Effective constants of the iteration model fitted to measured per-iteration times, and the tests
of what such a fit can explain. Pure functions (numpy); `fig_scaling.py --calibrated` uses them on the
gTop-k paper's scaling data.

Without overlap, the model's step of scheme s on P workers is linear in its constants
(`ssgd.perf.iteration`; every collective's `model_seconds` is a sum of alpha + n beta messages):

    t_s(P) = compute + selection[kind_s] + alpha * L_s(P) + beta * B_s(P)

  * compute: forward + backward + everything else one worker spends per step, the same for every scheme;
  * selection[kind]: the selection time of the scheme's selection cost kind ("exact_topk" for Top-k
    and gTop-k; absent for "none");
  * L_s(P) = the collective's modelled seconds on a network with alpha = 1 s, beta = 0 (messages on
    the critical path), B_s(P) = the same with alpha = 0, beta = 1 s/byte (bytes on the critical path).

`fit_nonnegative` finds constants >= 0 that minimise the squared relative error over the given
points. `growth_ratio` and `growth_range` test a scheme without any fit: with compute, selection,
alpha, beta >= 0 free, the ratio (t(P3) - t(P2)) / (t(P2) - t(P1)) of a model lies between the same
ratio of L and of B alone (a mediant), so a measured ratio outside that range cannot be produced by
any constants.

`mean_of`, `log2_line` and `fit_pinned_constant` are the baselines such a fit has to beat: the mean
of the fitted times, the straight line in log2 P through them, and the model with alpha and beta
pinned to a measured link, leaving one constant >= 0 free.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np

from ssgd.perf.alphabeta import AlphaBeta
from ssgd.perf.iteration import SchemeCost

COMPUTE, ALPHA, BETA = "compute_s", "alpha_s", "beta_s_per_byte"


def selection_key(kind: str) -> str:
    """Name of the constant that holds the selection time of cost kind `kind`."""
    return f"selection_s[{kind}]"


def latency_and_bytes(scheme: SchemeCost, P: int, d: int) -> tuple[float, float]:
    """(L, B): the scheme's one collective call over d elements on P ranks at unit alpha and beta."""
    count = d if scheme.count is None else scheme.count
    L = scheme.collective.model_seconds(AlphaBeta(1.0, 0.0), P, d, [count] * P)
    B = scheme.collective.model_seconds(AlphaBeta(0.0, 1.0), P, d, [count] * P)
    return L, B


def features(scheme: SchemeCost, P: int, d: int) -> dict[str, float]:
    """The coefficients of t_s(P) in the constants (module docstring), by constant name."""
    L, B = latency_and_bytes(scheme, P, d)
    row = {COMPUTE: 1.0, ALPHA: L, BETA: B}
    if scheme.selection != "none":
        row[selection_key(scheme.selection)] = 1.0
    return row


def predict(row: Mapping[str, float], constants: Mapping[str, float]) -> float:
    """t = sum of coefficient x constant (a constant missing from `constants` counts as 0)."""
    return float(sum(c * constants.get(name, 0.0) for name, c in row.items()))


def fit_nonnegative(rows: Sequence[Mapping[str, float]], seconds: Sequence[float]) -> dict[str, float]:
    """Constants x >= 0 minimising sum_i ((row_i . x - t_i) / t_i)^2.

    rows: coefficient mappings (`features`); seconds: the measured t_i > 0, same length. Exact: every
    subset of constants is solved by least squares (columns scaled to unit norm) and the best solution
    with no negative constant wins, which is the non-negative optimum (few constants, so 2^n solves).
    Constants that no row uses are not returned. ValueError on empty, mismatched or non-positive input.
    """
    if not rows or len(rows) != len(seconds):
        raise ValueError(f"fit_nonnegative: {len(rows)} rows but {len(seconds)} times")
    t = np.asarray(seconds, dtype=np.float64)
    if not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise ValueError("fit_nonnegative: times must be finite and > 0")
    names = sorted({name for row in rows for name in row})
    A = np.array([[row.get(name, 0.0) for name in names] for row in rows], dtype=np.float64) / t[:, None]
    b = np.ones_like(t)                                      # t_i / t_i
    scale = np.linalg.norm(A, axis=0)
    scale[scale == 0] = 1.0
    As = A / scale
    best_x, best_r = np.zeros(len(names)), float(b @ b)     # all constants 0
    for size in range(1, len(names) + 1):
        for cols in itertools.combinations(range(len(names)), size):
            sol = np.linalg.lstsq(As[:, cols], b, rcond=None)[0]
            if np.any(sol < 0):
                continue
            x = np.zeros(len(names))
            x[list(cols)] = sol
            r = float(np.sum((As @ x - b) ** 2))
            if r < best_r * (1 - 1e-12):
                best_x, best_r = x, r
    return dict(zip(names, (best_x / scale).tolist()))


def growth_ratio(t1: float, t2: float, t3: float) -> float:
    """(t3 - t2) / (t2 - t1): how much a time grows from P2 to P3 per unit of growth from P1 to P2;
    NaN when t2 <= t1 (no growth to compare with)."""
    return (t3 - t2) / (t2 - t1) if t2 > t1 else math.nan


def growth_range(scheme: SchemeCost, Ps: tuple[int, int, int], d: int) -> tuple[float, float]:
    """(min, max) of `growth_ratio` over the scheme's model t = c + alpha L + beta B at P1 < P2 < P3,
    for any constants c, alpha, beta >= 0 (alpha + beta > 0): the range between the ratio of L alone
    and of B alone (+-inf for a term that grows only from P2 to P3; a term that never grows adds
    nothing). ValueError when a term shrinks from P1 to P2 or nothing grows from P1 to P2."""
    terms = [latency_and_bytes(scheme, P, d) for P in Ps]
    ratios = []
    for i in (0, 1):
        x1, x2, x3 = (term[i] for term in terms)
        if x2 > x1:
            ratios.append((x3 - x2) / (x2 - x1))
        elif x2 < x1:
            raise ValueError(f"scheme {scheme.name!r}: its {'latency' if i == 0 else 'bytes'} term shrinks "
                             f"from P = {Ps[0]} to {Ps[1]}")
        elif x3 != x2:
            ratios.append(math.copysign(math.inf, x3 - x2))
    if not ratios:
        raise ValueError(f"scheme {scheme.name!r}: its communication does not change from P = {Ps[0]} to {Ps[2]}")
    return min(ratios), max(ratios)


# --- naive predictors and the pinned-link fit: what a calibrated model has to beat ------------------
def mean_of(times: Sequence[float]) -> float:
    """The naive "mean" predictor: t(P) = the mean of the fitted times, the same for every P
    (P-independent; `fig_scaling.py` passes the paper's P = 4 and 8 times). ValueError when empty."""
    if not times:
        raise ValueError("mean_of: no times")
    return float(sum(times) / len(times))


def log2_line(P1: int, t1: float, P2: int, t2: float, P: int) -> float:
    """The naive "log-line" predictor: the straight line through (log2 P1, t1) and (log2 P2, t2),
    evaluated at log2 P (for P1, P2 = 4, 8: t4 + (t8 - t4) (log2 P - 2)). ValueError when P1 == P2
    or a P is not positive."""
    if min(P1, P2, P) <= 0 or P1 == P2:
        raise ValueError(f"log2_line: need distinct P1, P2 > 0 and P > 0, got P1={P1}, P2={P2}, P={P}")
    x1, x2 = math.log2(P1), math.log2(P2)
    return float(t1 + (t2 - t1) * (math.log2(P) - x1) / (x2 - x1))


def fit_pinned_constant(comm_seconds: Sequence[float], seconds: Sequence[float]) -> float:
    """The one constant c >= 0 of t_i = c + comm_i (comm_i = alpha L_s(P_i) + beta B_s(P_i) at a
    pinned alpha and beta) minimising sum_i ((c + comm_i - t_i) / t_i)^2.

    Closed form: c = max(0, sum_i (t_i - comm_i) / t_i^2 / sum_i 1 / t_i^2) (the objective is a
    parabola in c, so clipping its vertex at 0 is the non-negative optimum). ValueError on empty,
    mismatched or non-positive times.
    """
    if not seconds or len(comm_seconds) != len(seconds):
        raise ValueError(f"fit_pinned_constant: {len(comm_seconds)} communication times but {len(seconds)} times")
    t = np.asarray(seconds, dtype=np.float64)
    if not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise ValueError("fit_pinned_constant: times must be finite and > 0")
    comm = np.asarray(comm_seconds, dtype=np.float64)
    w = 1.0 / t**2
    return max(0.0, float(np.sum((t - comm) * w) / np.sum(w)))
