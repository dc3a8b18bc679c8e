"""A communication scheme and each rank's side of it: compensate -> compress -> collective -> residual.

A scheme (one `conf/compressor/*.yaml`) is a complete, valid triple: a local compressor, the
collective that aggregates its payloads, and the error-feedback memory, plus the density and its
per-epoch warm-up. The residual is updated AFTER the collective, because with gTop-k it depends on
which local entries reached the global set.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ssgd.comm.base import Collective, Reduced
from ssgd.compress.base import Compressor
from ssgd.compress.memory import NoMemory, ResidualMemory
from ssgd.payload import Payload

Memory = NoMemory | ResidualMemory


@dataclass(frozen=True)
class DensitySchedule:
    """density(epoch) = warmup[epoch] while epoch < len(warmup), else `density`.

    The released code hard-codes warmup = [0.004] (hclhkbu/gtopkssgd, `_dynamic_densities`) and
    [0.015625, 0.004, 0.001] (hclhkbu/GaussianK-SGD); here they are configuration values.
    """

    density: float
    warmup: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        for key, value in [("density", self.density)] + [(f"warmup[{i}]", v) for i, v in enumerate(self.warmup)]:
            if not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
                raise ValueError(f"{key}={value!r}: must be a number in (0, 1]")

    def __call__(self, epoch: int) -> float:
        return self.warmup[epoch] if epoch < len(self.warmup) else self.density


@dataclass(frozen=True)
class Scheme:
    """Factories for one rank's compressor and memory, the shared collective, and the density."""

    name: str
    make_compressor: Callable[[int], Compressor]   # rank -> that rank's compressor
    make_memory: Callable[..., Memory]             # (d, device) -> a fresh memory
    collective: Collective
    density: DensitySchedule


class RankSync:
    """One rank's compressor and error-feedback memory."""

    def __init__(self, scheme: Scheme, rank: int, d: int, device: torch.device | str = "cpu") -> None:
        self.compressor = scheme.make_compressor(rank)
        self.memory = scheme.make_memory(d, device)

    def compress(self, grad: Tensor, density: float) -> tuple[Tensor, Payload]:
        """u = g + e, and its payload. `grad` may be overwritten (it may become u); u aliases the
        memory's buffer (or `grad`), so it is valid only until `settle`."""
        u = self.memory.compensate(grad)
        return u, self.compressor.compress(u, density)

    def compress_compensated(self, u: Tensor, density: float) -> Payload:
        """The payload of u, when the gradient was written through `memory.gradient_buffer` (so u
        already is g + e)."""
        return self.compressor.compress(u, density)

    def settle(self, payload: Payload, reduced: Reduced) -> None:
        """After the collective: e = u - (part of payload that counted as sent)."""
        self.memory.update(reduced.sent(payload))


def counts_of(payloads: Sequence[Payload]) -> list[int]:
    """Entries each payload carries (d for a dense one), as `Collective.model_seconds` takes them."""
    return [p.count for p in payloads]
