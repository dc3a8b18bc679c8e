"""The collective interface: an SPMD program per rank, its result, and its cost model.

A collective is written once, as a generator of the operations in `ssgd.comm.ops`; executors
(`ssgd.comm.executors.thread` for all ranks in this process, `ssgd.comm.executors.mpi` and
`ssgd.comm.executors.torch_dist` for one rank per process) only say how each operation runs, and
`ssgd.comm.driver` steps a program. See docs/collectives.md.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor

from ssgd.comm.ops import Op
from ssgd.comm.wire import FP32, WireFormat
from ssgd.payload import Payload, Sparse
from ssgd.perf.alphabeta import AlphaBeta


@dataclass(frozen=True)
class Reduced:
    """Result of one collective call on one rank.

    total: the SUM over ranks, as a payload (`Dense`, or `Sparse` with distinct indices).
    P: number of ranks, so that `average()` = total / P.
    support: int64 indices of this rank's payload entries that count as sent (the global set of
    gTop-k), or None when the whole payload was sent. Error feedback keeps the rest.
    """

    total: Payload
    P: int
    support: Tensor | None = None

    def average(self, out: Tensor | None = None) -> Tensor:
        """float32 [d]: the aggregated gradient, total / P (written into `out` when given)."""
        return self.total.to_dense(scale=self.P, out=out)

    def sent(self, payload: Payload, marks: Tensor | None = None) -> Payload:
        """The part of this rank's `payload` that counts as sent: its entries at `support`. `marks`: a
        rank's scratch flags for a `Sparse` payload (`ssgd.payload.member_of`); other kinds ignore it."""
        if marks is not None and isinstance(payload, Sparse):
            return payload.restrict(self.support, marks)
        return payload.restrict(self.support)


Program = Generator[Op, Any, Reduced]


class Collective(ABC):
    """One aggregation algorithm, written once for every backend.

    `program(rank, P, payload)` is a generator: it yields `ssgd.comm.ops` operations, receives
    their results, and returns this rank's `Reduced`. It must not touch global state.
    `max_numel`: the largest d its wire format carries (None: no limit); see `check_numel`.
    `wire`: the format of the values (fp32 unless the constructor takes `values`); `encode` rounds a
    payload to it before the program runs.
    """

    name: ClassVar[str]
    max_numel: ClassVar[int | None] = None
    wire: WireFormat = FP32       # how payload values travel (`ssgd.comm.wire`); set by a constructor

    def encode(self, payload: Payload) -> Payload:
        """The payload this collective sends for `payload`: its values rounded to the wire format
        (`WireFormat.encode`; fp32: `payload` itself). `ssgd.loop.sync.RankCompression.compress` calls it, so
        that the residual keeps what the wire rounded away."""
        return self.wire.encode(payload)

    @abstractmethod
    def program(self, rank: int, P: int, payload: Payload) -> Program:
        ...

    @abstractmethod
    def model_seconds(self, net: AlphaBeta, P: int, d: int, counts: Sequence[int]) -> float:
        """Modelled time of one call on network `net`; counts[r] = entries rank r contributed."""

    def fresh(self) -> Collective:
        """An instance for another stream of calls (another DDP bucket): this one, unless the collective keeps
        state between calls (`state_dict`), which one stream's calls must not share with another's."""
        return self

    def state_dict(self, rank: int) -> dict:
        """What rank `rank`'s programs keep between calls, as a checkpoint saves it ({}: nothing, the default)."""
        return {}

    def load_state_dict(self, rank: int, state: dict) -> None:
        """Restore rank `rank`'s state from `state_dict(rank)`'s output."""

    def check_numel(self, d: int) -> None:
        """ValueError (one line) when a model of d parameters cannot go through this collective, so
        that a configuration layer can refuse it before training."""
        if self.max_numel is not None and d > self.max_numel:
            raise ValueError(f"{self.name}: a model of d={d:,} parameters exceeds {self.max_numel:,}, the largest "
                             "vector this collective's wire format carries")
