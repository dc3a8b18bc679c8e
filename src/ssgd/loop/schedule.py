"""Learning-rate schedule of the released gTop-k and GaussianK-SGD trainers: linear warm-up, then
multi-step decay (hclhkbu/gtopkssgd and hclhkbu/GaussianK-SGD, `dl_trainer.py`)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from ssgd.errors import BadArgument


@dataclass(frozen=True)
class LRSchedule:
    """lr(t) for t = fractional epoch.

    Warm-up: linear from `warmup_start` to `lr` over `warmup_epochs`; `warmup_start` None means
    lr / world_size, as the gTop-k code (10 epochs from lr / P). Then lr * gamma^(number of milestones
    <= t) (CIFAR: 81, 122, 155 with gamma 0.1). Every value the schedule can take is finite and >= 0 (> 0
    after the warm-up), or the constructor raises ValueError naming the parameter (`conf/schedule/multistep.yaml`).
    """

    lr: float
    world_size: int = 1
    warmup_epochs: float = 0.0
    warmup_start: float | None = None
    milestones: Sequence[float] = ()
    gamma: float = 0.1

    def __post_init__(self) -> None:
        object.__setattr__(self, "milestones", tuple(self.milestones))
        if not _positive(self.lr):
            raise BadArgument("lr", self.lr, "must be a finite number > 0")
        if isinstance(self.world_size, bool) or not isinstance(self.world_size, int) or self.world_size < 1:
            raise BadArgument("world_size", self.world_size, "must be an integer >= 1")
        if not (_finite(self.warmup_epochs) and self.warmup_epochs >= 0):
            raise BadArgument("warmup_epochs", self.warmup_epochs, "must be a finite number >= 0")
        if self.warmup_start is not None and not (_finite(self.warmup_start) and self.warmup_start >= 0):
            raise BadArgument("warmup_start", self.warmup_start, "must be null (lr / world_size) or a finite "
                              "number >= 0")
        if not all(_finite(m) for m in self.milestones):
            raise BadArgument("milestones", list(self.milestones), "must be finite epochs")
        if not _positive(self.gamma):
            raise BadArgument("gamma", self.gamma, "must be a finite number > 0")
        try:
            values = [self.lr * self.gamma ** n for n in range(len(self.milestones) + 1)]
        except OverflowError:
            values = [math.inf]
        if not all(_positive(v) for v in values):
            raise BadArgument("gamma", self.gamma, f"lr * gamma^n leaves the finite positive numbers over "
                              f"{len(self.milestones)} milestones")

    @property
    def start(self) -> float:
        """The learning rate at t = 0 of the warm-up."""
        return self.lr / self.world_size if self.warmup_start is None else self.warmup_start

    def __call__(self, t: float) -> float:
        if t < self.warmup_epochs:
            return self.start + (self.lr - self.start) * t / self.warmup_epochs
        return self.lr * self.gamma ** sum(1 for m in self.milestones if t >= m)


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _positive(x: object) -> bool:
    return _finite(x) and x > 0  # type: ignore[operator]
