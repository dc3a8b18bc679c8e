"""Local, communication-free gradient compressors."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import torch
from torch import Tensor

from ssgd.payload import Payload


class Compressor(ABC):
    """Maps the compensated gradient u (float32 [d], 1-D, contiguous) to what this rank sends, a
    `ssgd.payload.Payload` (`Dense` or `Sparse` for the built-in compressors).

    One instance per rank: anything random draws from the instance's own `generator`, never from
    the process-global RNG (virtual workers share one process). `compress` must not modify u, and
    sparse values must be copies (the residual buffer that holds u is edited afterwards; see
    `Payload.subtract_from`).

    selection_cost: how the iteration-time model (`ssgd.perf.iteration`) times one `compress` call,
    declared by every concrete compressor: "none" (free: nothing is selected), "exact_topk" (a full
    top-k of the d-vector, the profile's select_s) or "linear" (a few O(d) passes such as a threshold
    or a random draw, the profile's threshold_select_s). A new kind needs a new profile time there.
    """

    selection_cost: ClassVar[str]

    def __init__(self, generator: torch.Generator | None = None) -> None:
        self.generator = generator

    @abstractmethod
    def compress(self, u: Tensor, density: float) -> Payload:
        ...

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()} if self.generator is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.generator is not None and "generator" in state:
            self.generator.set_state(state["generator"])
