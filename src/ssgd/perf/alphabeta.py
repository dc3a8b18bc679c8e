"""The alpha-beta (Hockney) model of one network link."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ssgd.errors import ConfigError


@dataclass(frozen=True)
class AlphaBeta:
    """Time of one point-to-point message of n bytes: alpha + n * beta.

    alpha: seconds per message (latency); beta: seconds per byte (inverse bandwidth).
    """

    alpha: float
    beta: float

    def __post_init__(self) -> None:
        for key in ("alpha", "beta"):
            value = getattr(self, key)
            if not isinstance(value, (int, float)) or value < 0 or value != value:
                raise ConfigError(f"cluster.network.{key}={value!r}: must be a number >= 0 "
                                  f"({'seconds per message' if key == 'alpha' else 'seconds per byte'})")

    def message(self, nbytes: int) -> float:
        """Seconds for one message of `nbytes` bytes."""
        return self.alpha + nbytes * self.beta


def fit_alpha_beta(nbytes: Sequence[float], seconds: Sequence[float]) -> AlphaBeta:
    """Least-squares fit of t = alpha + n beta to point-to-point timings (the released gTop-k
    scripts' `plot_p2platency` idea), with relative residuals so that small messages (which fix
    alpha) weigh as much as large ones (which fix beta). Constraints alpha, beta >= 0: when the free
    fit makes one negative, it is refitted with that one at 0.

    nbytes, seconds: one-way message size and time per message, at least two distinct sizes.
    """
    n = torch.tensor([float(x) for x in nbytes], dtype=torch.float64)
    t = torch.tensor([float(x) for x in seconds], dtype=torch.float64)
    if n.numel() != t.numel() or n.unique().numel() < 2 or bool((t <= 0).any()):
        raise ValueError("fit_alpha_beta needs >= 2 distinct sizes and positive times of equal count")
    w = 1.0 / t                                   # minimise sum(((alpha + n beta - t) / t)^2)
    scale = float(n.max())                        # columns of similar size: a well-conditioned solve
    A = torch.stack([torch.ones_like(n), n / scale], dim=1) * w[:, None]
    alpha, beta_scaled = torch.linalg.lstsq(A, (t * w)[:, None], driver="gelsd").solution.reshape(-1)[:2].tolist()
    beta = beta_scaled / scale
    if alpha < 0:
        alpha, beta = 0.0, float((n * w * w * t).sum() / (n * n * w * w).sum())
    if beta < 0:
        alpha, beta = float((w * w * t).sum() / (w * w).sum()), 0.0
    return AlphaBeta(alpha, beta)


def fit_alpha_beta_regimes(nbytes: Sequence[float], seconds: Sequence[float], *, small: int = 8192,
                           large: int = 2**21) -> AlphaBeta:
    """Fit t = alpha + n beta by regime: alpha = the median one-way time of messages <= `small` bytes
    (the latency regime), beta = the least-squares slope of the messages >= `large` bytes (the
    bandwidth regime); the sizes in between are not used.

    For a link shaped by a token bucket (Linux `tc tbf`, the testbed of docs/testbed.md), a message
    shorter than the bucket's burst leaves at the host's speed, not the link's, so a one-line fit
    through all sizes (`fit_alpha_beta`) bends beta towards the burst; back-to-back messages of a
    collective drain the bucket and see the asymptotic slope, which this fit keeps. Needs >= 1
    size <= small and >= 2 distinct sizes >= large; beta is clamped at 0.
    """
    pts = [(float(n), float(t)) for n, t in zip(nbytes, seconds, strict=True)]
    lat = sorted(t for n, t in pts if n <= small)
    big = [(n, t) for n, t in pts if n >= large]
    if not lat or len({n for n, _ in big}) < 2 or any(t <= 0 for _, t in pts):
        raise ValueError(f"fit_alpha_beta_regimes needs positive times, >= 1 size <= {small} B and >= 2 distinct "
                         f"sizes >= {large} B")
    m = len(lat)
    alpha = lat[m // 2] if m % 2 else 0.5 * (lat[m // 2 - 1] + lat[m // 2])
    mean_n = sum(n for n, _ in big) / len(big)
    mean_t = sum(t for _, t in big) / len(big)
    beta = sum((n - mean_n) * (t - mean_t) for n, t in big) / sum((n - mean_n) ** 2 for n, _ in big)
    return AlphaBeta(alpha, max(beta, 0.0))
