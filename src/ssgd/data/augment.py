"""Random training augmentation, applied per batch by `ShardedLoader`, vectorised in torch.

The standard CIFAR training transform of the released code (hclhkbu/gtopkssgd and hclhkbu/GaussianK-SGD,
dl_trainer.py `cifar10_prepare`: torchvision `RandomCrop(32, padding=4)` then `RandomHorizontalFlip()`,
then ToTensor and Normalize) is `random_crop_flip` here: every image of the batch gets its own crop offset
(uniform in [0, 2 * padding] on each axis of the zero-padded image) and its own coin for the flip, drawn
from the generator the loader passes (one per rank and batch, so the threads and MPI backends draw the
same crops). Zero padding is padding with black pixels, i.e. with the value a black pixel has after the
dataset's normalisation (`fill`), so cropping the normalised images equals normalising the cropped ones.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

BatchTransform = Callable[[Tensor, torch.Generator], Tensor]


def random_crop_flip(x: Tensor, generator: torch.Generator, padding: int = 4,
                     fill: Sequence[float] | Tensor | None = None) -> Tensor:
    """float [N, C, H, W] -> float [N, C, H, W]: per image a random H x W crop of x padded by `padding`
    pixels on every side with `fill` (per channel; None: 0), then a horizontal flip with probability 1/2.

    Draws, in this order, the offsets [2, N] (row offsets, then column offsets, each uniform in
    [0, 2 * padding]) and the flips [N] (0 or 1) from `generator` (on the CPU), then `crop_flip`.
    x is not modified.
    """
    n = x.shape[0]
    offsets = torch.randint(0, 2 * padding + 1, (2, n), generator=generator)
    flip = torch.randint(0, 2, (n,), generator=generator).bool()
    return crop_flip(x, offsets, flip, padding, fill)


def crop_flip(x: Tensor, offsets: Tensor, flip: Tensor, padding: int,
              fill: Sequence[float] | Tensor | None = None) -> Tensor:
    """The deterministic part of `random_crop_flip`: image i is rows offsets[0, i] ... + H - 1 and
    columns offsets[1, i] ... + W - 1 of x[i] padded by `padding` pixels of `fill` (per channel; None: 0),
    mirrored left-right when flip[i]. One `torch.gather` for the whole batch (no per-image loop)."""
    n, c, h, w = x.shape
    wide = w + 2 * padding
    padded = torch.empty((n, c, h + 2 * padding, wide), dtype=x.dtype, device=x.device)
    padded[:] = (torch.zeros(c) if fill is None else torch.as_tensor(fill)).to(x).view(1, c, 1, 1)
    padded[:, :, padding:padding + h, padding:padding + w] = x
    rows = offsets[0, :, None] + torch.arange(h)                                  # [N, H]
    cols = offsets[1, :, None] + torch.arange(w)                                  # [N, W]
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    flat = (rows[:, :, None] * wide + cols[:, None, :]).view(n, 1, h * w).expand(n, c, h * w).to(x.device)
    return torch.gather(padded.view(n, c, -1), 2, flat).view(n, c, h, w)


class AugmentedImages:
    """Training images plus the random transform `ShardedLoader` applies to each batch read from them.

    Stands in for the float32 [N, C, H, W] tensor `images`: `.shape`, `.dtype`, `len()` and indexing
    return the stored, unaugmented rows (as evaluation or profiling want them); `augment(rows, generator)`
    is what the loader calls on a training batch. `images` holds the tensor itself.
    """

    def __init__(self, images: Tensor, transform: BatchTransform) -> None:
        self.images, self.transform = images, transform

    @property
    def shape(self) -> torch.Size:
        return self.images.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.images.dtype

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, key) -> Tensor:
        return self.images[key]

    def augment(self, rows: Tensor, generator: torch.Generator) -> Tensor:
        return self.transform(rows, generator)

    def __repr__(self) -> str:
        return f"AugmentedImages({list(self.images.shape)}, {getattr(self.transform, '__name__', self.transform)})"
