"""The collective interface: an SPMD program per rank, its result, and its cost model."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from ssgd.comm.ops import Op
from ssgd.compress.sparse import Sparse
from ssgd.perf.alphabeta import AlphaBeta

Payload = Tensor | Sparse          # what a rank contributes: dense float32 [d] or sparse entries


@dataclass(frozen=True)
class Reduced:
    """Result of one collective call on one rank.

    total: the SUM over ranks, dense float32 [d] or `Sparse` (distinct indices).
    P: number of ranks, so that `average()` = total / P.
    support: int64 indices of this rank's payload entries that count as sent (the global set of
    gTop-k), or None when the whole payload was sent. Error feedback keeps the rest.
    """

    total: Payload
    P: int
    support: Tensor | None = None

    def average(self) -> Tensor:
        """float32 [d]: the aggregated gradient, total / P."""
        if isinstance(self.total, Sparse):
            return self.total.to_dense(scale=self.P)
        return self.total / self.P


def accounted(payload: Payload, support: Tensor | None) -> Payload:
    """The part of `payload` that counts as sent: entries whose index is in `support`."""
    if support is None or not isinstance(payload, Sparse):
        return payload
    return payload.restrict(torch.isin(payload.idx, support))


Program = Generator[Op, Any, Reduced]


class Collective(ABC):
    """One aggregation algorithm, written once for every backend.

    `program(rank, P, payload)` is a generator: it yields `ssgd.comm.ops` operations, receives
    their results, and returns this rank's `Reduced`. It must not touch global state.
    """

    name: ClassVar[str]

    @abstractmethod
    def program(self, rank: int, P: int, payload: Payload) -> Program:
        ...

    @abstractmethod
    def model_seconds(self, net: AlphaBeta, P: int, d: int, counts: Sequence[int]) -> float:
        """Modelled time of one call on network `net`; counts[r] = entries rank r contributed."""
