"""Weak-scaling data-parallel batching: each of P ranks takes its own slice of a global batch."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from ssgd.errors import ConfigError
from ssgd.utils.seeding import derive_seed, rank_generator


@runtime_checkable
class Augmenting(Protocol):
    """Training images with a random per-batch transform (`ssgd.data.augment.AugmentedImages`)."""

    def augment(self, rows: Tensor, generator: torch.Generator) -> Tensor: ...


@runtime_checkable
class Prefetching(Protocol):
    """Images decoded from files that can start decoding a batch before it is asked for
    (`ssgd.data.imagenet.ImageFiles` with workers)."""

    def prefetch(self, index: Tensor) -> None: ...


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

    Training images that augment (`Augmenting`, e.g. CIFAR-10 with `augment: true`) are transformed per
    batch with a generator drawn from (seed, rank, epoch, step) alone, `rank_generator(seed, rank,
    "augment/<epoch>/<step>")`: virtual rank r under the threads backend and MPI rank r get the same
    crops, and a run resumed from a checkpoint draws those it would have drawn. Images that prefetch
    (`Prefetching`) are asked to start decoding the rank's next batch of the epoch when this one is read;
    the batch contents do not depend on it.
    """

    def __init__(self, x: Tensor, y: Tensor, P: int, batch_size: int, seed: int) -> None:
        self.x, self.y, self.P, self.b, self.seed = x, y, P, batch_size, seed
        self.steps_per_epoch = steps_per_epoch(x.shape[0], P, batch_size)
        self.epoch, self.perm = -1, torch.arange(0)

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            gen = torch.Generator().manual_seed(derive_seed(self.seed, 0, f"shuffle/{epoch}"))
            self.perm, self.epoch = torch.randperm(self.x.shape[0], generator=gen), epoch

    def indices(self, step: int, rank: int) -> Tensor:
        """Positions in the training set of batch `step` of rank `rank` in the current epoch."""
        start = (step * self.P + rank) * self.b
        return self.perm[start:start + self.b]

    def batch(self, step: int, rank: int) -> tuple[Tensor, Tensor]:
        idx = self.indices(step, rank)
        x = self.x[idx]
        if isinstance(self.x, Augmenting):
            x = self.x.augment(x, rank_generator(self.seed, rank, f"augment/{self.epoch}/{step}"))
        if isinstance(self.x, Prefetching) and step + 1 < self.steps_per_epoch:
            self.x.prefetch(self.indices(step + 1, rank))
        return x, self.y[idx]
