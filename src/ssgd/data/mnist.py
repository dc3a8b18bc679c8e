"""Real MNIST read from the user's local idx files (this project never downloads).

Accepted layouts: `data_dir/` itself or torchvision's `data_dir/MNIST/raw/`, each file either plain
(`train-images-idx3-ubyte`) or gzipped (`train-images-idx3-ubyte.gz`). The official test set (t10k)
is the validation split.
"""
from __future__ import annotations

import gzip
import math
import os
import zlib
from pathlib import Path

import torch
from torch import Tensor

from ssgd.data.base import DataSpec, TensorData
from ssgd.errors import ConfigError

MNIST_MEAN = 0.1307
MNIST_STD = 0.3081
FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
UBYTE = 0x08  # the idx type code of unsigned bytes, the only one MNIST uses


def normalize_mnist(pixels: Tensor) -> Tensor:
    """uint8 pixels in [0, 255], any shape -> float32 (x / 255 - 0.1307) / 0.3081, same shape."""
    return (pixels.to(torch.float32) / 255.0 - MNIST_MEAN) / MNIST_STD


def read_idx(path: str | os.PathLike[str]) -> Tensor:
    """Read one idx file of unsigned bytes (plain, or gzipped when the name ends in .gz).

    Format: 4-byte magic (0, 0, type code 0x08, ndim), ndim big-endian uint32 sizes, then the data.
    Returns uint8 tensor of shape (sizes...), a copy owned by torch. Raises ConfigError naming the
    file if the header or the length is wrong.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"dataset=mnist: cannot read '{path}' ({err.strerror})") from err
    try:
        raw = gzip.decompress(data) if path.suffix == ".gz" else data
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise ConfigError(f"dataset=mnist: '{path}' is not a valid gzip file ({err})") from err
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != UBYTE or raw[3] == 0:
        raise ConfigError(
            f"dataset=mnist: '{path}' has a bad idx header (magic {raw[:4].hex() or 'missing'}); "
            f"expected 0000 08 then the number of dimensions"
        )
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ConfigError(f"dataset=mnist: '{path}' is truncated inside its idx header")
    sizes = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    if len(raw) - header != math.prod(sizes):
        raise ConfigError(
            f"dataset=mnist: '{path}' holds {len(raw) - header} data bytes but its header "
            f"says {sizes} = {math.prod(sizes)}"
        )
    return torch.frombuffer(bytearray(raw[header:]), dtype=torch.uint8).view(sizes)


def _find_files(data_dir: Path) -> list[Path] | None:
    """The four files from the first layout that has all of them (plain preferred to .gz), or None."""
    for folder in (data_dir, data_dir / "MNIST" / "raw"):
        found = []
        for name in FILES:
            hits = [p for p in (folder / name, folder / f"{name}.gz") if p.is_file()]
            if not hits:
                break
            found.append(hits[0])
        if len(found) == len(FILES):
            return found
    return None


def _load_split(images_path: Path, labels_path: Path) -> tuple[Tensor, Tensor]:
    """uint8 [N, H, W] images and int64 [N] labels in [0, 10), checked against each other."""
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.dim() != 3:
        raise ConfigError(f"dataset=mnist: '{images_path}' has shape {list(images.shape)}; expected [N, H, W]")
    if labels.dim() != 1 or labels.shape[0] != images.shape[0]:
        raise ConfigError(
            f"dataset=mnist: '{labels_path}' has shape {list(labels.shape)}; expected [{images.shape[0]}] "
            f"to match '{images_path}'"
        )
    if labels.numel() and int(labels.max()) > 9:
        raise ConfigError(f"dataset=mnist: '{labels_path}' has label {int(labels.max())}; expected 0-9")
    return images, labels.to(torch.int64)


def mnist(data_dir: str | os.PathLike[str], val_size: int | None = None, seed: int = 0) -> TensorData:
    """MNIST from local idx files: train = the training file, val = the t10k test set.

    Args:
        data_dir: folder holding the four idx files, directly or under MNIST/raw/.
        val_size: None keeps the whole test set; an int in [1, n_test] keeps a random subset of it,
            drawn with a generator seeded by `seed` (the only use of `seed`).

    Returns TensorData with x float32 [N, 1, H, W] normalised by `normalize_mnist`, y int64 [N],
    spec DataSpec("image", (1, H, W), 10, "mnist").
    """
    folder = Path(data_dir).expanduser()
    paths = _find_files(folder)
    if paths is None:
        raise ConfigError(
            f"dataset=mnist: no MNIST idx files in '{folder}' or '{folder / 'MNIST' / 'raw'}' (expected "
            f"{'[.gz], '.join(FILES)}[.gz]); download them from the MNIST site yourself, "
            f"this project never downloads"
        )
    x_train, y_train = _load_split(paths[0], paths[1])
    x_val, y_val = _load_split(paths[2], paths[3])
    if x_train.shape[1:] != x_val.shape[1:]:
        raise ConfigError(
            f"dataset=mnist: '{paths[0]}' has images of {list(x_train.shape[1:])} but '{paths[2]}' "
            f"has {list(x_val.shape[1:])}"
        )
    if val_size is not None:
        if isinstance(val_size, bool) or not isinstance(val_size, int) or not 1 <= val_size <= len(y_val):
            raise ConfigError(f"dataset.val_size={val_size!r}: must be null or an int in [1, {len(y_val)}]")
        keep = torch.randperm(len(y_val), generator=torch.Generator().manual_seed(seed))[:val_size]
        x_val, y_val = x_val[keep], y_val[keep]
    height, width = x_train.shape[1:]
    spec = DataSpec("image", (1, height, width), 10, "mnist")
    return TensorData(spec, normalize_mnist(x_train).unsqueeze(1), y_train,
                      normalize_mnist(x_val).unsqueeze(1), y_val)
