"""A model that replays a profile's per-layer compute times instead of computing: the replay mode.

`Replay(spec, profile="resnet50")` has one flat parameter per layer of the shipped iteration-time profile
(`ssgd.perf.profiles`: the gTop-k paper's models at the paper's GPU speed, layer sizes from the real
models), so its d and its layer sizes are the paper model's. Its forward pass sleeps each layer's
forward time, in forward order; its backward pass sleeps each layer's backward time in backward order
(output layer first, as autograd visits them) and hands that layer a gradient of the layer's size. The
trainer, the compressor, the collectives and the network are the real ones; only the compute is replayed,
by sleeping, so P ranks on a machine with fewer cores still see the paper's compute time each (Shi et al.,
"A Distributed Synchronous SGD Algorithm with Global Top-k Sparsification", ICDCS 2019, arXiv:1901.04359,
scaling experiments: measured here on emulated links instead of modelled).

The gradients: one fixed random vector per layer (N(0, 1e-4), the same on every rank), rolled by a shift
taken from the batch, so that ranks with different data send different Top-k indices and a step costs
one copy of d floats. The loss and its accuracy mean nothing; the outputs are zeros.

Contract: forward(x) with x a float batch [N, ...] returns zeros [N, num_classes] wired to every layer;
time_scale multiplies every sleep (0: no replayed compute, only the real work). Image data only (any
values: a synthetic dataset is enough); token data is refused with a ConfigError.
"""
from __future__ import annotations

import time

import torch
from torch import Tensor, nn

from ssgd.data.base import DataSpec
from ssgd.errors import ConfigError
from ssgd.perf import profiles

GRAD_STD = 1e-2
GRAD_SEED = 20190104


class _Layer(torch.autograd.Function):
    """Passes h through; sleeps forward_s / backward_s; the weight's gradient is the rolled base vector."""

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, forward_s: float, backward_s: float,  # noqa: ANN001
                base: Tensor, shift: int) -> Tensor:
        ctx.backward_s, ctx.base, ctx.shift = backward_s, base, shift
        if forward_s > 0:
            time.sleep(forward_s)
        return h.clone()

    @staticmethod
    def backward(ctx, grad_h: Tensor) -> tuple:  # noqa: ANN001
        if ctx.backward_s > 0:
            time.sleep(ctx.backward_s)
        return grad_h, torch.roll(ctx.base, ctx.shift), None, None, None, None


def batch_shift(x: Tensor) -> int:
    """A non-negative integer that depends on the batch's values (its first 64 entries): the gradients'
    roll, so that different batches (ranks) give different gradients, deterministically."""
    head = x.detach().reshape(-1)[:64].double()
    return int((head.abs().sum().item() * 1e4) % (1 << 30))


class Replay(nn.Module):
    """The paper model `profile` with its compute replayed by sleeping (module docstring)."""

    def __init__(self, spec: DataSpec, profile: str = "resnet20", time_scale: float = 1.0) -> None:
        super().__init__()
        if spec.kind != "image":
            raise ConfigError(f"model.profile={profile}: the replay model needs image data (any values, e.g. "
                              f"dataset=synthetic_cifar10), got {spec.kind} data ({spec.name or 'dataset'})")
        if not time_scale >= 0:
            raise ConfigError(f"model.time_scale={time_scale}: must be >= 0 (1 = the profile's times)")
        try:
            prof = profiles.load(str(profile))
        except ValueError as err:
            raise ConfigError(f"model.profile={profile}: {err}") from None
        self.profile, self.num_classes = prof, spec.num_classes
        # forward order = reversed backward order; parameter i is forward layer i
        order = list(range(len(prof.layers)))[::-1]
        self.layer_names = [prof.layers[i] for i in order]
        self.forward_s = [prof.forward_s[i] * time_scale for i in order]
        self.backward_s = [prof.backward_s[i] * time_scale for i in order]
        self.weights = nn.ParameterList(nn.Parameter(torch.zeros(prof.params[i])) for i in order)
        self._bases: list[Tensor] | None = None     # made on first use, not state (no buffers: not in checkpoints)

    def bases(self) -> list[Tensor]:
        """The fixed per-layer gradient vectors, on the parameters' device (same on every rank)."""
        if self._bases is None or self._bases[0].device != self.weights[0].device:
            gen = torch.Generator().manual_seed(GRAD_SEED)
            self._bases = [(torch.randn(w.numel(), generator=gen) * GRAD_STD).to(w.device) for w in self.weights]
        return self._bases

    def forward(self, x: Tensor) -> Tensor:
        h = x.new_zeros(x.shape[0], self.num_classes)
        shift = batch_shift(x)
        for w, f, b, base in zip(self.weights, self.forward_s, self.backward_s, self.bases()):
            h = _Layer.apply(h, w, f, b, base, shift % base.numel())
        return h
