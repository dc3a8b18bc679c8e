"""Weak-scaling data-parallel batching: each of P ranks takes its own slice of a global batch."""
from __future__ import annotations

import torch
from torch import Tensor

from ssgd.errors import ConfigError
from ssgd.utils.seeding import derive_seed


def steps_per_epoch(samples: int, P: int, batch_size: int) -> int:
    """Full global batches of P x batch_size in `samples`; ConfigError when there is not even one."""
    if batch_size < 1:
        raise ConfigError(f"trainer.batch_size={batch_size}: must be a positive integer (samples per worker)")
    steps = samples // (P * batch_size)
    if steps == 0:
        raise ConfigError(f"trainer.batch_size={batch_size} x cluster.world_size={P} = {P * batch_size} samples per "
                          f"step, more than the {samples} training samples: lower one of them")
    return steps


class ShardedLoader:
    """Deterministic per-epoch shuffling and per-rank sharding of in-memory tensors.

    Epoch e uses a permutation drawn from (seed, e) alone; step s of rank r reads positions
    [(s*P + r)*b, (s*P + r + 1)*b) of it, so the P ranks of a step together read one global batch
    of P*b distinct samples (the last partial global batch of an epoch is dropped). Call
    `set_epoch` (from one thread) before reading batches of a new epoch.
    """

    def __init__(self, x: Tensor, y: Tensor, P: int, batch_size: int, seed: int) -> None:
        self.x, self.y, self.P, self.b, self.seed = x, y, P, batch_size, seed
        self.steps_per_epoch = steps_per_epoch(x.shape[0], P, batch_size)
        self.epoch, self.perm = -1, torch.arange(0)

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            gen = torch.Generator().manual_seed(derive_seed(self.seed, 0, f"shuffle/{epoch}"))
            self.perm, self.epoch = torch.randperm(self.x.shape[0], generator=gen), epoch

    def batch(self, step: int, rank: int) -> tuple[Tensor, Tensor]:
        start = (step * self.P + rank) * self.b
        idx = self.perm[start:start + self.b]
        return self.x[idx], self.y[idx]
