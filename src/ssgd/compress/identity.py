"""Dense S-SGD: send the whole gradient."""
from __future__ import annotations

from torch import Tensor

from ssgd.compress.base import Compressor
from ssgd.payload import Dense


class Identity(Compressor):
    """Sends u unchanged (density is ignored; achieved density 1)."""

    selection_cost = "none"

    def compress(self, u: Tensor, density: float) -> Dense:
        return Dense(u)
