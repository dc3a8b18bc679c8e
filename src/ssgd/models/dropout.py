"""Dropout that draws its mask from a per-rank `torch.Generator`.

Virtual workers that run in threads share torch's global RNG, so stock `nn.Dropout` gives a different
mask sequence on every run. Every model in this package uses `GenDropout` instead; the trainer hands
each rank its own generator with `use_generator` and refuses models for which `has_global_dropout`
is True.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from ssgd.errors import BadArgument


class GenDropout(nn.Module):
    """Inverted dropout whose Bernoulli mask comes from `self.gen` (None = torch's global RNG).

    With the same RNG state it is bit-identical to `nn.Dropout(p)` on the CPU, where both compute
    `x * empty_like(x).bernoulli_(1 - p).div_(1 - p)`. (On CUDA, `nn.Dropout` uses a fused kernel that
    draws differently; `GenDropout` still computes the formula above.)

    Args:
        p: probability of zeroing an element, in [0, 1).
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        p = float(p)
        if not 0.0 <= p < 1.0:
            raise BadArgument("dropout", p, "the dropout probability must be in [0, 1)")
        self.p = p
        self.gen: torch.Generator | None = None

    def forward(self, x: Tensor) -> Tensor:
        """x: float tensor of any shape -> same shape and dtype; the identity in eval mode or p == 0."""
        if not self.training or self.p == 0.0:
            return x
        noise = torch.empty_like(x).bernoulli_(1.0 - self.p, generator=self.gen).div_(1.0 - self.p)
        return x * noise

    def extra_repr(self) -> str:
        return f"p={self.p}"


def use_generator(module: nn.Module, gen: torch.Generator) -> None:
    """Make every `GenDropout` inside `module` (itself included) draw from `gen`.

    Side effect: sets the `gen` attribute in place; `gen` is shared, not copied, so the modules
    advance one stream in call order. `gen` must live on the activations' device (a CPU generator
    cannot drive `bernoulli_` on a CUDA tensor).
    """
    for m in module.modules():
        if isinstance(m, GenDropout):
            m.gen = gen


def has_global_dropout(module: nn.Module) -> bool:
    """True if `module` holds randomness that draws from torch's global RNG.

    That is any stock dropout module (`nn.Dropout`, `nn.Dropout1d/2d/3d`, `nn.AlphaDropout`,
    `nn.FeatureAlphaDropout`, including those inside `nn.Transformer*` layers) and any multi-layer
    `nn.RNN` / `nn.LSTM` / `nn.GRU` with its own `dropout` > 0.
    """
    for m in module.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd):
            return True
        if isinstance(m, nn.RNNBase) and m.dropout > 0 and m.num_layers > 1:
            return True
    return False
