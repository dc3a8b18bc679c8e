"""Exact Top-k sparsification (TopK-SGD / gTop-k S-SGD; papers.md section 2.1)."""
from __future__ import annotations

from torch import Tensor

from ssgd.compress.base import Compressor
from ssgd.compress.sparse import Sparse, k_of, select_topk


class TopK(Compressor):
    """The k = max(int(d * density), 1) entries of u with the largest magnitude, over the whole
    flattened model (not per layer), as in both released code bases."""

    selection_cost = "exact_topk"

    def compress(self, u: Tensor, density: float) -> Sparse:
        return select_topk(u, k_of(u.numel(), density))
