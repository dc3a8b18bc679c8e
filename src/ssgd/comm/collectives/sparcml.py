"""SparCML's dynamic sparse allreduce, "TopkDSA" (Renggli et al., "SparCML: High-Performance Sparse
Communication for Machine Learning", SC 2019): recursive doubling on sparse vectors, switching to dense
once the fill-in makes the sparse form the larger one.

Schedule for P ranks, p2 = 2^floor(log2 P) (the standard fold for P not a power of two):

1. Fold: a rank r >= p2 sends its vector to r - p2, which adds it (its own vector + the received one).
2. Recursive doubling among ranks 0 .. p2 - 1: in round j (mask = 2^j, j = 0 .. log2 p2 - 1) rank r
   exchanges its partial sum with r XOR mask and both set it to (lower rank's vector + higher rank's
   vector), so both partners hold the same bits. The support (the union of the index sets) grows.
3. Unfold: rank r < P - p2 sends the total to r + p2.

A vector travels sparse while its entries take no more bytes than its dense form, 8 n <= 4 d (int32 index +
float32 value per entry, `ssgd.comm.wire`), and dense (d float32 values) from then on: a partial sum whose support
exceeds d / 2 becomes a dense vector (zeros outside the support) and stays dense, since every later sum covers
it (the published switch). A payload with 2 k > d is dense from the start. Each message is preceded by a count
(int32 [1]: the entries that follow, or -1 for a dense vector), since the partner's fill-in is not known in
advance. Deadlock-free under blocking sends: in a pair the lower rank sends first then receives, the higher
rank receives then sends. With 16-bit values (`values="fp16"|"bf16"`) an entry is 6 bytes and an element 2, so
the switch comes at 6 n > 2 d, and every partial sum is rounded to 16 bits (the class docstring).

Additions, one IEEE float32 addition per common index: sparse + sparse adds the two values on a common index and
copies every other value unchanged; dense + sparse adds at the sparse vector's indices only; dense + dense adds
element-wise. The order of operands is always (lower rank's vector) + (higher rank's vector). The result is
the same bits on every rank and every executor, but NOT in general the rank-order sum: the grouping is the
schedule's (tests/oracles.py `topkdsa` follows it).

Bytes depend on the fill-in (how much the ranks' supports overlap), so there is no closed form for them;
`ssgd.perf.cost.topkdsa_worst_sent` and `topkdsa_seconds` give the case of disjoint supports, the worst.
Every rank's whole payload counts as sent (`Reduced.support` is None), as with the sparse allgather (TopkA).
"""
from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import torch

from ssgd.comm.base import Collective, Program, Reduced
from ssgd.comm.ops import Op, Recv, Send
from ssgd.comm.wire import FP32, MAX_NUMEL, WireFormat, check_numel
from ssgd.payload import Dense, Payload, Sparse
from ssgd.perf import cost
from ssgd.perf.alphabeta import AlphaBeta

TAG_COUNT = 23
TAG_VECTOR = 24
DENSE_COUNT = -1            # the count that announces a dense vector of d values

Vector = Sparse | Dense     # a partial sum: Sparse (distinct indices, increasing) or Dense [d], values in the wire's dtype


def is_dense_size(n: int, d: int, wire: WireFormat = FP32) -> bool:
    """Whether n entries of a d-vector go dense: n entries take more bytes than d values (8 n > 4 d for fp32,
    6 n > 2 d for 16-bit values)."""
    return wire.entry_bytes * n > wire.value_bytes * d


def start_vector(payload: Sparse, wire: WireFormat = FP32) -> Vector:
    """A rank's own payload as a partial sum: its entries in increasing index order (new tensors), or its
    dense form when the entries take more bytes than the dense vector."""
    d = payload.numel
    idx, perm = payload.idx.sort()
    val = payload.val.index_select(0, perm)
    if is_dense_size(idx.numel(), d, wire):
        return Dense(torch.zeros(d, dtype=val.dtype, device=val.device).scatter_(0, idx, val))
    return Sparse(idx, val, d)


def add(lo: Vector, hi: Vector, wire: WireFormat = FP32) -> Vector:
    """lo + hi (lo: the lower rank's partial sum) as described in the module docstring, added in float32 and
    rounded to the wire's values (`WireFormat.round`; fp32: as added); a sparse sum whose entries take more
    bytes than d values comes back dense. New tensors; neither operand is modified."""
    d = lo.numel
    if isinstance(lo, Dense) and isinstance(hi, Dense):
        return Dense(wire.round(lo.values.float() + hi.values.float()))
    if isinstance(lo, Dense) or isinstance(hi, Dense):
        dense, sparse = (lo, hi) if isinstance(lo, Dense) else (hi, lo)
        out = dense.values.clone()
        here, val = out.index_select(0, sparse.idx).float(), sparse.val.float()
        out.index_copy_(0, sparse.idx, wire.round(here + val if sparse is hi else val + here))
        return Dense(out)
    return _add_sparse(lo, hi, d, wire)


