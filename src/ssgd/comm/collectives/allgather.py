"""Sparse S-SGD aggregation by AllGather (Top-k, Random-k, Gaussian-k, DGC sampling).

As in the released code (hclhkbu/gtopkssgd, allreducer.py; hclhkbu/GaussianK-SGD, Horovod
`allgather_async` of values and indices): every rank gathers all ranks' (index, value) pairs and
adds them, G[idx] += val for each block in rank order, then G /= P. Blocks may differ in size
(Gaussian-k selects a variable number of entries), so the gather is an allgatherv of packed pairs.
GaussianK-SGD's decode splits the gathered buffer into pieces of numel // P and so can lose up to
P - 1 trailing elements; here no element is dropped.

`values="fp16"|"bf16"` (`compressor.wire.values`; `ssgd.comm.wire.WireFormat`) sends 6 bytes per entry
instead of 8: each rank's values are rounded once by `encode`, the sum is taken in float32 of the
decoded values, so every rank and backend still gets the same bits.
"""
from __future__ import annotations

from collections.abc import Sequence

from ssgd.comm.base import Collective, Program, Reduced
from ssgd.comm.ops import Allgatherv
from ssgd.comm.wire import MAX_NUMEL, WireFormat
from ssgd.payload import Payload, Sparse, sum_sparse
from ssgd.perf import cost
from ssgd.perf.alphabeta import AlphaBeta


class SparseAllgather(Collective):
    """Sum of every rank's sparse payload; each rank's whole payload counts as sent.

    values: the wire format of the values, "fp32" (default), "fp16" or "bf16" (module docstring).
    narrow_indices: uint16 indices for a vector of numel <= 2^16 (`ssgd.comm.wire`; the DDP hook's
    default for its buckets, `ssgd.ddp`); False: int32 indices always, as in the papers' byte counts.
    """

    name = "sparse_allgather"
    max_numel = MAX_NUMEL

    def __init__(self, values: str = "fp32", narrow_indices: bool = False) -> None:
        self.wire = WireFormat(values, narrow_indices)

    def program(self, rank: int, P: int, payload: Payload) -> Program:
        if not isinstance(payload, Sparse):
            raise TypeError("SparseAllgather needs a Sparse payload (compressor topk/randomk/gaussiank/dgcsampling)")
        blocks = yield Allgatherv(self.wire.pack(payload))
        total = sum_sparse([self.wire.unpack(b, payload.numel) for b in blocks])
        return Reduced(total, P)

    def model_seconds(self, net: AlphaBeta, P: int, d: int, counts: Sequence[int]) -> float:
        return cost.sparse_allgather_seconds(net, counts, self.wire.entry_bytes_for(d))
