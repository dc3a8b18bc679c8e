"""Readers of the user's local CIFAR-10, PTB and ImageNet files, on tiny copies written here in the true formats.

No dataset ships with the repository: each test writes a few images or lines in the real layout
(CIFAR-10 python pickles, PTB text, an ImageFolder tree of PNG/JPEG files), reads them back exactly,
checks the one-line errors for missing and corrupt files, and trains 2 steps on them.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.io import encode_jpeg, encode_png, write_file

from conftest import make_cfg, train
from ssgd.data import DataSpec, ImageFiles, cifar10, imagenet, ptb
from ssgd.data.cifar10 import CIFAR10_MEAN, CIFAR10_STD, read_batch
from ssgd.data.imagenet import IMAGENET_MEAN, IMAGENET_STD
from ssgd.data.ptb import build_vocab, read_words
from ssgd.errors import ConfigError

FAST_RUN = ("cluster.world_size=2", "trainer.max_steps=2", "trainer.batch_size=2")


def test_dataset_configs_default_to_relative_data_paths() -> None:
    expected = {"cifar10": "data/cifar-10-batches-py", "ptb": "data/ptb", "imagenet": "data/imagenet"}
    for name, path in expected.items():
        assert make_cfg(f"dataset={name}").dataset.data_dir == path
    assert make_cfg("dataset=cifar10", "seed=7").dataset.seed == 7
    assert make_cfg("dataset=imagenet").dataset.image_size == 224
    assert make_cfg("dataset=ptb").dataset.seq_len == 35


# ---------------------------------------------------------------- CIFAR-10
def write_cifar(folder: Path, per_batch: int = 2, n_test: int = 3, seed: int = 0) -> dict[str, tuple]:
    """data_batch_1..5 and test_batch as CIFAR-10's python pickles; returns {name: (uint8 [N, 3072], labels)}."""
    rng = np.random.RandomState(seed)
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, n in [*((f"data_batch_{i}", per_batch) for i in range(1, 6)), ("test_batch", n_test)]:
        data = rng.randint(0, 256, size=(n, 3072)).astype(np.uint8)
        labels = [int(v) for v in rng.randint(0, 10, size=n)]
        batch = {b"batch_label": name.encode(), b"labels": labels, b"data": data,
                 b"filenames": [f"img_{i}.png".encode() for i in range(n)]}
        with (folder / name).open("wb") as f:
            pickle.dump(batch, f, protocol=2)
        written[name] = (data, labels)
    return written


def unnormalize_cifar(x: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
    return ((x * std + mean) * 255).round()


def test_cifar10_reads_the_python_batches_exactly(tmp_path: Path) -> None:
    written = write_cifar(tmp_path / "c")
    data = cifar10(tmp_path / "c")
    assert data.spec == DataSpec("image", (3, 32, 32), 10, "cifar10")
    assert data.x_train.shape == (10, 3, 32, 32) and data.x_train.dtype == torch.float32
    assert data.x_val.shape == (3, 3, 32, 32) and data.y_val.dtype == torch.int64
    train_rows = np.concatenate([written[f"data_batch_{i}"][0] for i in range(1, 6)])
    train_labels = sum((written[f"data_batch_{i}"][1] for i in range(1, 6)), [])
    assert data.y_train.tolist() == train_labels
    assert data.y_val.tolist() == written["test_batch"][1]
    # row layout: 1024 red, 1024 green, 1024 blue values, each plane row-major
    pixels = unnormalize_cifar(data.x_train)
    assert torch.equal(pixels, torch.as_tensor(train_rows).view(10, 3, 32, 32).float())
    assert pixels[3, 2, 5, 7] == float(train_rows[3, 2 * 1024 + 5 * 32 + 7])
    val_rows = torch.as_tensor(written["test_batch"][0]).view(3, 3, 32, 32)
    assert torch.equal(unnormalize_cifar(data.x_val), val_rows.float())
    expected = (torch.as_tensor(train_rows).view(10, 3, 32, 32).float() / 255
                - torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)) / torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
    torch.testing.assert_close(data.x_train, expected)


def test_cifar10_finds_torchvision_layout_and_takes_a_seeded_val_subset(tmp_path: Path) -> None:
    write_cifar(tmp_path / "cifar-10-batches-py")
    full = cifar10(tmp_path)  # the parent of cifar-10-batches-py, as torchvision's root
    a, b = cifar10(tmp_path, val_size=2, seed=4), cifar10(tmp_path, val_size=2, seed=4)
    assert a.x_val.shape == (2, 3, 32, 32) and torch.equal(a.x_val, b.x_val) and torch.equal(a.y_val, b.y_val)
    rows = [int((full.x_val == row).flatten(1).all(1).nonzero()) for row in a.x_val]  # each is a val image
    assert torch.equal(full.y_val[rows], a.y_val)
    with pytest.raises(ConfigError, match="dataset.val_size"):
        cifar10(tmp_path, val_size=4)


