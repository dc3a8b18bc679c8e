"""One rank's model replica and its forward/backward/compress work in one step."""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ssgd.comm.base import Reduced
from ssgd.models.dropout import use_generator
from ssgd.payload import Payload
from ssgd.loop.sync import RankSync


@dataclass(frozen=True)
class LocalStep:
    """What one rank produced in one step (scalars are Python floats)."""

    payload: Payload
    u: Tensor              # the compensated gradient g + e (aliases a buffer: valid until settle)
    loss: float
    correct: float
    samples: float
    compute_s: float
    compress_s: float


def loss_and_correct(out: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """Cross-entropy over the last dimension (classes or vocabulary) and the number of hits."""
    logits, target = out.reshape(-1, out.shape[-1]), y.reshape(-1)
    return F.cross_entropy(logits, target), (logits.argmax(1) == target).sum()


class Replica:
    """A rank's module (own buffers, possibly shared Parameters), dropout generator and sync state.

    `params` is the list of Parameters gradients are taken with respect to; `sync` was made with their
    shapes as `parts`, so each step's gradient goes, part by part, where the memory says: added into
    the residual e (which then is u = g + e; no separate gradient buffer exists), or copied into this
    rank's own float32 [d] buffer (the dense payload, for a scheme without error feedback).
    """

    def __init__(self, module: nn.Module, params: list[nn.Parameter], sync: RankSync,
                 dropout_gen: torch.Generator) -> None:
        self.module, self.params, self.sync, self.dropout_gen = module, params, sync, dropout_gen
        use_generator(module, dropout_gen)
        self.device = params[0].device

    def step(self, x: Tensor, y: Tensor, density: float) -> LocalStep:
        """Forward, backward, then u = g + e and its payload (`RankSync.compress`)."""
        t0 = time.perf_counter()
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        self.module.train()
        loss, correct = loss_and_correct(self.module(x), y)
        grads = torch.autograd.grad(loss, self.params, allow_unused=True)
        loss_value, hits = loss.item(), float(correct)   # on CUDA this waits for the backward pass
        t1 = time.perf_counter()
        u, payload = self.sync.compress(grads, density)
        if u.is_cuda:
            torch.cuda.synchronize(u.device)              # so that compress_s covers the selection
        t2 = time.perf_counter()
        return LocalStep(payload, u, loss_value, hits, float(y.numel()), t1 - t0, t2 - t1)

    def settle(self, payload: Payload, reduced: Reduced) -> None:
        """After the collective: this rank's residual becomes u - what counted as sent."""
        self.sync.settle(payload, reduced)

    def state_dict(self) -> dict:
        return {"buffers": {n: b.clone() for n, b in self.module.named_buffers()},
                "memory": self.sync.memory.state_dict(), "compressor": self.sync.compressor.state_dict(),
                "dropout_gen": self.dropout_gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        buffers = dict(self.module.named_buffers())
        for name, value in state["buffers"].items():
            buffers[name].copy_(value)
        self.sync.memory.load_state_dict(state["memory"])
        self.sync.compressor.load_state_dict(state["compressor"])
        self.dropout_gen.set_state(state["dropout_gen"])
