"""gTopKAllReduce for any number of workers (Shi et al., "A Distributed Synchronous SGD Algorithm with
Global Top-k Sparsification for Low Bandwidth Networks", ICDCS 2019, arXiv:1901.04359, Algorithms 2-3;
released code hclhkbu/gtopkssgd, allreducer.py `gtopk_sparse_allreduce`).

1. Reduce: a bit-mask binomial tree to rank 0. In round j (mask = 2^j) a rank with bit j set sends
   its current k-sparse vector to rank & ~mask and leaves; a rank without it receives from
   rank | mask if that rank exists, and merges: sum on common indices, keep the k largest
   magnitudes (`merge_entries`). ceil(log2 P) rounds; for P = 2^n this is the released code's pairing
   (0<-1, 2<-3 | 0<-2 ...) and for other P no rank is dropped (the released loop runs int(log2 P)
   rounds and indexes past its participant list, so P = 3, 5, 6, 12 ... fail there).
2. Broadcast the global (I_g, V_g) from rank 0 (binomial tree).
3. Result: G = V_g at I_g, divided by P. Which local entries count as sent (`support`) is the
   residual rule, a constructor option:
   * `residual="released"` (default): a rank's local entries whose index is in I_g count as sent,
     as in the released code's `add_residuals`, even when this rank's value at that index was
     dropped in an intermediate merge (the other operand won it alone, or the sum of a subtree that
     did not contain this rank's value). Such a value is then neither applied nor kept.
   * `residual="strict"`: only the local entries whose value reached the root's sum count as sent;
     the others stay in the residual. Needs one more pass, down the reduce tree: after the reduce,
     each parent tells each child which entries of the child's message survived every merge up to
     the root, as a k-byte mask (uint8 [k]; `ceil(log2 P)` more rounds of one k-byte message,
     counted by the executors and in `model_seconds`).
   docs/compressors.md measures the difference.

Every tree message is 2k int32 (index + value bits, `ssgd.comm.wire`): fixed size, because the union
of two k-sets has at least k entries. With `values="fp16"|"bf16"` (`compressor.wire.values`) a message is
6k bytes: the leaves' values are rounded once by `encode` (their residuals keep that rounding), merges
add the decoded values in float32, and every partial sum a rank forwards (and the root's broadcast) is
rounded to 16 bits again; that second rounding belongs to no rank's payload, so no residual keeps it.

Cost per rank and call: O(k) on arrays of k entries, never O(d). Inside the tree, vectors stay in
the wire's int32 indices and in increasing index order (payloads of `select_topk` already are; any
other order is sorted once, on the first merge). A merge is the C kernel of `ssgd.native`: one walk
over both operands that sums common indices, a radix selection of the k-th largest magnitude, and
one compaction that keeps index order (timings: docs/hot-path.md), in place of the same steps as
torch CPU operations: a sorted `torch.unique`, a scatter-add, `torch.topk`, which remain the fallback on GPUs and where no C compiler is found; docs/hot-path.md). Ties at the
top-k boundary go to the lower index, NaN magnitudes rank above infinity, on both paths. Messages
are packed into and received in per-rank buffers that the collective keeps between calls
(`_RankBuffers`, one set per rank, also under the in-process executor where all P ranks share this
object); results never alias them.
"""
from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ssgd import native
from ssgd.comm.base import Collective, Program, Reduced
from ssgd.comm.ops import Bcast, Op, Recv, Send
from ssgd.comm.wire import MAX_NUMEL, FP32, WireFormat, check_numel
from ssgd.payload import Payload, Sparse
from ssgd.perf import cost
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.errors import BadArgument

TAG_GTOPK = 17
TAG_SURVIVED = 18
RESIDUAL_RULES = ("released", "strict")


@dataclass(frozen=True)
class MergeTrace:
    """Where one merge put its operands, so that survival can be traced back down the tree.

    n: entries in the union; into_a, into_b: int64 position in the union of each entry of a and b
    (a common index has one position); kept: int64 union positions kept, in the result's order
    (None: all, in union order).
    """

    n: int
    into_a: Tensor
    into_b: Tensor
    kept: Tensor | None

    def survivors(self, alive: Tensor) -> tuple[Tensor, Tensor]:
        """alive: bool [entries of the merge's result, in its order], which of them survive further up ->
        (bool [len(a)], bool [len(b)]): the operands' entries whose value is in a surviving sum."""
        if self.kept is None:
            in_union = alive
        else:
            in_union = torch.zeros(self.n, dtype=torch.bool, device=alive.device).scatter_(0, self.kept, alive)
        return in_union.index_select(0, self.into_a), in_union.index_select(0, self.into_b)