def test_cifar10_missing_files_name_the_key_and_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        cifar10(tmp_path / "nowhere")
    message = str(info.value)
    assert "dataset=cifar10" in message and str(tmp_path / "nowhere") in message
    assert "data_batch_1" in message and "test_batch" in message and "never downloads" in message
    assert "\n" not in message
    write_cifar(tmp_path / "c")
    (tmp_path / "c" / "data_batch_4").unlink()
    with pytest.raises(ConfigError, match="data_batch_5 and test_batch"):
        cifar10(tmp_path / "c")


@pytest.mark.parametrize(
    "damage, needle",
    [
        (lambda p: p.write_bytes(p.read_bytes()[:100]), "not a CIFAR-10 python batch"),  # truncated pickle
        (lambda p: p.write_bytes(b"not a pickle at all"), "not a CIFAR-10 python batch"),
        (lambda p: p.write_bytes(pickle.dumps([1, 2, 3])), "keys b'data' and b'labels'"),
        (lambda p: p.write_bytes(pickle.dumps({b"data": np.zeros((2, 3000), np.uint8), b"labels": [0, 1]})),
         "uint8 \\[N, 3072\\]"),
        (lambda p: p.write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.float32), b"labels": [0, 1]})),
         "uint8 \\[N, 3072\\]"),
        (lambda p: p.write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]})),
         "labels for 2 images"),
        (lambda p: p.write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 10]})),
         "expected 0-9"),
    ],
)
def test_cifar10_corrupt_batch_names_the_file(tmp_path: Path, damage, needle: str) -> None:
    write_cifar(tmp_path)
    damage(tmp_path / "data_batch_3")
    with pytest.raises(ConfigError, match=needle) as info:
        cifar10(tmp_path)
    assert str(tmp_path / "data_batch_3") in str(info.value)


def test_read_batch_returns_images_and_labels(tmp_path: Path) -> None:
    written = write_cifar(tmp_path, per_batch=4)
    images, labels = read_batch(tmp_path / "data_batch_2")
    assert images.dtype == torch.uint8 and images.shape == (4, 3, 32, 32)
    assert torch.equal(images.flatten(1), torch.as_tensor(written["data_batch_2"][0]))
    assert labels.dtype == torch.int64 and labels.tolist() == written["data_batch_2"][1]


def test_cifar10_trains_two_steps(tmp_path: Path) -> None:
    write_cifar(tmp_path / "c")
    summary, _ = train(tmp_path / "run", "dataset=cifar10", f"dataset.data_dir='{tmp_path / 'c'}'",
                       "model=resnet20", *FAST_RUN)
    assert summary["steps"] == 2 and 0.0 <= summary["val/acc"] <= 1.0


# ---------------------------------------------------------------- PTB
PTB_TRAIN = (" the cat sat on the mat \n"
             " the dog sat <unk> \n"
             " a cat ran \n"
             "\n"
             " the end")  # no final newline: the last line still gets its <eos>
PTB_VALID = " the zebra sat \n the cat ran \n"


def write_ptb(folder: Path, train_text: str = PTB_TRAIN, valid_text: str = PTB_VALID) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ptb.train.txt").write_text(train_text)
    (folder / "ptb.valid.txt").write_text(valid_text)
    return folder


def test_ptb_words_and_vocabulary() -> None:
    words = ["b", "a", "<eos>", "b", "c", "<eos>", "a", "b"]
    assert build_vocab(words) == ["b", "<eos>", "a", "c"]  # by count, ties alphabetically ("<" < "a")


def test_ptb_reads_the_text_files_exactly(tmp_path: Path) -> None:
    write_ptb(tmp_path)
    words = read_words(tmp_path / "ptb.train.txt")
    assert words == ["the", "cat", "sat", "on", "the", "mat", "<eos>", "the", "dog", "sat", "<unk>", "<eos>",
                     "a", "cat", "ran", "<eos>", "<eos>", "the", "end", "<eos>"]
    vocab = build_vocab(words)
    # counts: the 4, <eos> 5, cat 2, sat 2, then single words alphabetically
    assert vocab == ["<eos>", "the", "cat", "sat", "<unk>", "a", "dog", "end", "mat", "on", "ran"]
    data = ptb(tmp_path, seq_len=3)
    assert data.spec == DataSpec("tokens", (3,), 11, "ptb")
    ids = torch.tensor([vocab.index(w) for w in words])
    n = (len(words) - 1) // 3  # 6 windows of 4 tokens at stride 3
    assert data.x_train.dtype == torch.int64 and data.x_train.shape == (n, 3) == data.y_train.shape
    assert torch.equal(data.x_train, ids[: n * 3].view(n, 3))
    assert torch.equal(data.y_train, ids[1: n * 3 + 1].view(n, 3))
    assert [vocab[i] for i in data.x_train[1].tolist()] == ["on", "the", "mat"]
    assert [vocab[i] for i in data.y_train[1].tolist()] == ["the", "mat", "<eos>"]
    # valid: "zebra" is not in the training vocabulary -> <unk>; 8 tokens -> 2 windows of 3
    valid = ["the", "<unk>", "sat", "<eos>", "the", "cat", "ran", "<eos>"]
    assert [[vocab[i] for i in row] for row in data.x_val.tolist()] == [valid[0:3], valid[3:6]]
    assert [[vocab[i] for i in row] for row in data.y_val.tolist()] == [valid[1:4], valid[4:7]]


