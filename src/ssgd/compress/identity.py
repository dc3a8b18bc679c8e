"""Dense S-SGD: send the whole gradient."""
from __future__ import annotations

from torch import Tensor

from ssgd.compress.base import Compressor


class Identity(Compressor):
    """Sends u unchanged (density is ignored; achieved density 1)."""

    selection_cost = "none"

    def compress(self, u: Tensor, density: float) -> Tensor:
        return u