def _add_sparse(lo: Sparse, hi: Sparse, d: int, wire: WireFormat) -> Vector:
    """Union of two sparse vectors: lo[i] + hi[i] on a common index, the other values copied as they are."""
    n_lo = lo.idx.numel()
    union, inverse = torch.unique(torch.cat([lo.idx, hi.idx]), sorted=True, return_inverse=True)
    at_lo, at_hi = inverse[:n_lo], inverse[n_lo:]
    out = torch.zeros(union.numel(), dtype=torch.float32, device=lo.val.device).index_copy_(0, at_lo, lo.val.float())
    common = torch.zeros(union.numel(), dtype=torch.bool, device=lo.val.device).index_fill_(0, at_lo, True)
    common = common.index_select(0, at_hi)
    hi_val = hi.val.float()
    out.index_copy_(0, at_hi, torch.where(common, out.index_select(0, at_hi) + hi_val, hi_val))
    out = wire.round(out)                          # exact where a value was copied: it was the wire's already
    if is_dense_size(union.numel(), d, wire):
        return Dense(torch.zeros(d, dtype=out.dtype, device=out.device).index_copy_(0, union, out))
    return Sparse(union, out, d)


def send_vector(dest: int, v: Vector, wire: WireFormat = FP32) -> Generator[Op, Any, None]:
    """The count, then the vector: its entries as `WireFormat.pack_entries` puts them, or its d values' bytes."""
    dense = isinstance(v, Dense)
    device = v.values.device if dense else v.idx.device
    count = DENSE_COUNT if dense else v.idx.numel()
    yield Send(dest, torch.tensor([count], dtype=torch.int32, device=device), TAG_COUNT)
    if dense:
        yield Send(dest, v.values.view(torch.uint8), TAG_VECTOR)
    else:
        yield Send(dest, wire.pack_entries(v.idx, v.val, wire.message(count, device)), TAG_VECTOR)


def recv_vector(source: int, d: int, device: torch.device, wire: WireFormat = FP32) -> Generator[Op, Any, Vector]:
    """Receive what `send_vector` sent: a new vector (its own buffers), values in the wire's dtype."""
    count = torch.empty(1, dtype=torch.int32, device=device)
    yield Recv(source, count, TAG_COUNT)
    n = int(count.item())
    if n == DENSE_COUNT:
        buf = torch.empty(d, dtype=wire.dtype, device=device)
        yield Recv(source, buf.view(torch.uint8), TAG_VECTOR)
        return Dense(buf)
    buf = wire.message(n, device)
    yield Recv(source, buf, TAG_VECTOR)
    idx, val = wire.unpack_raw(buf)
    return Sparse(idx.to(torch.int64), val, d)


def exchange(rank: int, partner: int, mine: Vector, device: torch.device,
             wire: WireFormat = FP32) -> Generator[Op, Any, Vector]:
    """One recursive-doubling round: swap partial sums with `partner` (lower rank sends first) and return
    (lower rank's vector) + (higher rank's vector)."""
    d = mine.numel
    if rank < partner:
        yield from send_vector(partner, mine, wire)
        theirs = yield from recv_vector(partner, d, device, wire)
        return add(mine, theirs, wire)
    theirs = yield from recv_vector(partner, d, device, wire)
    yield from send_vector(partner, mine, wire)
    return add(theirs, mine, wire)


def widened(v: Vector) -> Vector:
    """The total with float32 values (the wire's values widened exactly; fp32: itself)."""
    if isinstance(v, Dense):
        return v if v.values.dtype == torch.float32 else Dense(v.values.float())
    return v if v.val.dtype == torch.float32 else Sparse(v.idx, v.val.float(), v.numel)


class SparseRecursiveDoubling(Collective):
    """Sum of every rank's sparse payload by SparCML's recursive doubling with the dense switch (module
    docstring); every rank gets the same bits, as `Sparse` (sorted distinct indices) while the total's entries
    take no more bytes than its dense form and as `Dense` beyond. Each rank's whole payload counts as sent.
    Keeps no state between calls.

    values: the wire format of the values, "fp32" (default), "fp16" or "bf16" (`compressor.wire.values`): each
    rank's values are rounded once by `encode`, every partial sum is added in float32 and rounded to 16 bits
    again (so that both partners of a round hold the same bits), a sparse entry takes 6 bytes and a dense
    element 2, and the switch comes at 6 n > 2 d. That rounding of partial sums belongs to no rank's payload,
    so no residual keeps it (as in gTop-k's and dense16's 16-bit sums).
    """

    name = "sparse_recursive_doubling"
    max_numel = MAX_NUMEL

    def __init__(self, values: str = "fp32") -> None:
        self.wire = WireFormat(values)

    def program(self, rank: int, P: int, payload: Payload) -> Program:
        if not isinstance(payload, Sparse):
            raise TypeError("SparseRecursiveDoubling needs a Sparse payload (compressor topkdsa)")
        wire = self.wire
        check_numel(payload.numel)
        wire.check(payload.val, "SparseRecursiveDoubling")
        d, device, p2 = payload.numel, payload.idx.device, 1 << (P.bit_length() - 1)
        v = start_vector(payload, wire)
        if rank >= p2:                                         # 1. fold, and 3. get the total back
            yield from send_vector(rank - p2, v, wire)
            return Reduced(widened((yield from recv_vector(rank - p2, d, device, wire))), P)
        if rank + p2 < P:
            v = add(v, (yield from recv_vector(rank + p2, d, device, wire)), wire)
        mask = 1
        while mask < p2:                                       # 2. recursive doubling
            v = yield from exchange(rank, rank ^ mask, v, device, wire)
            mask <<= 1
        if rank + p2 < P:
            yield from send_vector(rank + p2, v, wire)
        return Reduced(widened(v), P)

    def model_seconds(self, net: AlphaBeta, P: int, d: int, counts: Sequence[int]) -> float:
        """Worst case: the ranks' supports disjoint (`ssgd.perf.cost.topkdsa_seconds`)."""
        return cost.topkdsa_seconds(net, P, d, counts, self.wire.entry_bytes, self.wire.value_bytes)