def merge_entries(a_idx: Tensor, a_val: Tensor, b_idx: Tensor, b_val: Tensor, k: int,
                  trace: bool = True) -> tuple[Tensor, Tensor, MergeTrace | None]:
    """One gTop-k tree merge (released code `gtopk_sparse_allreduce`) of two sparse vectors given as
    (indices, float32 values), each with distinct indices, in any order, of any integer dtype:
    1. sum them (on a common index the value is (0 + a) + b: the bits of `sum_sparse`),
    2. keep the k entries of largest magnitude (all of them if there are at most k), ranked by the
       bits of |v| (the order of |v| for numbers; NaN above infinity), equal magnitudes at the
       boundary going to the lower index,
    returned as (indices, values) in increasing index order, with the trace of where each operand
    entry went (None unless `trace`).

    int32 indices on the CPU go through the C merge (`ssgd.native`: O(k), operands in increasing index
    order, sorted here first when they are not), everything else through `_merge_torch`; both give
    the same bits (tests/unit/test_native_merge.py).
    """
    if a_idx.dtype == b_idx.dtype == torch.int32 and a_idx.device.type == "cpu" and native.available():
        return _merge_native(a_idx, a_val, b_idx, b_val, k, trace)
    return _merge_torch(a_idx, a_val, b_idx, b_val, k, trace)


def _merge_native(a_idx: Tensor, a_val: Tensor, b_idx: Tensor, b_val: Tensor, k: int,
                  trace: bool) -> tuple[Tensor, Tensor, MergeTrace | None]:
    a_val, b_val = a_val.contiguous(), b_val.contiguous()
    out = native.merge(a_idx.contiguous(), a_val, b_idx.contiguous(), b_val, k, trace)
    perms: list[Tensor | None] = [None, None]
    if out is None:                                               # an operand is not in index order
        (a_idx, a_val, perms[0]), (b_idx, b_val, perms[1]) = _by_index(a_idx, a_val), _by_index(b_idx, b_val)
        out = native.merge(a_idx, a_val, b_idx, b_val, k, trace)
        if out is None:
            raise ValueError("gTop-k merge: an operand has repeated indices (a sparse vector's must be distinct)")
    idx, val, n, into_a, into_b, kept = out
    if not trace:
        return idx, val, None
    assert into_a is not None and into_b is not None
    into_a, into_b = (t if perm is None else torch.empty_like(t).scatter_(0, perm, t)     # back to the given order
                      for t, perm in zip((into_a, into_b), perms))
    return idx, val, MergeTrace(n, into_a, into_b, kept)


