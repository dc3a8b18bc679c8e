"""The alpha-beta (Hockney) model of one network link."""
from __future__ import annotations

from dataclasses import dataclass

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
