"""CIFAR training augmentation (random crop with 4-pixel zero padding + horizontal flip, as the released
code's torchvision transforms): a hand-checked example, an independent per-image oracle, determinism per
(seed, rank, epoch, step), and an unaugmented validation split."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import make_cfg, train
from ssgd.data import cifar10
from ssgd.data.augment import AugmentedImages, crop_flip, random_crop_flip
from ssgd.data.cifar10 import normalize_cifar10
from ssgd.data.loader import ShardedLoader
from ssgd.errors import ConfigError
from test_paper_data import FAST_RUN, write_cifar


def test_crop_and_flip_by_hand():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).view(1, 1, 2, 2).repeat(4, 1, 1, 1)
    # padded by one pixel of 0:   0 0 0 0 / 0 1 2 0 / 0 3 4 0 / 0 0 0 0
    offsets = torch.tensor([[0, 2, 1, 1], [0, 2, 0, 1]])       # (row, column) of each crop's top-left corner
    flip = torch.tensor([False, False, True, True])
    out = crop_flip(x, offsets, flip, padding=1)
    assert out[0, 0].tolist() == [[0, 0], [0, 1]]
    assert out[1, 0].tolist() == [[4, 0], [0, 0]]
    assert out[2, 0].tolist() == [[1, 0], [3, 0]]              # [[0, 1], [0, 3]] mirrored
    assert out[3, 0].tolist() == [[2, 1], [4, 3]]              # the image itself, mirrored
    filled = crop_flip(x[:1], torch.tensor([[0], [0]]), torch.tensor([False]), padding=1, fill=[9.0])
    assert filled[0, 0].tolist() == [[9, 9], [9, 1]]


def oracle(x: torch.Tensor, offsets: torch.Tensor, flip: torch.Tensor, padding: int, fill: torch.Tensor):
    """One image at a time with F.pad, slicing and torch.flip, as torchvision's RandomCrop + flip do."""
    out = []
    for i in range(x.shape[0]):
        img = torch.stack([F.pad(x[i, ch], (padding,) * 4, value=float(fill[ch])) for ch in range(x.shape[1])])
        r, c = int(offsets[0, i]), int(offsets[1, i])
        img = img[:, r:r + x.shape[2], c:c + x.shape[3]]
        out.append(img.flip(-1) if flip[i] else img)
    return torch.stack(out)


def test_random_crop_flip_equals_a_per_image_oracle_and_covers_every_offset():
    x = torch.randn(400, 3, 8, 6, generator=torch.Generator().manual_seed(0))
    fill = torch.tensor([-1.0, 0.5, 2.0])
    g = torch.Generator().manual_seed(3)
    state = g.get_state()
    out = random_crop_flip(x, g, padding=2, fill=fill)
    g.set_state(state)                              # the documented draws: offsets [2, N], then flips [N]
    offsets = torch.randint(0, 5, (2, 400), generator=g)
    flip = torch.randint(0, 2, (400,), generator=g).bool()
    assert torch.equal(out, oracle(x, offsets, flip, 2, fill))
    assert set(offsets.flatten().tolist()) == set(range(5)) and 150 < int(flip.sum()) < 250
    assert out.shape == x.shape and not torch.equal(out, x)


def test_padding_with_black_then_normalising_equals_the_released_order():
    """torchvision pads the uint8 image with 0 and normalises after; we crop the normalised tensor."""
    pixels = torch.randint(0, 256, (16, 3, 32, 32), generator=torch.Generator().manual_seed(1), dtype=torch.uint8)
    black = normalize_cifar10(torch.zeros((1, 3, 1, 1), dtype=torch.uint8)).view(3)
    ours = random_crop_flip(normalize_cifar10(pixels), torch.Generator().manual_seed(7), padding=4, fill=black)
    released = normalize_cifar10(random_crop_flip(pixels.float(), torch.Generator().manual_seed(7), padding=4)
                                 .to(torch.uint8))
    assert torch.equal(ours, released)


def loader_batches(seed: int, images: torch.Tensor, epochs=(0, 1), P=3, b=4) -> dict:
    data = AugmentedImages(images, lambda x, g: random_crop_flip(x, g, padding=4))
    loader = ShardedLoader(data, torch.zeros(len(images), dtype=torch.int64), P, b, seed)
    out = {}
    for e in epochs:
        loader.set_epoch(e)
        for step in reversed(range(loader.steps_per_epoch)):       # any order: each batch stands alone
            for r in range(P):
                out[(e, step, r)] = loader.batch(step, r)[0]
    return out


def test_same_seed_same_crops_other_seeds_other_crops():
    images = torch.randn(48, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    a, b, c = loader_batches(1, images), loader_batches(1, images), loader_batches(2, images)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not any(torch.equal(a[k], c[k]) for k in a)
    # one rank's batch does not depend on which other ranks or batches were read before
    alone = ShardedLoader(AugmentedImages(images, lambda x, g: random_crop_flip(x, g, padding=4)),
                          torch.zeros(48, dtype=torch.int64), 3, 4, 1)
    alone.set_epoch(1)
    assert torch.equal(alone.batch(2, 1)[0], a[(1, 2, 1)])


def test_cifar10_augments_the_training_split_only(tmp_path: Path):
    write_cifar(tmp_path / "c", per_batch=8)
    plain, aug = cifar10(tmp_path / "c"), cifar10(tmp_path / "c", augment=True)
    assert isinstance(aug.x_train, AugmentedImages) and torch.equal(aug.x_train.images, plain.x_train)
    assert torch.equal(aug.x_val, plain.x_val) and isinstance(aug.x_val, torch.Tensor)   # eval: never augmented
    idx = torch.tensor([3, 0, 7])
    assert torch.equal(aug.x_train[idx], plain.x_train[idx]) and aug.x_train.shape == plain.x_train.shape
    loader = ShardedLoader(aug.x_train, aug.y_train, 2, 4, seed=0)
    loader.set_epoch(0)
    x, y = loader.batch(0, 1)
    rows = loader.indices(0, 1)
    assert torch.equal(y, aug.y_train[rows]) and not torch.equal(x, plain.x_train[rows])
    with pytest.raises(ConfigError, match="dataset.augment"):
        cifar10(tmp_path / "c", augment="yes")


def test_cifar10_config_augments_and_trains(tmp_path: Path):
    assert make_cfg("dataset=cifar10").dataset.augment is True
    write_cifar(tmp_path / "c")
    runs = [train(tmp_path / f"run{i}", "dataset=cifar10", f"dataset.data_dir='{tmp_path / 'c'}'", "model=fnn3",
                  "compressor=topk", *FAST_RUN)[1] for i in range(2)]
    assert all(torch.equal(p, q) for p, q in zip(runs[0], runs[1]))          # deterministic
    off = train(tmp_path / "off", "dataset=cifar10", f"dataset.data_dir='{tmp_path / 'c'}'", "model=fnn3",
                "compressor=topk", "dataset.augment=false", *FAST_RUN)[1]
    assert not all(torch.equal(p, q) for p, q in zip(runs[0], off))         # the crops reached the model
