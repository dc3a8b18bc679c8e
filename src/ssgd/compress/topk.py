"""Exact Top-k sparsification (TopK-SGD / gTop-k S-SGD; Shi et al., ICDCS 2019, arXiv:1901.04359;
released code hclhkbu/gtopkssgd and hclhkbu/GaussianK-SGD compression.py)."""
from __future__ import annotations

from torch import Tensor

from ssgd.compress.base import Compressor
from ssgd.compress.sparse import k_of, select_topk
from ssgd.payload import Sparse


class TopK(Compressor):
    """The k = max(int(d * density), 1) entries of u with the largest magnitude, over the whole
    flattened model (not per layer), as in both released code bases."""

    selection_cost = "exact_topk"

    def compress(self, u: Tensor, density: float) -> Sparse:
        return select_topk(u, k_of(u.numel(), density))
