"""Real CIFAR-10 read from the user's local python batches (this project never downloads).

Layout, as extracted from `cifar-10-python.tar.gz`: `data_batch_1` ... `data_batch_5` (50,000
training images) and `test_batch` (10,000), each a pickle of a dict with b"data", a uint8 array
[N, 3072] (per row: 1024 red, 1024 green, then 1024 blue values, each plane row-major 32x32), and
b"labels", N ints in [0, 10). They live in `data_dir/` itself or in torchvision's
`data_dir/cifar-10-batches-py/`. The official test batch is the validation split.

The batches are read with a restricted unpickler (`BatchUnpickler`): only numpy's array
reconstruction, its dtype and scalar, and the builtin types of the format may be named, so a file
whose pickle names any other callable is refused with one line and nothing in it runs. numpy is
touched only as the type pickle returns, converted at once with `torch.as_tensor`.
"""
from __future__ import annotations

import functools
import os
import pickle
from pathlib import Path

import torch
from torch import Tensor

from ssgd.data.augment import AugmentedImages, random_crop_flip
from ssgd.data.base import DataSpec, TensorData
from ssgd.errors import ConfigError
from ssgd.utils.seeding import rank_generator

TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
SUBDIR = "cifar-10-batches-py"
SIDE = 32
PADDING = 4
"""Zero padding of the random crop (torchvision `RandomCrop(32, padding=4)` in the released dl_trainer.py)."""
CIFAR10_MEAN = (0.491, 0.482, 0.447)
"""Per-channel (R, G, B) mean of the training pixels in [0, 1], as in the gTop-k code's `dl_trainer.py`."""
CIFAR10_STD = (0.247, 0.243, 0.262)
"""Per-channel standard deviation, same source."""
UNPICKLE_ERRORS = (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError,
                   IndexError, KeyError, OverflowError)
"""What `pickle.load` raises on a truncated or foreign file."""
ALLOWED_GLOBALS = frozenset({
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),   # protocol 5
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("_codecs", "encode"),                    # how protocol 2 writes bytes from Python 3
    ("builtins", "bytes"), ("builtins", "bytearray"), ("builtins", "list"), ("builtins", "dict"),
    ("builtins", "tuple"), ("builtins", "int"), ("builtins", "str"),
    ("__builtin__", "list"), ("__builtin__", "dict"), ("__builtin__", "tuple"),
})
"""The only (module, name) pairs a CIFAR-10 batch may name: what numpy's arrays pickle as, and builtins."""


class BatchUnpickler(pickle.Unpickler):
    """`pickle.Unpickler` that resolves only `ALLOWED_GLOBALS`; any other global raises UnpicklingError
    before it is imported, so a file whose pickle names code runs none of it."""

    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"names {module}.{name}, which a CIFAR-10 batch never does; refused "
                                         f"without running it")
        return super().find_class(module, name)


def normalize_cifar10(pixels: Tensor) -> Tensor:
    """uint8 [N, 3, H, W] in [0, 255] -> float32 (x / 255 - mean[c]) / std[c], same shape."""
    mean = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
    return (pixels.to(torch.float32) / 255.0 - mean) / std


def read_batch(path: str | os.PathLike[str]) -> tuple[Tensor, Tensor]:
    """One CIFAR-10 python batch -> (uint8 [N, 3, 32, 32] images, int64 [N] labels in [0, 10)).

    Raises ConfigError naming the file if it cannot be read, is not such a pickle, or its arrays
    have the wrong shape, type or labels.
    """
    path = Path(path)
    try:
        with path.open("rb") as f:
            batch = BatchUnpickler(f, encoding="bytes").load()
    except OSError as err:
        raise ConfigError(f"dataset=cifar10: cannot read '{path}' ({err.strerror})") from err
    except UNPICKLE_ERRORS as err:
        raise ConfigError(f"dataset=cifar10: '{path}' is not a CIFAR-10 python batch ({type(err).__name__}: "
                          f"{err})") from err
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise ConfigError(f"dataset=cifar10: '{path}' is not a CIFAR-10 python batch (expected a dict with "
                          f"keys b'data' and b'labels')")
    try:
        data = torch.as_tensor(batch[b"data"])
        labels = torch.as_tensor(batch[b"labels"], dtype=torch.int64)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ConfigError(f"dataset=cifar10: '{path}' holds b'data' or b'labels' that are not numeric arrays "
                          f"({err})") from err
    if data.dtype != torch.uint8 or data.dim() != 2 or data.shape[1] != 3 * SIDE * SIDE:
        raise ConfigError(f"dataset=cifar10: '{path}' has b'data' of {data.dtype} {list(data.shape)}; expected "
                          f"uint8 [N, {3 * SIDE * SIDE}]")
    if labels.dim() != 1 or labels.shape[0] != data.shape[0]:
        raise ConfigError(f"dataset=cifar10: '{path}' has {list(labels.shape)} labels for {data.shape[0]} images")
    if labels.numel() and not (0 <= int(labels.min()) and int(labels.max()) <= 9):
        raise ConfigError(f"dataset=cifar10: '{path}' has labels in [{int(labels.min())}, {int(labels.max())}]; "
                          f"expected 0-9")
    return data.view(-1, 3, SIDE, SIDE), labels


