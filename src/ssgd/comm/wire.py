"""The wire format of `Sparse` payloads in the sparse collectives (AllGather, gTopKAllReduce).

gTop-k paper (Shi et al., ICDCS 2019, arXiv:1901.04359) counts 4 bytes per index and 4 per value:
a sparse vector of n entries travels as one int32 tensor of 2n elements,
`cat([idx.int32, val.float32.view(int32)])`. That is lossless and 8 bytes per entry, unlike the
released code's packing into one float64 buffer (hclhkbu/gtopkssgd, allreducer.py), which takes 16
bytes per entry and keeps indices exact only below 2^53. The price of int32 indices: a vector may
have at most `MAX_NUMEL` entries; `pack_sparse` refuses longer ones, and
`ssgd.comm.base.Collective.check_numel` lets a caller refuse such a model before training.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ssgd.payload import Sparse

MAX_NUMEL = 2**31 - 1   # indices travel as int32


def check_numel(numel: int, what: str = "sparse payload") -> None:
    """ValueError (one line) when a vector of `numel` entries cannot use the int32 wire format."""
    if numel > MAX_NUMEL:
        raise ValueError(f"{what}: d={numel:,} exceeds {MAX_NUMEL:,} (2^31 - 1), the largest length whose "
                         "indices fit the int32 wire format of the sparse collectives")


def pack_sparse(s: Sparse, out: Tensor | None = None) -> Tensor:
    """int32 [2n]: indices then the values' bits, written into `out` (int32 [2n]) when given, which
    is then returned. ValueError when s.numel > MAX_NUMEL."""
    check_numel(s.numel)
    if out is None:
        return torch.cat([s.idx.to(torch.int32), s.val.to(torch.float32).view(torch.int32)])
    return pack_entries(s.idx, s.val, out)


def pack_entries(idx: Tensor, val: Tensor, out: Tensor) -> Tensor:
    """`pack_sparse` of (indices < 2^31, values) into `out` (int32 [2n]); returns `out`."""
    n = idx.numel()
    if out.dtype != torch.int32 or out.shape != (2 * n,):
        raise ValueError(f"pack_sparse: out must be int32 [{2 * n}], got {out.dtype} {tuple(out.shape)}")
    out[:n].copy_(idx)
    out[n:].view(torch.float32).copy_(val)
    return out


def unpack_sparse(buf: Tensor, numel: int) -> Sparse:
    """Inverse of `pack_sparse` (bit-exact). The indices are a new int64 tensor; the values are a
    float32 VIEW of `buf` (no copy): valid while `buf` is not reused."""
    n = buf.numel() // 2
    return Sparse(buf[:n].to(torch.int64), buf[n:].view(torch.float32), numel)
