"""ImageNet background decoding (`dataset.workers`): the same batches, rows and values as decoding one image
after another in the training thread, with and without the loader's prefetch of each rank's next batch."""
from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest
import torch

from conftest import make_cfg, train
from ssgd.data import imagenet
from ssgd.data.loader import ShardedLoader
from ssgd.errors import ConfigError
from test_paper_data import FAST_RUN, write_imagenet


def epoch_batches(data, P: int, b: int, seed: int = 3) -> list[tuple[torch.Tensor, torch.Tensor]]:
    loader = ShardedLoader(data.x_train, data.y_train, P, b, seed)
    out = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        for step in range(loader.steps_per_epoch):
            out += [loader.batch(step, r) for r in range(P)]
    return out


def test_worker_decoding_equals_serial_decoding(tmp_path: Path) -> None:
    write_imagenet(tmp_path, side=12)        # PNGs and JPEGs, resized and centre-cropped to 8 x 8
    serial, pooled = imagenet(tmp_path, image_size=8), imagenet(tmp_path, image_size=8, workers=3)
    assert serial.x_train.workers == 0 and pooled.x_train.workers == 3
    idx = torch.tensor([5, 0, 3, 3, 1])
    assert torch.equal(pooled.x_train[idx], serial.x_train[idx])
    assert torch.equal(pooled.x_val[0:3], serial.x_val[0:3]) and torch.equal(pooled.x_train[-2], serial.x_train[4])
    # through the loader: every batch of two epochs, P = 2 ranks of 1 image (the loader prefetches the next)
    a, b = epoch_batches(serial, 2, 1), epoch_batches(pooled, 2, 1)
    assert len(a) == len(b) == 12
    assert all(torch.equal(xa, xb) and torch.equal(ya, yb) for (xa, ya), (xb, yb) in zip(a, b))


def test_prefetch_is_taken_by_the_matching_batch_only(tmp_path: Path) -> None:
    write_imagenet(tmp_path)
    x = imagenet(tmp_path, image_size=8, workers=2).x_train
    x.prefetch(torch.tensor([2, 4]))
    x.prefetch(torch.tensor([2, 4]))           # asked twice: decoded once
    assert list(x._pending) == [(2, 4)]
    other = x[torch.tensor([4, 2])]           # other rows (order matters): decoded afresh
    assert list(x._pending) == [(2, 4)]
    got = x[torch.tensor([2, 4])]
    assert not x._pending and torch.equal(got, other.flip(0))
    serial = imagenet(tmp_path, image_size=8).x_train
    serial.prefetch(torch.tensor([1]))        # no workers: nothing happens
    assert not serial._pending


def test_image_files_with_workers_copy_and_pickle(tmp_path: Path) -> None:
    write_imagenet(tmp_path)
    x = imagenet(tmp_path, image_size=8, workers=2).x_train
    x[torch.tensor([0])]                      # the pool exists now
    for y in (pickle.loads(pickle.dumps(x)), copy.deepcopy(x)):
        assert y.workers == 2 and y.files == x.files and torch.equal(y[torch.tensor([1])], x[torch.tensor([1])])


@pytest.mark.parametrize("workers", [-1, 1.5, True])
def test_bad_workers_is_one_clear_error(tmp_path: Path, workers) -> None:
    write_imagenet(tmp_path)
    with pytest.raises(ConfigError, match="dataset.workers"):
        imagenet(tmp_path, image_size=8, workers=workers)


def test_config_has_workers_and_trains(tmp_path: Path) -> None:
    assert make_cfg("dataset=imagenet").dataset.workers == 4
    write_imagenet(tmp_path / "i", side=10)
    runs = [train(tmp_path / f"run{w}", "dataset=imagenet", f"dataset.data_dir='{tmp_path / 'i'}'",
                  "dataset.image_size=8", "model=fnn3", f"dataset.workers={w}", *FAST_RUN)[1] for w in (0, 3)]
    assert all(torch.equal(p, q) for p, q in zip(*runs))
