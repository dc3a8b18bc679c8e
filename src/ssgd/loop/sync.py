"""A communication scheme and each rank's side of it: compensate -> compress -> collective -> residual.

A scheme (one `conf/compressor/*.yaml`) is a complete, valid triple: a local compressor, the
collective that aggregates its payloads, and the error-feedback memory, plus the density and its
per-epoch warm-up. The residual is updated AFTER the collective, because with gTop-k it depends on
which local entries reached the global set.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from hydra.utils import instantiate
from torch import Tensor

from ssgd.comm.base import Collective, Reduced
from ssgd.compress.base import Compressor
from ssgd.config import built, check_density
from ssgd.payload import Payload
from ssgd.utils.seeding import rank_generator


class Memory(Protocol):
    """Error-feedback memory of one rank (`ssgd.compress.memory`: NoMemory, ResidualMemory, or your own).

    A step forms u = g + e in one of two ways: `compensate(flat g)` returns u (it may overwrite and
    return g), or the gradient's parts are written with `write(view, part)` into views of
    `buffer(d, device)`, which then holds u. After the collective, `update(sent)` makes the residual
    u - sent. Nobody reads u after `update`.
    """

    def buffer(self, d: int, device: torch.device | str = "cpu") -> Tensor: ...
    def write(self, view: Tensor, part: Tensor | None) -> None: ...
    def compensate(self, grad: Tensor) -> Tensor: ...
    def update(self, sent: Payload) -> None: ...
    def norm(self) -> float: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


@dataclass(frozen=True)
class DensitySchedule:
    """density(epoch) = warmup[epoch] while epoch < len(warmup), else `density`.

    The released code hard-codes warmup = [0.004] (hclhkbu/gtopkssgd, `_dynamic_densities`) and
    [0.015625, 0.004, 0.001] (hclhkbu/GaussianK-SGD); here they are configuration values.
    """

    density: float
    warmup: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        check_density(self.density, "density")
        for i, v in enumerate(self.warmup):
            check_density(v, f"warmup[{i}]")

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

    @classmethod
    def from_config(cls, c: Any, seed: int) -> "Scheme":
        """The scheme of a `compressor:` node (conf/compressor/<name>.yaml); rank r's compressor draws from
        the (seed, r, "compressor") stream. A bad value is a one-line ConfigError naming its key."""
        make_compress = built("compressor.compress", lambda: instantiate(c.compress), c.compress)
        make_memory = built("compressor.memory", lambda: instantiate(c.memory), c.memory)
        collective = built("compressor.collective", lambda: instantiate(c.collective), c.collective)
        density = built("compressor", lambda: DensitySchedule(c.density, tuple(c.density_warmup or ())), c)

        def make_compressor(rank: int) -> Compressor:
            return make_compress(generator=rank_generator(seed, rank, "compressor"))

        built("compressor.compress", lambda: make_compressor(0), c.compress)     # the constructor's own checks
        return cls(name=c.name, make_compressor=make_compressor,
                   make_memory=lambda d, device="cpu": make_memory(d=d, device=device),
                   collective=collective, density=density)


class RankSync:
    """One rank's compressor and error-feedback memory: `compress` (compensate, then compress) before the
    collective, `settle` after it. Used alike by the trainer's replicas, the DDP hook and the tests.

    `parts`: the shapes of the gradient's parts (the trainable parameters, in order), when the gradient
    comes as parts (a replica's autograd output) rather than as one flat tensor (a DDP bucket).
    """

    def __init__(self, scheme: Scheme, rank: int, d: int, device: torch.device | str = "cpu",
                 parts: Sequence[torch.Size] = ()) -> None:
        self.compressor = scheme.make_compressor(rank)
        self.memory = scheme.make_memory(d, device)
        self.u: Tensor | None = None
        self.views: list[Tensor] = []
        if parts:
            self.u = self.memory.buffer(d, device)
            sizes = [s.numel() for s in parts]
            self.views = [v.view(s) for v, s in zip(self.u.split(sizes), parts)]

    def compress(self, grad: Tensor | Sequence[Tensor | None], density: float) -> tuple[Tensor, Payload]:
        """u = g + e, and its payload.

        `grad`: the flat float32 [d] gradient (it may be overwritten: it may become u), or its parts in
        the order of `parts` (None: a part with no gradient, zero). u aliases the memory's buffer (or
        `grad`), so it is valid only until `settle`."""
        if isinstance(grad, Tensor):
            u = self.memory.compensate(grad)
        else:
            if self.u is None or len(grad) != len(self.views):
                raise ValueError(f"{len(grad)} gradient parts for a RankSync made with {len(self.views)} parts")
            for view, part in zip(self.views, grad):
                self.memory.write(view, part)
            u = self.u
        return u, self.compressor.compress(u, density)

    def settle(self, payload: Payload, reduced: Reduced) -> None:
        """After the collective: e = u - (part of payload that counted as sent)."""
        self.memory.update(reduced.sent(payload))


def counts_of(payloads: Sequence[Payload]) -> list[int]:
    """Entries each payload carries (d for a dense one), as `Collective.model_seconds` takes them."""
    return [p.count for p in payloads]
