"""Dense S-SGD aggregation: allreduce of the whole gradient.

`values="fp32"` (default): one `Allreduce` of the float32 [d] payload, summed by the backend.
`values="fp16"|"bf16"` (scheme dense16, the half-precision baseline the sparse schemes should beat;
`compressor.wire.values`, `ssgd.comm.wire`): a ring allreduce written here with Send / Recv of 2-byte
elements, so every backend sends exactly 2 bytes per element and gives the same bits. It is the schedule
of `ssgd.perf.cost.allreduce_sent` (reduce-scatter, then allgather; chunks as `torch.tensor_split`): in
reduce-scatter step s rank r sends chunk (r - s) mod P to rank r + 1 and adds the chunk it receives from
rank r - 1 into its own copy, in float32, rounding the partial sum to 16 bits again; after P - 1 steps it
holds the sum of chunk r + 1, which the allgather passes round the ring. Even ranks send before they
receive, odd ranks receive first, so blocking sends (MPI's, the in-process executor's) never deadlock.
Each rank's own values are rounded once, by `encode` (its residual keeps that rounding, when the scheme
has error feedback); the rounding of partial sums belongs to no rank's payload and is lost, as in any
16-bit allreduce.
"""
from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import torch
from torch import Tensor

from ssgd.comm.base import Collective, Program, Reduced
from ssgd.comm.ops import Allreduce, Op, Recv, Send
from ssgd.comm.wire import WireFormat
from ssgd.payload import Dense, Payload
from ssgd.perf import cost
from ssgd.perf.alphabeta import AlphaBeta

TAG_RING = 19


class DenseAllreduce(Collective):
    """Sum the ranks' payloads as dense [d] vectors (ring allreduce model), then average.

    Made for `Dense` payloads (compressor=dense: `to_dense()` is the payload's own tensor, no copy);
    any other payload is summed in its dense form and counts as sent whole. values: the wire format,
    "fp32" (default), "fp16" or "bf16" (module docstring); with 16-bit values the payload must be a
    `Dense` that `encode` made.
    """

    name = "dense_allreduce"

    def __init__(self, values: str = "fp32") -> None:
        self.wire = WireFormat(values)

    def program(self, rank: int, P: int, payload: Payload) -> Program:
        if self.wire.lossy:
            if not isinstance(payload, Dense):
                raise TypeError(f"DenseAllreduce(values={self.wire.values}) needs a Dense payload")
            self.wire.check(payload.values, "DenseAllreduce")
            return Reduced(Dense((yield from ring_allreduce(rank, P, payload.values))), P)
        total = yield Allreduce(payload.to_dense())
        return Reduced(Dense(total), P)

    def model_seconds(self, net: AlphaBeta, P: int, d: int, counts: Sequence[int]) -> float:
        if self.wire.lossy:
            return cost.dense16_seconds(net, P, d)
        return cost.dense_seconds(net, P, d)


def ring_allreduce(rank: int, P: int, x: Tensor) -> Generator[Op, Any, Tensor]:
    """This rank's part of the ring allreduce of the 16-bit vectors x (module docstring): returns the
    sum as float32 [d] (a new tensor), the 16-bit result every rank holds, widened."""
    buf = x.clone()
    if P == 1:
        return buf.float()
    chunks = buf.tensor_split(P)
    right, left = (rank + 1) % P, (rank - 1) % P
    scratch = torch.empty(max(c.numel() for c in chunks), dtype=x.dtype, device=x.device)

    def exchange(send: Tensor, recv: Tensor) -> Generator[Op, Any, None]:
        out, into = Send(right, send.view(torch.uint8), TAG_RING), Recv(left, recv.view(torch.uint8), TAG_RING)
        for op in ((out, into) if rank % 2 == 0 else (into, out)):
            yield op

    for s in range(P - 1):                                          # reduce-scatter
        mine, theirs = chunks[(rank - s) % P], chunks[(rank - s - 1) % P]
        got = scratch[:theirs.numel()]
        yield from exchange(mine, got)
        theirs.copy_(got.float().add_(theirs.float()))              # float32 sum, rounded to 16 bits
    for s in range(P - 1):                                          # allgather
        yield from exchange(chunks[(rank + 1 - s) % P], chunks[(rank - s) % P])
    return buf.float()
