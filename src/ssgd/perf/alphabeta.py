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
