"""Dense S-SGD aggregation: allreduce of the whole gradient."""
from __future__ import annotations

from collections.abc import Sequence

from ssgd.comm.base import Collective, Program, Reduced
from ssgd.comm.ops import Allreduce
from ssgd.payload import Dense, Payload
from ssgd.perf import cost
from ssgd.perf.alphabeta import AlphaBeta


class DenseAllreduce(Collective):
    """Sum the ranks' payloads as dense float32 [d] vectors (ring allreduce model), then average.

    Made for `Dense` payloads (compressor=dense: `to_dense()` is the payload's own tensor, no copy);
    any other payload is summed in its dense form and counts as sent whole.
    """

    name = "dense_allreduce"

    def program(self, rank: int, P: int, payload: Payload) -> Program:
        total = yield Allreduce(payload.to_dense())
        return Reduced(Dense(total), P)

    def model_seconds(self, net: AlphaBeta, P: int, d: int, counts: Sequence[int]) -> float:
        return cost.dense_seconds(net, P, d)
