"""gTopKAllReduce for any number of workers (Shi et al., "A Distributed Synchronous SGD Algorithm with
Global Top-k Sparsification for Low Bandwidth Networks", ICDCS 2019, arXiv:1901.04359, Algorithms 2-3;
released code hclhkbu/gtopkssgd, allreducer.py `gtopk_sparse_allreduce`).

1. Reduce: a bit-mask binomial tree to rank 0. In round j (mask = 2^j) a rank with bit j set sends
   its current k-sparse vector to rank & ~mask and leaves; a rank without it receives from
   rank | mask if that rank exists, and merges: sum on common indices, keep the k largest
   magnitudes (`merge_sorted`). ceil(log2 P) rounds; for P = 2^n this is the released code's pairing
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
of two k-sets has at least k entries.

Cost per rank and call: O(k log k) on arrays of k entries, never O(d). Inside the tree, vectors stay
in the wire's int32 indices (sorting 2k int32 keys takes about 60 % of the time of int64 keys); a
merge is one sorted `torch.unique` of the 2k indices (whose inverse places every operand entry),
a scatter-add, and `torch.topk`, and its result keeps the union's index order without sorting the
selection. Messages are packed into and received in per-rank buffers that the collective keeps
between calls (`_RankBuffers`, one set per rank, also under the in-process executor where all P
ranks share this object); results never alias them. Measured alternatives (bench/README.md):
binary search of one index-sorted operand in the other costs as much as the unique, and a d-sized
per-rank scratch table (scatter, gather, reset) costs more at d = 25M (three random-access passes
over 100 MB of table).
"""
from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ssgd.comm.base import Collective, Program, Reduced
from ssgd.comm.ops import Bcast, Op, Recv, Send
from ssgd.comm.wire import MAX_NUMEL, check_numel, pack_entries, unpack_sparse
from ssgd.payload import Payload, Sparse
from ssgd.perf import cost
from ssgd.perf.alphabeta import AlphaBeta

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
                  ordered: bool = True) -> tuple[Tensor, Tensor, MergeTrace]:
    """One gTop-k tree merge (released code `gtopk_sparse_allreduce`) of two sparse vectors given as
    (indices, float32 values), in any order, indices of any integer dtype:
    1. sum them (on a common index the value is (0 + a) + b: the bits of `sum_sparse`),
    2. keep the k entries of largest magnitude (all of them if there are at most k),
    returned as (indices, values), with the trace of where each operand entry went. In increasing
    index order when `ordered` (kept by a mask of the chosen entries, not a sort); otherwise in
    `torch.topk`'s order, which is enough for a result that only goes into another merge (the next
    union is sorted again, so the chosen set and the bits do not depend on it).
    (1-D `index_select` / `scatter_` rather than advanced indexing: several times faster on CPU.)
    """
    na = a_idx.numel()
    idx, inverse = torch.unique(torch.cat([a_idx, b_idx]), sorted=True, return_inverse=True)
    n = idx.numel()
    val = torch.zeros(n, dtype=a_val.dtype, device=a_val.device).index_add_(0, inverse, torch.cat([a_val, b_val]))
    into_a, into_b = inverse[:na], inverse[na:]
    if n <= k:
        return idx, val, MergeTrace(n, into_a, into_b, None)
    kept = torch.topk(val.abs(), k, sorted=False).indices
    if ordered:                                                   # the chosen positions, increasing
        kept = torch.zeros(n, dtype=torch.bool, device=val.device).scatter_(0, kept, True).nonzero().view(-1)
    return idx.index_select(0, kept), val.index_select(0, kept), MergeTrace(n, into_a, into_b, kept)


def merge_topk(a: Sparse, b: Sparse, k: int) -> Sparse:
    """`merge_entries` of two `Sparse` vectors (the result in increasing index order)."""
    idx, val, _ = merge_entries(a.idx, a.val, b.idx, b.val, k)
    return Sparse(idx, val, a.numel)


class _RankBuffers:
    """One rank's message buffers, reused from call to call while k and the device stay the same."""

    def __init__(self, k: int, device: torch.device) -> None:
        self.k, self.device = k, device
        self.send = torch.empty(2 * k, dtype=torch.int32, device=device)
        self.recv = torch.empty(2 * k, dtype=torch.int32, device=device)
        self.mask_in = torch.empty(k, dtype=torch.uint8, device=device)
        self.mask_out = torch.empty(k, dtype=torch.uint8, device=device)

    def fits(self, k: int, device: torch.device) -> bool:
        return self.k == k and self.device == device


class GTopKAllreduce(Collective):
    """Global Top-k of the sum of the ranks' k-sparse vectors; every payload must have exactly k entries.

    residual: "released" (default) or "strict", which of a rank's entries count as sent (module
    docstring). Holds per-rank message buffers between calls (never shared between ranks; a
    program that finds its rank's buffers in use by another program of the same rank allocates
    its own), so one instance serves one run.
    """

    name = "gtopk_allreduce"
    max_numel = MAX_NUMEL

    def __init__(self, residual: str = "released") -> None:
        if residual not in RESIDUAL_RULES:
            raise ValueError(f"residual={residual!r}: must be one of {', '.join(RESIDUAL_RULES)}")
        self.residual = residual
        self._idle: dict[int, _RankBuffers] = {}

    def program(self, rank: int, P: int, payload: Payload) -> Program:
        if not isinstance(payload, Sparse):
            raise TypeError("GTopKAllreduce needs a Sparse payload (compressor=gtopk)")
        k, device = len(payload), payload.idx.device
        bufs = self._idle.pop(rank, None)
        if bufs is None or not bufs.fits(k, device):
            bufs = _RankBuffers(k, device)
        try:
            return (yield from self._run(rank, P, payload, bufs))
        finally:
            self._idle[rank] = bufs

    def _run(self, rank: int, P: int, payload: Sparse, bufs: _RankBuffers) -> Generator[Op, Any, Reduced]:
        d, k = payload.numel, len(payload)
        check_numel(d)
        # a rank that merges keeps the wire's int32 indices through the tree; a leaf packs its payload as it is
        own = payload.idx.to(torch.int32) if P > 1 and not rank & 1 else payload.idx
        s_idx, s_val, merges, mask, parent = own, payload.val, [], 1, None
        while mask < P:                                           # 1. reduce to rank 0
            if rank & mask:
                parent = rank & ~mask
                yield Send(parent, pack_entries(s_idx, s_val, bufs.send), TAG_GTOPK)
                break
            if rank | mask < P:
                yield Recv(rank | mask, bufs.recv, TAG_GTOPK)
                last = rank == 0 and mask << 1 >= P                # the global set: index order
                s_idx, s_val, trace = merge_entries(s_idx, s_val, bufs.recv[:k], bufs.recv[k:].view(torch.float32), k,
                                                    ordered=last)
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
        root = pack_entries(s_idx, s_val, bufs.send) if rank == 0 else bufs.recv
        g = unpack_sparse((yield Bcast(root)), d)                 # 2. broadcast (I_g, V_g)
        g = Sparse(g.idx, g.val.clone(), d)                       # own the values: buffers are reused
        return Reduced(g, P, support=g.idx if support is None else support)

    def model_seconds(self, net: AlphaBeta, P: int, d: int, counts: Sequence[int]) -> float:
        if self.residual == "strict":
            return cost.gtopk_strict_seconds(net, P, counts[0])
        return cost.gtopk_seconds(net, P, counts[0])
