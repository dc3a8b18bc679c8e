"""Error-feedback memory (residual accumulation), one instance per rank.

TopK-SGD with error feedback, as in both released code bases (hclhkbu/gtopkssgd;
hclhkbu/GaussianK-SGD, compression.py): u = g + e; after the collective, e = u minus what counted
as sent. The residual stores raw gradients (no momentum correction), as released.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ssgd.payload import Payload


class NoMemory:
    """No error feedback: u = g and nothing is kept."""

    def __init__(self, d: int = 0, device: torch.device | str = "cpu") -> None:
        pass

    def compensate(self, grad: Tensor) -> Tensor:
        return grad

    def buffer(self, d: int, device: torch.device | str = "cpu") -> Tensor:
        """A new float32 [d] buffer for a gradient written in parts: `write` overwrites it; u = g."""
        return torch.zeros(d, dtype=torch.float32, device=device)

    def write(self, view: Tensor, part: Tensor | None) -> None:
        if part is None:
            view.zero_()
        else:
            view.copy_(part)

    def update(self, sent: Payload) -> None:
        pass

    def norm(self) -> float:
        return 0.0

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class ResidualMemory:
    """Residual e (float32 [d], starts at 0).

    `compensate(g)` adds g into e IN PLACE and returns that buffer as u (no extra d-sized copy);
    `buffer` and `write` let a replica add the gradient's parts into e directly.
    `update(sent)` then turns the buffer into the new residual u - sent with
    `sent.subtract_from(e)` (O(k) for a sparse payload: it zeroes the sent positions). Contract:
    `sent` was made from u (compressors copy), and nobody reads u after `update`.
    """

    def __init__(self, d: int, device: torch.device | str = "cpu") -> None:
        self.e = torch.zeros(d, dtype=torch.float32, device=device)

    def compensate(self, grad: Tensor) -> Tensor:
        return self.e.add_(grad)

    def buffer(self, d: int, device: torch.device | str = "cpu") -> Tensor:
        """e itself: `write` ADDS a gradient's parts into the residual, which then is u = g + e (the same
        float additions as `compensate`, without first copying g into a flat buffer: one write and one
        read of d values less per step)."""
        return self.e

    def write(self, view: Tensor, part: Tensor | None) -> None:
        view.add_(0.0 if part is None else part)      # u = e + g, as e.add_(flat g) would give

    def update(self, sent: Payload) -> None:
        sent.subtract_from(self.e)

    def norm(self) -> float:
        return float(torch.linalg.vector_norm(self.e))

    def state_dict(self) -> dict:
        return {"e": self.e.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.e.copy_(state["e"])