def _by_index(idx: Tensor, val: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(idx, val) in increasing index order, and the permutation that did it."""
    idx, perm = idx.sort()
    return idx, val.index_select(0, perm), perm


def _merge_torch(a_idx: Tensor, a_val: Tensor, b_idx: Tensor, b_val: Tensor, k: int,
                 trace: bool) -> tuple[Tensor, Tensor, MergeTrace | None]:
    """`merge_entries` in torch operations, on any device: one sorted `torch.unique` of the 2k
    indices (whose inverse places every operand entry), a scatter-add, then `top_positions`.
    (1-D `index_select` / `scatter_` rather than advanced indexing: several times faster on CPU.)"""
    na = a_idx.numel()
    idx, inverse = torch.unique(torch.cat([a_idx, b_idx]), sorted=True, return_inverse=True)
    n = idx.numel()
    val = torch.zeros(n, dtype=a_val.dtype, device=a_val.device).index_add_(0, inverse, torch.cat([a_val, b_val]))
    kept = None if n <= k else top_positions(val, k)
    if kept is not None:
        idx, val = idx.index_select(0, kept), val.index_select(0, kept)
    return idx, val, MergeTrace(n, inverse[:na], inverse[na:], kept) if trace else None


def top_positions(val: Tensor, k: int) -> Tensor:
    """int64 [k], increasing: the positions of the k entries of float32 `val` (more than k) of largest
    magnitude, ranked by the bits of |v| (NaN above infinity), ties at the boundary to the lower
    position: the rule of the C merge (ssgd/native/gtopk_merge.c)."""
    key = val.view(torch.int32) & 0x7FFFFFFF                      # IEEE bits of |v|: ordered like |v|
    t = torch.topk(key, k, sorted=False).values.min()
    chosen = key > t
    ties = (key == t).nonzero().view(-1)[:k - int(chosen.sum())]
    return chosen.index_fill_(0, ties, True).nonzero().view(-1)


def merge_topk(a: Sparse, b: Sparse, k: int) -> Sparse:
    """`merge_entries` of two `Sparse` vectors (the result in increasing index order)."""
    idx, val, _ = merge_entries(a.idx, a.val, b.idx, b.val, k, trace=False)
    return Sparse(idx.to(torch.int64), val, a.numel)


class _RankBuffers:
    """One rank's message buffers, reused from call to call while k and the device stay the same."""

    def __init__(self, k: int, device: torch.device, wire: WireFormat = FP32) -> None:
        self.k, self.device = k, device
        self.send = wire.message(k, device)
        self.recv = wire.message(k, device)
        self.mask_in = torch.empty(k, dtype=torch.uint8, device=device)
        self.mask_out = torch.empty(k, dtype=torch.uint8, device=device)

    def fits(self, k: int, device: torch.device) -> bool:
        return self.k == k and self.device == device


class GTopKAllreduce(Collective):
    """Global Top-k of the sum of the ranks' k-sparse vectors; every payload must have exactly k entries.

    residual: "released" (default) or "strict", which of a rank's entries count as sent (module
    docstring). values: the wire format of the values, "fp32" (default), "fp16" or "bf16". Holds per-rank message buffers between calls (never shared between ranks; a
    program that finds its rank's buffers in use by another program of the same rank allocates
    its own), so one instance serves one run.
    """

    name = "gtopk_allreduce"
    max_numel = MAX_NUMEL

    def __init__(self, residual: str = "released", values: str = "fp32") -> None:
        if residual not in RESIDUAL_RULES:
            raise BadArgument("residual", residual, f"must be one of {', '.join(RESIDUAL_RULES)}")
        self.residual = residual
        self.wire = WireFormat(values)
        self._idle: dict[int, _RankBuffers] = {}

    def program(self, rank: int, P: int, payload: Payload) -> Program:
        if not isinstance(payload, Sparse):
            raise TypeError("GTopKAllreduce needs a Sparse payload (compressor=gtopk)")
        k, device = len(payload), payload.idx.device
        bufs = self._idle.pop(rank, None)
        if bufs is None or not bufs.fits(k, device):
            bufs = _RankBuffers(k, device, self.wire)
        try:
            return (yield from self._run(rank, P, payload, bufs))
        finally:
            self._idle[rank] = bufs

    def _run(self, rank: int, P: int, payload: Sparse, bufs: _RankBuffers) -> Generator[Op, Any, Reduced]:
        d, k, wire = payload.numel, len(payload), self.wire
        check_numel(d)
        wire.check(payload.val, "GTopKAllreduce")
        # a rank that merges keeps the wire's int32 indices through the tree; a leaf packs its payload as it is
        own = payload.idx.to(torch.int32) if P > 1 and not rank & 1 else payload.idx
        s_idx, s_val, merges, mask, parent = own, payload.val.float(), [], 1, None
        while mask < P:                                           # 1. reduce to rank 0
            if rank & mask:
                parent = rank & ~mask
                yield Send(parent, wire.pack_entries(s_idx, s_val, bufs.send), TAG_GTOPK)
                break
            if rank | mask < P:
                yield Recv(rank | mask, bufs.recv, TAG_GTOPK)
                r_idx, r_val = wire.unpack_raw(bufs.recv)
                s_idx, s_val, trace = merge_entries(s_idx, s_val, r_idx, r_val.float(), k,
                                                    trace=self.residual == "strict")
                merges.append((rank | mask, trace))
            mask <<= 1
        support = None
        if self.residual == "strict":                             # which of our entries reached the root
            if parent is None:
                alive = torch.ones(s_idx.numel(), dtype=torch.bool, device=s_idx.device)
            else:
                yield Recv(parent, bufs.mask_in, TAG_SURVIVED)
                alive = bufs.mask_in.bool()
            for child, trace in reversed(merges):                 # latest merge first: down the tree
                alive, child_alive = trace.survivors(alive)
                yield Send(child, bufs.mask_out.copy_(child_alive), TAG_SURVIVED)
            support = payload.idx[alive].sort().values            # increasing: `restrict` bisects it
        root = wire.pack_entries(s_idx, s_val, bufs.send) if rank == 0 else bufs.recv
        g = wire.unpack((yield Bcast(root)), d)                   # 2. broadcast (I_g, V_g)
        if not wire.lossy:
            g = Sparse(g.idx, g.val.clone(), d)                   # own the values: buffers are reused
        return Reduced(g, P, support=g.idx if support is None else support)

    def model_seconds(self, net: AlphaBeta, P: int, d: int, counts: Sequence[int]) -> float:
        if self.residual == "strict":
            return cost.gtopk_strict_seconds(net, P, counts[0], self.wire.entry_bytes)
        return cost.gtopk_seconds(net, P, counts[0], self.wire.entry_bytes)
