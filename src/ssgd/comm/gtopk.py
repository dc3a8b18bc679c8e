"""gTopKAllReduce for any number of workers (Shi et al., "A Distributed Synchronous SGD Algorithm with
Global Top-k Sparsification for Low Bandwidth Networks", ICDCS 2019, arXiv:1901.04359, Algorithms 2-3;
released code hclhkbu/gtopkssgd, allreducer.py `gtopk_sparse_allreduce`).

1. Reduce: a bit-mask binomial tree to rank 0. In round j (mask = 2^j) a rank with bit j set sends
   its current k-sparse vector to rank & ~mask and leaves; a rank without it receives from
   rank | mask if that rank exists, and merges: sum on common indices, keep the k largest
   magnitudes (`merge_topk`). ceil(log2 P) rounds; for P = 2^n this is the released code's pairing
   (0<-1, 2<-3 | 0<-2 ...) and for other P no rank is dropped (the released loop runs int(log2 P)
   rounds and indexes past its participant list, so P = 3, 5, 6, 12 ... fail there).
2. Broadcast the global (I_g, V_g) from rank 0 (binomial tree).
3. Result: G = V_g at I_g, divided by P. The global set I_g is the `support`: a rank's local entries
   in I_g count as sent (even if this rank's value was dropped in an intermediate merge, as in the
   released code's `add_residuals`); the others stay in its residual.

Every message is 2k int32 (index + value bits, `ssgd.comm.wire`): fixed size, because the union of
two k-sets has at least k entries.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ssgd.comm.base import Collective, Program, Reduced
from ssgd.comm.ops import Bcast, Recv, Send
from ssgd.comm.wire import MAX_NUMEL, pack_sparse, unpack_sparse
from ssgd.payload import Payload, Sparse, sum_sparse
from ssgd.perf import cost
from ssgd.perf.alphabeta import AlphaBeta

TAG_GTOPK = 17


def merge_topk(a: Sparse, b: Sparse, k: int) -> Sparse:
    """One gTop-k tree merge (released code `gtopk_sparse_allreduce`):
    1. sum the two vectors (values on common indices are added first),
    2. keep the k entries of largest magnitude (all of them if there are at most k),
    returned in increasing index order.
    """
    s = sum_sparse([a, b])
    if len(s) <= k:
        return s
    sel = torch.topk(s.val.abs(), k, sorted=False).indices.sort().values
    return Sparse(s.idx[sel], s.val[sel], s.numel)


class GTopKAllreduce(Collective):
    """Global Top-k of the sum of the ranks' k-sparse vectors; every payload must have exactly k entries."""

    name = "gtopk_allreduce"
    max_numel = MAX_NUMEL

    def program(self, rank: int, P: int, payload: Payload) -> Program:
        if not isinstance(payload, Sparse):
            raise TypeError("GTopKAllreduce needs a Sparse payload (compressor=gtopk)")
        k, d = len(payload), payload.numel
        s, mask = payload, 1
        while mask < P:
            if rank & mask:
                yield Send(rank & ~mask, pack_sparse(s), TAG_GTOPK)
                break
            if rank | mask < P:
                buf = torch.empty(2 * k, dtype=torch.int32, device=payload.idx.device)
                yield Recv(rank | mask, buf, TAG_GTOPK)
                s = merge_topk(s, unpack_sparse(buf, d), k)
            mask <<= 1
        root = pack_sparse(s) if rank == 0 else torch.empty(2 * k, dtype=torch.int32, device=payload.idx.device)
        g = unpack_sparse((yield Bcast(root)), d)
        return Reduced(g, P, support=g.idx)

    def model_seconds(self, net: AlphaBeta, P: int, d: int, counts: Sequence[int]) -> float:
        return cost.gtopk_seconds(net, P, counts[0])
