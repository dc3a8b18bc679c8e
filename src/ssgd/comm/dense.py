"""Dense S-SGD aggregation: allreduce of the whole gradient."""
from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from ssgd.comm.base import Collective, Program, Reduced
from ssgd.comm.ops import Allreduce
from ssgd.perf import cost
from ssgd.perf.alphabeta import AlphaBeta


class DenseAllreduce(Collective):
    """Sum the dense float32 [d] gradients of all ranks (ring allreduce model), then average."""

    name = "dense_allreduce"

    def program(self, rank: int, P: int, payload: Tensor) -> Program:  # type: ignore[override]
        if not isinstance(payload, Tensor):
            raise TypeError("DenseAllreduce needs a dense tensor payload (use compressor=dense)")
        total = yield Allreduce(payload)
        return Reduced(total, P)

    def model_seconds(self, net: AlphaBeta, P: int, d: int, counts: Sequence[int]) -> float:
        return cost.dense_seconds(net, P, d)
