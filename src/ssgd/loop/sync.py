"""One S-SGD sync step: compensate -> compress -> collective -> decode -> settle.

A scheme (`Scheme`, built from one `conf/compressor/*.yaml` by `ssgd.scheme_config`) is a complete,
valid triple: a local compressor, the collective that aggregates its payloads, and the error-feedback
memory, plus the density and its per-epoch warm-up. `RankCompression` is one rank's side of it (its
compressor and memory): u = g + e and its payload before the collective, the residual after it. The
residual is updated AFTER the collective, because with gTop-k it depends on which local entries reached
the global set. `SyncStep` runs the whole step for every local rank of a world in one call.

Two scheme-wide settings sit beside the triple (docs/compressors.md#wire-formats): the wire format the
collective sends values in (fp32 | fp16 | bf16), and a minimum-compression rule like the
`min_compression_rate` of PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019; torch.distributed's
PowerSGD hook): when the sparse payload of a d-vector at this density would save less than that factor
over sending it dense (value bytes x d against entry bytes x k), the vector goes dense, through a dense
allreduce in the same wire format. 0 (the default) never does, which keeps the papers' semantics.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import torch
from torch import Tensor, nn

from ssgd.comm.base import Collective, Reduced
from ssgd.comm.ops import RankLog
from ssgd.comm.wire import FP32, WireFormat
from ssgd.compress.base import Compressor
from ssgd.compress.sparse import k_of
from ssgd.config import check_density
from ssgd.loop.decode import ParamGrads
from ssgd.payload import Dense, Payload
from ssgd.worlds.base import World

T = TypeVar("T")


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


class RankCompression:
    """One rank's compressor and error-feedback memory: `compress` (compensate, then compress) before the
    collective, `settle` after it. Used alike by `SyncStep`, the DDP hook (`ssgd.ddp`) and the tests.

    `parts`: the shapes of the gradient's parts (the trainable parameters, in order), when the gradient
    comes as parts (a replica's autograd output) rather than as one flat tensor (a DDP bucket).
    """

    def __init__(self, scheme: Scheme, rank: int, d: int, device: torch.device | str = "cpu",
                 parts: Sequence[torch.Size] = ()) -> None:
        self.scheme, self.d, self.rank = scheme, d, rank
        self.compressor = scheme.make_compressor(rank)
        self.memory = scheme.make_memory(d, device)
        self.u: Tensor | None = None
        self.views: list[Tensor] = []
        self._marks: Tensor | None = None       # settle's scratch flags, all False between calls
        if parts:
            self.u = self.memory.buffer(d, device)
            sizes = [s.numel() for s in parts]
            self.views = [v.view(s) for v, s in zip(self.u.split(sizes), parts)]

    def compress(self, grad: Tensor | Sequence[Tensor | None], density: float,
                 collective: Collective | None = None) -> tuple[Tensor, Payload]:
        """u = g + e, and its payload as `collective` sends it: `Dense(u)` for the scheme's dense collective
        (a vector that goes dense under the minimum-compression rule), else the compressor's payload,
        encoded in the wire format (`Collective.encode`). `collective`: the step's
        `Scheme.collective_for(d, density)`, which the caller asks once per step (None: asked here).

        `grad`: the flat float32 [d] gradient (it may be overwritten: it may become u), or its parts in
        the order of `parts` (None: a part with no gradient, zero). u aliases the memory's buffer (or
        `grad`), so it is valid only until `settle`."""
        if isinstance(grad, Tensor):
            u = self.memory.compensate(grad)
        else:
            if self.u is None or len(grad) != len(self.views):
                raise ValueError(f"{len(grad)} gradient parts for a RankCompression made with {len(self.views)} parts")
            for view, part in zip(self.views, grad):
                self.memory.write(view, part)
            u = self.u
        if collective is None:
            collective = self.scheme.collective_for(u.numel(), density)
        if collective is self.scheme.dense:
            return u, collective.encode(Dense(u))
        return u, collective.encode(self.compressor.compress(u, density))

    def settle(self, payload: Payload, reduced: Reduced) -> None:
        """After the collective: e = u - (part of payload that counted as sent). A result with a support
        (gTop-k's global set) is intersected with the payload by marking (`ssgd.payload.member_of`) in
        this rank's d flags, made at the first such call."""
        if reduced.support is None:
            self.memory.update(reduced.sent(payload))
            return
        if self._marks is None:
            self._marks = torch.zeros(self.d, dtype=torch.bool, device=reduced.support.device)
        self.memory.update(reduced.sent(payload, self._marks))

    def state_dict(self) -> dict:
        """The residual's and the compressor's state (its random stream), and this rank's state in the scheme's
        collective when it keeps one (Ok-Topk's thresholds), as a checkpoint keeps them."""
        state = {"memory": self.memory.state_dict(), "compressor": self.compressor.state_dict()}
        collective = self.scheme.collective.state_dict(self.rank)
        return state | ({"collective": collective} if collective else {})

    def load_state_dict(self, state: dict) -> None:
        self.memory.load_state_dict(state["memory"])
        self.compressor.load_state_dict(state["compressor"])
        if "collective" in state:
            self.scheme.collective.load_state_dict(self.rank, state["collective"])


Backward = Callable[[int], tuple[Sequence[Tensor | None], T]]
"""rank -> that rank's gradient parts (in the order of the parameters) and whatever else it reports."""
Observer = Callable[[list[Tensor], list[Payload], list[Reduced], Tensor], None]
"""(each local rank's u, its payload, its result, the averaged gradient), between decode and settle."""


@dataclass(frozen=True)
class Synced(Generic[T]):
    """What one `SyncStep` call did; lists are in local-rank order."""

    local: list[T]              # what each rank's backward reported besides its gradient
    payloads: list[Payload]     # what each rank sent (`Payload.count` entries)
    logs: list[RankLog]         # each rank's messages, bytes, staging and own seconds in the collective
    collective: Collective      # the step's collective (`Scheme.collective_for`, asked once)
    compress_s: list[float]     # each rank's compensate + compress, plus its residual update after the collective
    compute_phase_s: float      # wall seconds of every local rank's backward and compression (`World.map`)
    comm_s: float               # wall seconds of the collective
    decode_settle_s: float      # wall seconds of the decode and the residual updates (the observer's excluded)


@dataclass(frozen=True)
class _Compressed(Generic[T]):
    out: T
    u: Tensor                   # g + e (aliases a buffer: valid until settle)
    payload: Payload
    compress_s: float


class SyncStep:
    """compensate -> compress -> collective -> decode -> settle for every local rank of `world`, in one call.

    Holds each local rank's `RankCompression` (`ranks`) and the parameters' .grad as views of one decoded
    buffer (`grads`, `ssgd.loop.decode.ParamGrads`). A call asks `Scheme.collective_for` once, runs every
    local rank's backward and compression in the world's compute phase (`World.map`), the collective once
    (`World.collective`), decodes the first local rank's result into the .grad (every rank's result has
    the same total), calls the observer, then updates each rank's residual in rank order: the S-SGD step
    with error feedback, for any scheme (its gTop-k instance: Shi et al., "A Distributed Synchronous SGD
    Algorithm with Global Top-k Sparsification for Low Bandwidth Networks", ICDCS 2019, arXiv:1901.04359,
    Algorithm 3)."""

    def __init__(self, scheme: Scheme, world: World, params: Sequence[nn.Parameter]) -> None:
        self.scheme, self.world = scheme, world
        self.d = sum(p.numel() for p in params)
        device = params[0].device
        self.ranks = {r: RankCompression(scheme, r, self.d, device, [p.shape for p in params])
                      for r in world.local_ranks}
        self.grads = ParamGrads(list(params))

    def __call__(self, density: float, backward: Backward[T], observe: Observer | None = None) -> Synced[T]:
        """One step at `density`: `backward(rank)` gives each local rank's gradient parts."""
        collective = self.scheme.collective_for(self.d, density)
        t0 = time.perf_counter()
        local = self.world.map(lambda r: self._compress(r, backward, collective, density))
        t1 = time.perf_counter()
        payloads = [c.payload for c in local]
        results, logs = self.world.collective(collective, payloads)
        t2 = time.perf_counter()
        aggregated = self.grads.set(results[0])        # the .grad are views of it
        observe_s = 0.0
        if observe is not None:
            start = time.perf_counter()
            observe([c.u for c in local], payloads, results, aggregated)
            observe_s = time.perf_counter() - start
        settle_s = [self._settle(r, p, res) for r, p, res in zip(self.world.local_ranks, payloads, results)]
        t3 = time.perf_counter()
        return Synced([c.out for c in local], payloads, logs, collective,
                      [c.compress_s + s for c, s in zip(local, settle_s)], t1 - t0, t2 - t1, t3 - t2 - observe_s)

    def _compress(self, rank: int, backward: Backward[T], collective: Collective, density: float) -> _Compressed[T]:
        grads, out = backward(rank)
        start = time.perf_counter()
        u, payload = self.ranks[rank].compress(grads, density, collective)
        if u.is_cuda:
            torch.cuda.synchronize(u.device)              # so that compress_s covers the selection
        return _Compressed(out, u, payload, time.perf_counter() - start)

    def _settle(self, rank: int, payload: Payload, reduced: Reduced) -> float:
        start = time.perf_counter()
        self.ranks[rank].settle(payload, reduced)
        return time.perf_counter() - start

    def residual_norm(self) -> float:
        """||e|| of this process's first local rank (rank 0's in the process that writes outputs)."""
        return self.ranks[self.world.local_ranks[0]].memory.norm()


def counts_of(payloads: Sequence[Payload]) -> list[int]:
    """Entries each payload carries (d for a dense one), as `Collective.model_seconds` takes them."""
    return [p.count for p in payloads]
