"""Reduce-scatters: the sum of every rank's d-vector, rank j keeping its region [j d / P, (j + 1) d / P).

The seam of sharded training (`ssgd.fsdp`: FSDP2's gradient reduce-scatter) and the first phase of Ok-Topk
(Li and Hoefler, PPoPP 2022) with the regions fixed to the shards. Two programs, both rotated exchanges (step s:
send to rank r + s, receive from rank r - s; `ssgd.comm.collectives.oktopk.split_reduce`), summing each region in
rank order, so every executor gives the same bits:

  * `SparseReduceScatter`: each rank's sparse payload; its entries of region j go to rank j (a count, then the
    packed entries). Result: this rank's region as a Sparse (global indices); all of its payload counts as sent.
  * `DenseReduceScatter`: each rank's dense vector, its values on the wire in `values` (fp32, or fp16 / bf16
    rounded once by `encode`), summed in float32. Result: this rank's region as a Dense of d / P elements.

d must be a multiple of P (FSDP pads its reduce-scatter input so).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ssgd.comm.base import Collective, Program, Reduced
from ssgd.comm.collectives.oktopk import cycle_position, split_reduce
from ssgd.comm.ops import Recv, Send
from ssgd.comm.wire import MAX_NUMEL, WireFormat
from ssgd.payload import Dense, Payload, Sparse
from ssgd.perf.alphabeta import AlphaBeta


def shard_bounds(d: int, P: int) -> Tensor:
    """int64 [P + 1]: region j is [j d / P, (j + 1) d / P); ValueError unless P divides d."""
    if d % P:
        raise ValueError(f"a reduce-scatter of d={d} over P={P} ranks needs P to divide d")
    return torch.arange(P + 1, dtype=torch.int64) * (d // P)


class SparseReduceScatter(Collective):
    """Sum of the ranks' sparse payloads, rank j keeping region j (module docstring)."""

    name = "sparse_reduce_scatter"
    max_numel = MAX_NUMEL

    def program(self, rank: int, P: int, payload: Payload) -> Program:
        if not isinstance(payload, Sparse):
            raise TypeError("SparseReduceScatter needs a Sparse payload")
        region = yield from split_reduce(rank, P, payload, shard_bounds(payload.numel, P))
        return Reduced(region, P)

    def model_seconds(self, net: AlphaBeta, P: int, d: int, counts: Sequence[int]) -> float:
        """P - 1 exchanges of a count and k / P entries (8 bytes each), k the largest payload."""
        k = max(counts, default=0)
        return (P - 1) * (net.message(4) + net.message(8 * k / P)) if P > 1 else 0.0


class DenseReduceScatter(Collective):
    """Sum of the ranks' dense vectors, rank j keeping region j; values on the wire in `values` (fp32, fp16,
    bf16), the sum in float32 in rank order (module docstring)."""

    name = "dense_reduce_scatter"

    def __init__(self, values: str = "fp32") -> None:
        self.wire = WireFormat(values)

    def program(self, rank: int, P: int, payload: Payload) -> Program:
        if not isinstance(payload, Dense):
            raise TypeError("DenseReduceScatter needs a Dense payload")
        chunks = list(payload.values.view(-1).chunk(P)) if P > 1 else [payload.values.view(-1)]
        shard_bounds(payload.values.numel(), P)
        parts: list[Tensor | None] = [None] * P
        parts[rank] = chunks[rank]
        for s in range(1, P):
            dest, src = (rank + s) % P, (rank - s) % P
            buf = torch.empty_like(chunks[src])
            first, second = (Send(dest, chunks[dest].contiguous(), tag=s), Recv(src, buf, tag=s))
            for op in ((first, second) if cycle_position(rank, P, s) % 2 == 0 else (second, first)):
                yield op
            parts[src] = buf
        total = parts[0].float().clone()
        for part in parts[1:]:
            total.add_(part.float())
        return Reduced(Dense(total), P)

    def model_seconds(self, net: AlphaBeta, P: int, d: int, counts: Sequence[int]) -> float:
        return (P - 1) * net.message(self.wire.value_bytes * d / P) if P > 1 else 0.0