def test_ptb_finds_the_simple_examples_layout(tmp_path: Path) -> None:
    write_ptb(tmp_path / "simple-examples" / "data")
    assert ptb(tmp_path, seq_len=4).x_train.shape == (4, 4)


def test_ptb_missing_files_name_the_key_and_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        ptb(tmp_path / "nowhere")
    message = str(info.value)
    assert "dataset=ptb" in message and str(tmp_path / "nowhere") in message
    assert "ptb.train.txt" in message and "ptb.valid.txt" in message and "never downloads" in message
    (tmp_path / "ptb.train.txt").write_text(PTB_TRAIN)
    with pytest.raises(ConfigError, match="dataset=ptb"):
        ptb(tmp_path)  # valid file missing


@pytest.mark.parametrize(
    "train_text, valid_text, bad, needle",
    [
        (PTB_TRAIN, " the cat \n", "ptb.valid.txt", "fewer than dataset.seq_len"),
        ("one two\n", PTB_VALID, "ptb.train.txt", "fewer than dataset.seq_len"),
        (" the cat sat on the mat \n", PTB_VALID, "ptb.valid.txt", "has no <unk>"),
        (PTB_TRAIN, b"\xff\xfe the".decode("latin-1"), "ptb.valid.txt", "not UTF-8"),
    ],
)
def test_ptb_bad_files_name_the_file(tmp_path: Path, train_text: str, valid_text: str, bad: str,
                                     needle: str) -> None:
    write_ptb(tmp_path, train_text)
    (tmp_path / "ptb.valid.txt").write_bytes(valid_text.encode("latin-1"))
    with pytest.raises(ConfigError, match=needle) as info:
        ptb(tmp_path, seq_len=3)
    assert str(tmp_path / bad) in str(info.value)


def test_ptb_checks_seq_len(tmp_path: Path) -> None:
    write_ptb(tmp_path)
    with pytest.raises(ConfigError, match="dataset.seq_len"):
        ptb(tmp_path, seq_len=0)


def test_ptb_trains_two_steps(tmp_path: Path) -> None:
    write_ptb(tmp_path / "p")
    summary, _ = train(tmp_path / "run", "dataset=ptb", f"dataset.data_dir='{tmp_path / 'p'}'",
                       "dataset.seq_len=3", "model=lstm", *FAST_RUN)
    assert summary["steps"] == 2 and summary["val/ppl"] > 1.0


# ---------------------------------------------------------------- ImageNet
CLASSES = ("n01440764", "n01443537", "n01484850")


def write_imagenet(root: Path, side: int = 8, seed: int = 0) -> dict[str, list[tuple[str, torch.Tensor | None]]]:
    """train: 2 images per class (a PNG of side x side, exact, then a larger JPEG); val: 1 PNG per class.

    Returns {split: [(file name, uint8 [3, side, side] pixels or None for the lossy JPEG), ...]} in
    ImageFolder order.
    """
    gen = torch.Generator().manual_seed(seed)
    written: dict[str, list[tuple[str, torch.Tensor | None]]] = {"train": [], "val": []}
    for split in ("train", "val"):
        for c, name in enumerate(CLASSES):
            folder = root / split / name
            folder.mkdir(parents=True)
            png = torch.randint(0, 256, (3, side, side), dtype=torch.uint8, generator=gen)
            write_file(str(folder / f"{name}_{split}_0.PNG"), encode_png(png))
            written[split].append((f"{name}_{split}_0.PNG", png))
            if split == "train":
                jpeg = torch.randint(0, 256, (3, side + 5, side + 2), dtype=torch.uint8, generator=gen)
                write_file(str(folder / f"{name}_{split}_1.JPEG"), encode_jpeg(jpeg))
                written[split].append((f"{name}_{split}_1.JPEG", None))
            (folder / "readme.txt").write_text("not an image")  # ignored: not an image extension
    return written


