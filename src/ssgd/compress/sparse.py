"""The sparse value type and the pure functions on it (selection, merge, wire format).

Wire format (gTop-k paper, 4-byte index + 4-byte value): a sparse vector of n entries travels as
one int32 tensor of 2n elements, `cat([idx.int32, val.float32.view(int32)])`, which is lossless
(unlike the released code's float64 packing, papers.md section 9.2) and 8 bytes per entry.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

MAX_NUMEL = 2**31 - 1   # indices travel as int32


@dataclass(frozen=True)
class Sparse:
    """n entries of a flat vector of length `numel`.

    idx: int64 [n], distinct positions in [0, numel); val: float32 [n]. Order carries no meaning.
    """

    idx: Tensor
    val: Tensor
    numel: int

    def __len__(self) -> int:
        return self.idx.numel()

    def to_dense(self, scale: float = 1.0) -> Tensor:
        """float32 [numel], zero outside idx; val / scale at idx (division done element-wise)."""
        out = torch.zeros(self.numel, dtype=self.val.dtype, device=self.val.device)
        out[self.idx] = self.val if scale == 1.0 else self.val / scale
        return out

    def restrict(self, keep: Tensor) -> Sparse:
        """The entries where the bool [n] mask `keep` is true."""
        return Sparse(self.idx[keep], self.val[keep], self.numel)


def select_topk(u: Tensor, k: int) -> Sparse:
    """Exact Top-k by magnitude of the 1-D float tensor u (ties broken by torch.topk)."""
    idx = torch.topk(u.abs(), k, sorted=False).indices
    return Sparse(idx, u[idx], u.numel())


def pack_sparse(s: Sparse) -> Tensor:
    """int32 [2n]: indices then the values' bits."""
    return torch.cat([s.idx.to(torch.int32), s.val.to(torch.float32).view(torch.int32)])


def unpack_sparse(buf: Tensor, numel: int) -> Sparse:
    """Inverse of `pack_sparse` (bit-exact)."""
    n = buf.numel() // 2
    return Sparse(buf[:n].to(torch.int64), buf[n:].view(torch.float32), numel)


def sum_sparse(parts: list[Sparse]) -> Sparse:
    """Sum of sparse vectors; result has distinct indices in increasing order.

    Values on a common index are added left to right in list order (index_add_ on CPU is serial
    at one intra-op thread), so the bits equal a dense rank-order sum of the parts (on CPU; CUDA's
    index_add_ accumulates in no fixed order).
    """
    numel = parts[0].numel
    idx = torch.cat([p.idx for p in parts])
    val = torch.cat([p.val for p in parts])
    uniq, inverse = torch.unique(idx, sorted=True, return_inverse=True)
    out = torch.zeros(uniq.numel(), dtype=val.dtype, device=val.device).index_add_(0, inverse, val)
    return Sparse(uniq, out, numel)


def merge_topk(a: Sparse, b: Sparse, k: int) -> Sparse:
    """One gTop-k tree merge (gTop-k paper; released code `gtopk_sparse_allreduce`):
    1. sum the two vectors (values on common indices are added first),
    2. keep the k entries of largest magnitude (all of them if there are at most k),
    returned in increasing index order.
    """
    s = sum_sparse([a, b])
    if len(s) <= k:
        return s
    sel = torch.topk(s.val.abs(), k, sorted=False).indices.sort().values
    return Sparse(s.idx[sel], s.val[sel], s.numel)


def k_of(d: int, density: float) -> int:
    """k = max(int(d * density), 1), as in both released code bases."""
    return max(int(d * density), 1)
