"""A communication scheme and each rank's side of it: compensate -> compress -> collective -> residual.

A scheme (one `conf/compressor/*.yaml`) is a complete, valid triple: a local compressor, the
collective that aggregates its payloads, and the error-feedback memory, plus the density and its
per-epoch warm-up. The residual is updated AFTER the collective, because with gTop-k it depends on
which local entries reached the global set.

Two scheme-wide settings sit beside the triple (docs/compressors.md#wire-formats):
`compressor.wire.values` (fp32 | fp16 | bf16), the format the collective sends values in, and
`compressor.min_compression`, a minimum-compression rule like the `min_compression_rate` of PowerSGD
(Vogels, Karimireddy, Jaggi, NeurIPS 2019; torch.distributed's PowerSGD hook): when the sparse payload
of a d-vector at this density would save less than that factor over sending it dense (value bytes x d
against entry bytes x k), the vector goes dense, through a dense allreduce in the same wire format.
0 (the default) never does, which keeps the papers' semantics.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from hydra.utils import instantiate
from torch import Tensor

from omegaconf import OmegaConf

from ssgd.comm.base import Collective, Reduced
from ssgd.comm.collectives.dense import DenseAllreduce
from ssgd.comm.wire import FP32, WireFormat
from ssgd.compress.base import Compressor
from ssgd.compress.sparse import k_of
from ssgd.config import WIRE_VALUES, built, check_density, locate, parameters_of
from ssgd.errors import ConfigError
from ssgd.payload import Dense, Payload
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
    """Factories for one rank's compressor and memory, the shared collective, and the density.

    wire: the collective's value format; min_compression: the minimum-compression rule (module
    docstring; 0: off), with `dense`, the dense allreduce (same wire) a vector that goes dense takes.
    """

    name: str
    make_compressor: Callable[[int], Compressor]   # rank -> that rank's compressor
    make_memory: Callable[..., Memory]             # (d, device) -> a fresh memory
    collective: Collective
    density: DensitySchedule
    wire: WireFormat = FP32
    min_compression: float = 0.0
    dense: Collective | None = None

    def goes_dense(self, d: int, density: float) -> bool:
        """Whether a d-vector at `density` goes dense under the minimum-compression rule: sparse
        payloads of k = max(int(d * density), 1) entries would save less than `min_compression` over
        dense ones (value_bytes * d < min_compression * entry_bytes * k). Never for a dense scheme or
        with the rule off. The same on every rank (it depends on d and the density only)."""
        if self.dense is None or self.min_compression <= 0:
            return False
        wire = getattr(self.collective, "wire", self.wire)     # the collective's own (narrow indices)
        return wire.value_bytes * d < self.min_compression * wire.entry_bytes_for(d) * k_of(d, density)

    def collective_for(self, d: int, density: float) -> Collective:
        """The collective a d-vector at `density` goes through: `dense` when it `goes_dense`, else
        `collective`."""
        if self.goes_dense(d, density):
            assert self.dense is not None
            return self.dense
        return self.collective

    @classmethod
    def from_config(cls, c: Any, seed: int) -> "Scheme":
        """The scheme of a `compressor:` node (conf/compressor/<name>.yaml); rank r's compressor draws from
        the (seed, r, "compressor") stream. A bad value is a one-line ConfigError naming its key."""
        make_compress = built("compressor.compress", lambda: instantiate(c.compress), c.compress)
        make_memory = built("compressor.memory", lambda: instantiate(c.memory), c.memory)
        wire, min_compression = wire_of(c)
        extra = {"values": wire.values} if wire.lossy else {}
        collective = built("compressor.collective", lambda: instantiate(c.collective, **extra), c.collective)
        density = built("compressor", lambda: DensitySchedule(c.density, tuple(c.density_warmup or ())), c)
        dense = None if isinstance(collective, DenseAllreduce) else DenseAllreduce(wire.values)

        def make_compressor(rank: int) -> Compressor:
            return make_compress(generator=rank_generator(seed, rank, "compressor"))

        built("compressor.compress", lambda: make_compressor(0), c.compress)     # the constructor's own checks
        return cls(name=c.name, make_compressor=make_compressor,
                   make_memory=lambda d, device="cpu": make_memory(d=d, device=device),
                   collective=collective, density=density, wire=wire, min_compression=min_compression,
                   dense=dense)


def wire_of(c: Any) -> tuple[WireFormat, float]:
    """(wire format, min_compression) of a `compressor:` node; a file without `wire` or
    `min_compression` (e.g. loaded without the schema, as `ssgd.ddp` does) gets fp32 and 0. ConfigError
    naming the key for a value outside the allowed ones, for `compressor.collective.values` (the key is
    `compressor.wire.values`), or for 16-bit values with a collective that takes no `values`."""
    values = str(OmegaConf.select(c, "wire.values", default="fp32"))
    if values not in WIRE_VALUES:
        raise ConfigError(f"compressor.wire.values={values!r}: allowed: {', '.join(WIRE_VALUES)}")
    rule = OmegaConf.select(c, "min_compression", default=0.0)
    if isinstance(rule, bool) or not isinstance(rule, (int, float)) or not 0 <= rule < float("inf"):
        raise ConfigError(f"compressor.min_compression={rule!r}: must be a finite number >= 0 (0: off)")
    if OmegaConf.select(c, "collective.values") is not None:
        raise ConfigError("compressor.collective.values: set compressor.wire.values instead (one key for the "
                          "scheme's wire format)")
    if values != "fp32":
        target = str(c.collective._target_)
        if "values" not in parameters_of(locate(target, "compressor.collective"))[0]:
            raise ConfigError(f"compressor.wire.values={values}: {target} has no 16-bit wire format (it takes "
                              "no `values`); allowed with it: fp32")
    return WireFormat(values), float(rule)


class RankSync:
    """One rank's compressor and error-feedback memory: `compress` (compensate, then compress) before the
    collective, `settle` after it. Used alike by the trainer's replicas, the DDP hook and the tests.

    `parts`: the shapes of the gradient's parts (the trainable parameters, in order), when the gradient
    comes as parts (a replica's autograd output) rather than as one flat tensor (a DDP bucket).
    """

    def __init__(self, scheme: Scheme, rank: int, d: int, device: torch.device | str = "cpu",
                 parts: Sequence[torch.Size] = ()) -> None:
        self.scheme = scheme
        self.compressor = scheme.make_compressor(rank)
        self.memory = scheme.make_memory(d, device)
        self.u: Tensor | None = None
        self.views: list[Tensor] = []
        if parts:
            self.u = self.memory.buffer(d, device)
            sizes = [s.numel() for s in parts]
            self.views = [v.view(s) for v, s in zip(self.u.split(sizes), parts)]

    def compress(self, grad: Tensor | Sequence[Tensor | None], density: float) -> tuple[Tensor, Payload]:
        """u = g + e, and its payload, as the scheme's collective for (d, density) sends it
        (`Scheme.collective_for`): the compressor's payload, or `Dense(u)` when the vector goes dense
        under the minimum-compression rule, encoded in the wire format (`Collective.encode`).

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
        collective = self.scheme.collective_for(u.numel(), density)
        if collective is self.scheme.collective:
            return u, collective.encode(self.compressor.compress(u, density))
        return u, collective.encode(Dense(u))

    def settle(self, payload: Payload, reduced: Reduced) -> None:
        """After the collective: e = u - (part of payload that counted as sent)."""
        self.memory.update(reduced.sent(payload))


def counts_of(payloads: Sequence[Payload]) -> list[int]:
    """Entries each payload carries (d for a dense one), as `Collective.model_seconds` takes them."""
    return [p.count for p in payloads]