def _find_folder(data_dir: Path) -> Path | None:
    """The first of data_dir, data_dir/cifar-10-batches-py that holds all six batches, or None."""
    for folder in (data_dir, data_dir / SUBDIR):
        if all((folder / name).is_file() for name in (*TRAIN_FILES, TEST_FILE)):
            return folder
    return None


def cifar10(data_dir: str | os.PathLike[str] = "data/cifar-10-batches-py", val_size: int | None = None,
            seed: int = 0, augment: bool = False) -> TensorData:
    """CIFAR-10 from the local python batches: train = data_batch_1..5 in order, val = test_batch.

    Args:
        data_dir: folder holding the six batches, directly or under cifar-10-batches-py/.
        val_size: None keeps the whole test batch; an int in [1, n_test] keeps a random subset of it,
            drawn with a generator seeded from (`seed`, "data/cifar10_val") by `rank_generator` (the
            only use of `seed`).
        augment: the released code's training augmentation (random 32 x 32 crop of the image padded with
            4 black pixels, then a horizontal flip with probability 1/2; `ssgd.data.augment`), drawn per
            rank and batch by the loader. conf/dataset/cifar10.yaml turns it on; the val split is never
            augmented.

    Returns TensorData with x float32 [N, 3, 32, 32] normalised per channel by `normalize_cifar10`
    (x_train an `AugmentedImages` over that tensor when `augment`), y int64 [N],
    spec DataSpec("image", (3, 32, 32), 10, "cifar10").
    """
    if not isinstance(augment, bool):
        raise ConfigError(f"dataset.augment={augment!r}: must be true or false")
    root = Path(data_dir).expanduser()
    folder = _find_folder(root)
    if folder is None:
        raise ConfigError(
            f"dataset=cifar10: no CIFAR-10 python batches in '{root}' or '{root / SUBDIR}' (expected "
            f"{', '.join(TRAIN_FILES)} and {TEST_FILE}, the pickles of cifar-10-python.tar.gz); download and "
            f"extract that archive from the CIFAR-10 site yourself and set dataset.data_dir, this project "
            f"never downloads"
        )
    parts = [read_batch(folder / name) for name in TRAIN_FILES]
    x_train = torch.cat([images for images, _ in parts])
    y_train = torch.cat([labels for _, labels in parts])
    x_val, y_val = read_batch(folder / TEST_FILE)
    if val_size is not None:
        if isinstance(val_size, bool) or not isinstance(val_size, int) or not 1 <= val_size <= len(y_val):
            raise ConfigError(f"dataset.val_size={val_size!r}: must be null or an int in [1, {len(y_val)}]")
        keep = torch.randperm(len(y_val), generator=rank_generator(seed, 0, "data/cifar10_val"))[:val_size]
        x_val, y_val = x_val[keep], y_val[keep]
    spec = DataSpec("image", (3, SIDE, SIDE), 10, "cifar10")
    train = normalize_cifar10(x_train)
    if augment:        # pad with the normalised value of a black pixel: crop-then-normalise, as released
        black = normalize_cifar10(torch.zeros((1, 3, 1, 1), dtype=torch.uint8)).view(3)
        train = AugmentedImages(train, functools.partial(random_crop_flip, padding=PADDING, fill=black))
    return TensorData(spec, train, y_train, normalize_cifar10(x_val), y_val)  # type: ignore[arg-type]
