"""ImageNet (ILSVRC-2012) from a local ImageFolder tree, decoded lazily: it does not fit in memory.

Layout: `data_dir/train/<class>/*.JPEG` and `data_dir/val/<class>/*.JPEG` (also .jpg, .jpeg, .png,
any case; files in subfolders of a class folder count too). The folders are scanned by torchvision's
ImageFolder functions (`find_classes`, `make_dataset`): classes are the train folder names sorted, so
label i is the i-th name; every val folder must be one of
them. The val images of the official archive come in one folder and must first be sorted into
class folders (as torchvision's `ImageNet` class or the usual `valprep.sh` do).

The images are never all decoded: x_train and x_val are `ImageFiles` objects that decode the
requested files when indexed, as the trainer does (`x[idx]` with an int64 index tensor for a
batch, `x[a:b]` when evaluating). With `workers` > 0 a pool of that many background threads decodes
the images of a batch in parallel (the decoding and resizing are torch operators, which run outside
Python's lock), and the loader has each rank's next batch decoded while the current one trains; the
rows, their order and their values are those of the serial decoding (tested).

Each image goes through torchvision.io (`read_file`, `decode_image` to RGB) and
torchvision.transforms.v2 functional ops: the shorter side resized to `resize_size` (default 256
for 224, ratio 8/7), centre crop `image_size` x `image_size`, scale to [0, 1], normalise with the
ImageNet mean / std. That is the standard evaluation transform, used for training too: random
crops and flips are NOT applied. The gTop-k code trains with RandomResizedCrop(224) and flips, from an
HDF5 copy of the data (hclhkbu/gtopkssgd dl_trainer.py `imagenet_prepare`); a per-batch transform like
CIFAR-10's (`ssgd.data.augment`, drawn per rank and step by the loader) is where it would go.

torchvision is imported when the folders are scanned, not with this module: its import costs
about 2 s.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch
from torch import Tensor

from ssgd.data.base import DataSpec, TensorData
from ssgd.errors import ConfigError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
"""Per-channel (R, G, B) mean of ImageNet pixels in [0, 1], as in torchvision and the gTop-k code."""
IMAGENET_STD = (0.229, 0.224, 0.225)
EXTENSIONS = (".jpeg", ".jpg", ".png")
SPLITS = ("train", "val")


def _short(err: Exception) -> str:
    """A torchvision C++ error without its 'function, file.cpp:line, ' prefix."""
    parts = str(err).split(", ", 2)
    return parts[2] if len(parts) == 3 and ".cpp:" in parts[1] else str(err)


def load_image(path: str, image_size: int, resize_size: int) -> Tensor:
    """Decode one image file -> float32 [3, image_size, image_size], normalised with ImageNet mean / std.

    Shorter side resized to resize_size (bilinear, antialiased; a no-op when it already is), then
    the centre image_size x image_size crop. Grey, RGBA or CMYK files are converted to RGB.
    Raises ConfigError naming the file if it cannot be read or decoded.
    """
    from torchvision.io import ImageReadMode, decode_image, read_file
    from torchvision.transforms.v2 import functional as F

    try:
        image = decode_image(read_file(path), mode=ImageReadMode.RGB)
    except (RuntimeError, OSError, ValueError) as err:
        raise ConfigError(f"dataset=imagenet: cannot decode '{path}' ({_short(err)})") from err
    image = F.center_crop(F.resize(image, [resize_size], antialias=True), [image_size, image_size])
    return F.normalize(F.to_dtype(image, torch.float32, scale=True), list(IMAGENET_MEAN), list(IMAGENET_STD))


class ImageFiles:
    """A read-only stand-in for a float32 [N, 3, S, S] tensor whose rows are decoded from files on demand.

    Supports `.shape` (the tuple (N, 3, S, S)), `.dtype`, `len()` and indexing: an int64 (or other
    integer) index tensor or sequence of ints -> float32 [len(idx), 3, S, S]; a slice `x[a:b:c]`
    -> float32 [len(range), 3, S, S]; an int -> float32 [3, S, S]. Negative indices count from the
    end as in torch; out of range raises IndexError. Nothing is cached: indexing the same rows twice
    decodes twice and gives equal tensors. Holds the file paths and, with `workers` > 0, a pool of that
    many decoding threads (started on first use) and the batches `prefetch` asked for, each taken by
    the first indexing with the same rows (at most `MAX_PENDING` are kept; the oldest is dropped).
    """

    dtype = torch.float32
    MAX_PENDING = 64

    def __init__(self, files: Sequence[str], image_size: int, resize_size: int, workers: int = 0) -> None:
        self.files = tuple(files)
        self.image_size = image_size
        self.resize_size = resize_size
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[tuple[int, ...], list[Future]] = {}
        self._lock = threading.Lock()

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (len(self.files), 3, self.image_size, self.image_size)

    def __len__(self) -> int:
        return len(self.files)

    def _position(self, i: int) -> int:
        n = len(self.files)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of range for {n} images")
        return i % n

    def _load(self, i: int) -> Tensor:
        return load_image(self.files[i], self.image_size, self.resize_size)

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="imagenet-decode")
            return self._pool

    def _stack(self, positions: Sequence[int]) -> Tensor:
        with self._lock:
            pending = self._pending.pop(tuple(positions), None)
        if pending is not None:
            images = (f.result() for f in pending)
        elif self.workers:
            images = self._executor().map(self._load, positions)
        else:
            images = map(self._load, positions)
        out = torch.empty((len(positions), 3, self.image_size, self.image_size), dtype=torch.float32)
        for row, image in enumerate(images):          # in order, whatever order the threads finish in
            out[row] = image
        return out

    def prefetch(self, index: Tensor) -> None:
        """Start decoding the rows `index` (a 1-D integer tensor) on the worker threads, one image per
        task, for a later `self[index]`; a no-op without workers."""
        if self.workers == 0:
            return
        positions = [self._position(i) for i in index.tolist()]
        key = tuple(positions)
        with self._lock:
            if key in self._pending:
                return
            if len(self._pending) >= self.MAX_PENDING:
                self._pending.pop(next(iter(self._pending)))
        futures = [self._executor().submit(self._load, i) for i in positions]
        with self._lock:
            self._pending[key] = futures

    def __getitem__(self, key: Tensor | slice | int | Sequence[int]) -> Tensor:
        if isinstance(key, slice):
            return self._stack(range(*key.indices(len(self.files))))
        if isinstance(key, Tensor):
            if key.dtype.is_floating_point or key.dtype.is_complex or key.dtype == torch.bool or key.dim() > 1:
                raise TypeError(f"ImageFiles takes a 1-D integer index tensor, not {key.dtype} {list(key.shape)}")
            if key.dim() == 0:
                return self._stack([self._position(int(key))])[0]
            return self._stack([self._position(i) for i in key.tolist()])
        if isinstance(key, int) and not isinstance(key, bool):
            return self._stack([self._position(key)])[0]
        if isinstance(key, Sequence) and all(isinstance(i, int) and not isinstance(i, bool) for i in key):
            return self._stack([self._position(i) for i in key])
        raise TypeError(f"ImageFiles cannot be indexed with {type(key).__name__}")

    def __getstate__(self) -> dict:
        return {"files": self.files, "image_size": self.image_size, "resize_size": self.resize_size,
                "workers": self.workers}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["files"], state["image_size"], state["resize_size"], state["workers"])

    def __repr__(self) -> str:
        return (f"ImageFiles(n={len(self.files)}, image_size={self.image_size}, resize_size={self.resize_size}, "
                f"workers={self.workers})")


def find_classes(split_dir: Path) -> list[str]:
    """The class folder names of `split_dir`, sorted (torchvision's `find_classes`, ImageFolder's order);
    empty when there is none."""
    from torchvision.datasets.folder import find_classes as torchvision_find_classes

    try:
        return torchvision_find_classes(str(split_dir))[0]
    except FileNotFoundError:
        return []


def scan_split(split_dir: Path, class_to_idx: dict[str, int]) -> tuple[list[str], Tensor]:
    """Image paths of `split_dir/<class>/` (classes sorted, files sorted within a folder, subfolders
    included) and int64 labels: torchvision's `make_dataset`, ImageFolder's own scan, with EXTENSIONS.

    Raises ConfigError naming the folder if a class is not in `class_to_idx` or there are no images.
    """
    from torchvision.datasets.folder import make_dataset

    for name in find_classes(split_dir):
        if name not in class_to_idx:
            raise ConfigError(f"dataset=imagenet: '{split_dir / name}' is a class folder that "
                              f"'{split_dir.parent / 'train'}' lacks; val classes must be train classes")
    samples = make_dataset(str(split_dir), class_to_idx, extensions=EXTENSIONS, allow_empty=True)
    if not samples:
        raise ConfigError(f"dataset=imagenet: no images in '{split_dir}' (expected <class>/*.JPEG, "
                          f"extensions {', '.join(EXTENSIONS)} in any case)")
    return [path for path, _ in samples], torch.tensor([label for _, label in samples], dtype=torch.int64)


def imagenet(data_dir: str | os.PathLike[str] = "data/imagenet", image_size: int = 224,
             resize_size: int | None = None, workers: int = 0) -> TensorData:
    """ImageNet from a local ImageFolder tree: train = data_dir/train, val = data_dir/val.

    Args:
        image_size: side S of the square crop the models see (224 for AlexNet and ResNet-50).
        resize_size: shorter side before the centre crop, >= image_size; None = image_size * 8 // 7
            (256 for 224).
        workers: background decoding threads per process (0: decode in the calling thread, one image
            after another); the decoded batches are the same either way.

    Returns TensorData whose x_train / x_val are lazy `ImageFiles` (float32 [N, 3, S, S] when
    indexed; an evaluation slice of the trainer's eval_batch images is decoded at once, about
    600 MB for 1,000 images at 224), y int64 [N] labels in [0, C) held in memory, and spec
    DataSpec("image", (3, S, S), C, "imagenet") with C the number of train class folders (1000).
    Only the file names are listed here (1.33M for ILSVRC-2012); no image is decoded.
    """
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1:
        raise ConfigError(f"dataset.image_size={image_size!r}: must be an int >= 1")
    if resize_size is not None and (isinstance(resize_size, bool) or not isinstance(resize_size, int)):
        raise ConfigError(f"dataset.resize_size={resize_size!r}: must be null or an int >= dataset.image_size")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ConfigError(f"dataset.workers={workers!r}: must be an int >= 0")
    resize = image_size * 8 // 7 if resize_size is None else resize_size
    if resize < image_size:
        raise ConfigError(f"dataset.resize_size={resize_size}: must be >= dataset.image_size={image_size}")
    root = Path(data_dir).expanduser()
    if not all((root / split).is_dir() for split in SPLITS):
        raise ConfigError(
            f"dataset=imagenet: no ImageFolder tree in '{root}' (expected '{root / 'train'}/<class>/*.JPEG' and "
            f"'{root / 'val'}/<class>/*.JPEG'); get ILSVRC-2012 from image-net.org yourself (registration), "
            f"extract it, sort the val images into class folders, and set dataset.data_dir; this project "
            f"never downloads"
        )
    classes = find_classes(root / "train")
    if not classes:
        raise ConfigError(f"dataset=imagenet: no class folders in '{root / 'train'}' (expected <class>/*.JPEG)")
    class_to_idx = {name: i for i, name in enumerate(classes)}
    train_files, y_train = scan_split(root / "train", class_to_idx)
    val_files, y_val = scan_split(root / "val", class_to_idx)
    spec = DataSpec("image", (3, image_size, image_size), len(classes), "imagenet")
    return TensorData(spec, ImageFiles(train_files, image_size, resize, workers), y_train,  # type: ignore[arg-type]
                      ImageFiles(val_files, image_size, resize, workers), y_val)  # type: ignore[arg-type]
