"""Learning-rate schedule of the released gTop-k / GaussianK-SGD trainers (papers.md 6.1)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ssgd.errors import ConfigError


@dataclass(frozen=True)
class LRSchedule:
    """lr(t) for t = fractional epoch.

    Warm-up: linear from `warmup_start` to `lr` over `warmup_epochs` (the gTop-k code: 10 epochs
    from lr/P). Then lr * gamma^(number of milestones <= t) (CIFAR: 81/122/155, gamma 0.1).
    """

    lr: float
    warmup_epochs: float = 0.0
    warmup_start: float = 0.0
    milestones: Sequence[float] = ()
    gamma: float = 0.1

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise ConfigError(f"optimizer.lr={self.lr!r}: must be > 0")
        if self.warmup_epochs < 0:
            raise ConfigError(f"schedule.warmup_epochs={self.warmup_epochs!r}: must be >= 0")
        if not self.gamma > 0:
            raise ConfigError(f"schedule.gamma={self.gamma!r}: must be > 0")

    def __call__(self, t: float) -> float:
        if t < self.warmup_epochs:
            return self.warmup_start + (self.lr - self.warmup_start) * t / self.warmup_epochs
        return self.lr * self.gamma ** sum(1 for m in self.milestones if t >= m)
