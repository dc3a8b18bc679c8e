"""This process's model replicas: one per local rank, and its forward/backward in one step."""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ssgd.models.dropout import use_generator
from ssgd.utils.seeding import rank_generator
from ssgd.worlds.base import World


@dataclass(frozen=True)
class LocalStats:
    """What one rank's forward/backward reports besides its gradient (Python floats)."""

    loss: float
    correct: float             # correct predictions in its micro-batch
    samples: float
    compute_s: float           # forward + backward


def loss_and_correct(out: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """Cross-entropy over the last dimension (classes or vocabulary) and the number of hits."""
    logits, target = out.reshape(-1, out.shape[-1]), y.reshape(-1)
    return F.cross_entropy(logits, target), (logits.argmax(1) == target).sum()


class Replica:
    """A rank's module (own buffers, possibly shared Parameters) and dropout generator.

    `params` is the list of Parameters gradients are taken with respect to (the same list on every
    replica of a process)."""

    def __init__(self, module: nn.Module, params: list[nn.Parameter], dropout_gen: torch.Generator) -> None:
        self.module, self.params, self.dropout_gen = module, params, dropout_gen
        use_generator(module, dropout_gen)
        self.device = params[0].device

    def step(self, x: Tensor, y: Tensor) -> tuple[tuple[Tensor | None, ...], LocalStats]:
        """Forward and backward on one micro-batch: the gradient's parts (in the order of `params`; None
        for a parameter the loss does not reach) and the loss, hits and seconds."""
        t0 = time.perf_counter()
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        self.module.train()
        loss, correct = loss_and_correct(self.module(x), y)
        grads = torch.autograd.grad(loss, self.params, allow_unused=True)
        loss_value, hits = loss.item(), float(correct)   # on CUDA this waits for the backward pass
        return grads, LocalStats(loss_value, hits, float(y.numel()), time.perf_counter() - t0)

    def state_dict(self) -> dict:
        return {"buffers": {n: b.clone() for n, b in self.module.named_buffers()},
                "dropout_gen": self.dropout_gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        buffers = dict(self.module.named_buffers())
        for name, value in state["buffers"].items():
            buffers[name].copy_(value)
        self.dropout_gen.set_state(state["dropout_gen"])


class Replicas(dict[int, Replica]):
    """{local rank: Replica} of `model` on `world` (`World.replicate`: the replicas share its trainable
    Parameters, `params`, d of them in all, on `device`); rank r's dropout draws from the (seed, r,
    "dropout") stream."""

    def __init__(self, model: nn.Module, world: World, seed: int) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.d = sum(p.numel() for p in self.params)
        self.device = self.params[0].device            # the model arrives on its device (ssgd.run.build.model)
        modules = world.replicate(model)
        super().__init__({r: Replica(m, self.params, rank_generator(seed, r, "dropout", self.device))
                          for r, m in zip(world.local_ranks, modules)})
