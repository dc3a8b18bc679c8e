"""Selection helpers shared by the sparsifying compressors: k and exact Top-k.

The sparse value type is `ssgd.payload.Sparse` and its wire format `ssgd.comm.wire`; `sum_sparse`
is re-exported here for callers that import it from this module (bench/threads_overhead.py).
"""
from __future__ import annotations

import torch
from torch import Tensor

from ssgd.payload import Sparse, sum_sparse

__all__ = ["k_of", "select_topk", "sum_sparse"]


def select_topk(u: Tensor, k: int) -> Sparse:
    """Exact Top-k by magnitude of the 1-D float tensor u (ties broken by torch.topk), in increasing
    index order (the order gTop-k's merge walks; sorting k indices costs nothing next to the topk)."""
    idx = torch.topk(u.abs(), k, sorted=False).indices.sort().values
    return Sparse(idx, u[idx], u.numel())


def k_of(d: int, density: float) -> int:
    """k = max(int(d * density), 1), as in both released code bases (hclhkbu/gtopkssgd,
    hclhkbu/GaussianK-SGD)."""
    return max(int(d * density), 1)