def normalize_imagenet(pixels: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
    return (pixels.float() / 255 - mean) / std


def test_imagenet_is_lazy_and_reads_images_exactly(tmp_path: Path) -> None:
    written = write_imagenet(tmp_path)
    data = imagenet(tmp_path, image_size=8, resize_size=8)  # resize and crop are the identity on 8x8
    assert data.spec == DataSpec("image", (3, 8, 8), 3, "imagenet")
    x, y = data.x_train, data.y_train
    assert isinstance(x, ImageFiles) and isinstance(data.x_val, ImageFiles)
    assert x.shape == (6, 3, 8, 8) and len(x) == 6 and x.shape[0] == 6 and data.x_val.shape == (3, 3, 8, 8)
    assert y.dtype == torch.int64 and y.tolist() == [0, 0, 1, 1, 2, 2] and data.y_val.tolist() == [0, 1, 2]
    assert [Path(f).name for f in x.files] == [name for name, _ in written["train"]]
    batch = x[torch.tensor([4, 0, 5], dtype=torch.int64)]  # as the trainer's loader indexes
    assert batch.dtype == torch.float32 and batch.shape == (3, 3, 8, 8)
    torch.testing.assert_close(batch[0], normalize_imagenet(written["train"][4][1]), rtol=0, atol=1e-6)
    torch.testing.assert_close(batch[1], normalize_imagenet(written["train"][0][1]), rtol=0, atol=1e-6)
    assert torch.equal(batch[2], x[5]) and torch.equal(x[-1], x[5])  # the JPEG, decoded the same each time
    sliced = data.x_val[0:2]  # as evaluation slices
    assert sliced.shape == (2, 3, 8, 8)
    for row, (_, pixels) in zip(sliced, written["val"]):
        torch.testing.assert_close(row, normalize_imagenet(pixels), rtol=0, atol=1e-6)
    assert data.x_val[1:].shape == (2, 3, 8, 8) and data.x_val[5:9].shape == (0, 3, 8, 8)
    with pytest.raises(IndexError):
        x[torch.tensor([6])]
    with pytest.raises(TypeError):
        x[torch.tensor([0.5])]


def test_imagenet_resizes_the_shorter_side_and_centre_crops(tmp_path: Path) -> None:
    write_imagenet(tmp_path, side=12)
    data = imagenet(tmp_path, image_size=6)  # shorter side to 6 * 8 // 7 = 6, centre crop 6x6
    assert data.spec.input_shape == (3, 6, 6) and data.x_train.resize_size == 6
    assert data.x_train[torch.arange(6)].shape == (6, 3, 6, 6)
    assert imagenet(tmp_path, image_size=4, resize_size=10).x_train[1:3].shape == (2, 3, 4, 4)
    assert imagenet(tmp_path).x_train.resize_size == 256  # the default: 8/7 of 224


def test_imagenet_missing_tree_names_the_key_and_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        imagenet(tmp_path / "nowhere")
    message = str(info.value)
    assert "dataset=imagenet" in message and str(tmp_path / "nowhere") in message
    assert "train" in message and "<class>/*.JPEG" in message and "never downloads" in message
    (tmp_path / "train" / "n0").mkdir(parents=True)
    (tmp_path / "val").mkdir()
    with pytest.raises(ConfigError, match="no images in"):
        imagenet(tmp_path)


def test_imagenet_val_classes_must_be_train_classes(tmp_path: Path) -> None:
    write_imagenet(tmp_path)
    (tmp_path / "val" / "n99999999").mkdir()
    with pytest.raises(ConfigError, match="n99999999"):
        imagenet(tmp_path, image_size=8)


def test_imagenet_corrupt_image_names_the_file(tmp_path: Path) -> None:
    write_imagenet(tmp_path)
    bad = tmp_path / "train" / CLASSES[1] / f"{CLASSES[1]}_train_1.JPEG"
    bad.write_bytes(b"not a jpeg")
    data = imagenet(tmp_path, image_size=8)  # scanning does not decode
    assert data.x_train[0:2].shape == (2, 3, 8, 8)
    with pytest.raises(ConfigError, match="cannot decode") as info:
        data.x_train[torch.tensor([3])]
    assert str(bad) in str(info.value)


@pytest.mark.parametrize("kwargs, key", [({"image_size": 0}, "dataset.image_size"),
                                         ({"image_size": 8, "resize_size": 7}, "dataset.resize_size")])
def test_imagenet_checks_sizes(tmp_path: Path, kwargs: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        imagenet(tmp_path, **kwargs)


def test_imagenet_trains_two_steps(tmp_path: Path) -> None:
    write_imagenet(tmp_path / "i", side=10)
    summary, _ = train(tmp_path / "run", "dataset=imagenet", f"dataset.data_dir='{tmp_path / 'i'}'",
                       "dataset.image_size=8", "model=resnet20", *FAST_RUN)
    assert summary["steps"] == 2 and 0.0 <= summary["val/acc"] <= 1.0
