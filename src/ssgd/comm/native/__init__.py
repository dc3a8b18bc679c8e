"""The one C kernel of the package: the gTop-k tree merge at O(k) (`gtopk_merge.c`).

`merge(a_idx, a_val, b_idx, b_val, k, trace)` runs it on CPU tensors; `available()` says whether it
can (else `ssgd.comm.gtopk` uses its torch implementation, with the same results bit for bit).

The shared library is compiled from `gtopk_merge.c` with the system C compiler (`cc -O2`, under a
second) by `make setup`, or on first use when it is missing, into this folder (or, when the package
folder is read-only, as in a system-wide install, into `$XDG_CACHE_HOME/ssgd`, default `~/.cache/ssgd`) as
`_gtopk_merge-<hash of the source>.so` (a changed source gets a new file; concurrent builds by
several ranks each write their own temporary file and rename it into place). It is called through
ctypes on tensors that torch allocates; nothing is copied. `SSGD_NATIVE=0` turns it off. Without a
C compiler the torch merge is used, with one warning per process.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import torch
from torch import Tensor

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "gtopk_merge.c"
log = logging.getLogger(__name__)

_i64, _ptr = ctypes.c_int64, ctypes.c_void_p


def build_dir() -> Path:
    """Where the library is built: this folder when it is writable, else the per-user cache."""
    if os.access(HERE, os.W_OK):
        return HERE
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ssgd"


def library_path() -> Path:
    digest = hashlib.sha1(SOURCE.read_bytes()).hexdigest()[:12]
    name = f"_gtopk_merge-{digest}.so"
    built_here = HERE / name
    return built_here if built_here.exists() else build_dir() / name


def build(force: bool = False) -> Path:
    """Compile the library if it is missing (or when `force`); returns its path. RuntimeError (one
    line) when no C compiler is found or the compilation fails."""
    target = library_path()
    if target.exists() and not force:
        return target
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler (cc or gcc, or $CC) to build ssgd/comm/native/gtopk_merge.c")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.stem + ".", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        done = subprocess.run([cc, "-O2", "-std=c99", "-shared", "-fPIC", str(SOURCE), "-o", tmp],
                              capture_output=True, text=True)
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["no output"])[0]
            raise RuntimeError(f"building ssgd/comm/native/gtopk_merge.c with {cc} failed: {first}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    for stale in target.parent.glob("_gtopk_merge-*.so"):      # builds of older sources
        if stale != target:
            stale.unlink(missing_ok=True)
    return target


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    if os.environ.get("SSGD_NATIVE", "1") == "0":
        return None
    try:
        lib = ctypes.CDLL(str(build()))
    except (OSError, RuntimeError) as err:
        log.warning("the C gTop-k merge is unavailable (%s); using the torch merge, several times slower "
                    "at large k", err)
        return None
    fn = lib.ssgd_gtopk_merge
    fn.restype = _i64
    fn.argtypes = [_ptr, _ptr, _i64, _ptr, _ptr, _i64, _i64, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr]
    return lib


def available() -> bool:
    """Whether `merge` can run here (the library loads, and SSGD_NATIVE is not 0)."""
    return _library() is not None


def _address(t: Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def merge(a_idx: Tensor, a_val: Tensor, b_idx: Tensor, b_val: Tensor, k: int,
          trace: bool = False) -> tuple[Tensor, Tensor, int, Tensor | None, Tensor | None, Tensor | None] | None:
    """The C merge of two sparse vectors given as contiguous CPU tensors, int32 indices strictly
    increasing, float32 values: (idx int32 [m], val float32 [m], n, into_a, into_b, kept), m = min(k, n)
    for a union of n entries, in increasing index order; with `trace`, into_a / into_b (int64) are the
    union positions of the operands' entries and kept (int64 [m], None when n <= k) the union positions
    of the result's. Returns None when an operand's indices are not strictly increasing.
    ValueError on dtypes, devices or layouts it does not take (callers check `available()` first)."""
    lib = _library()
    if lib is None:
        raise RuntimeError("ssgd.comm.native.merge called while the C merge is unavailable")
    for name, t, dtype in (("a_idx", a_idx, torch.int32), ("a_val", a_val, torch.float32),
                           ("b_idx", b_idx, torch.int32), ("b_val", b_val, torch.float32)):
        if t.dtype != dtype or t.device.type != "cpu" or t.dim() != 1 or not t.is_contiguous():
            raise ValueError(f"ssgd.comm.native.merge: {name} must be a contiguous 1-D {dtype} CPU tensor, "
                             f"got {t.dtype} {tuple(t.shape)} on {t.device}")
    na, nb = a_idx.numel(), b_idx.numel()
    if a_val.numel() != na or b_val.numel() != nb or k < 1:
        raise ValueError(f"ssgd.comm.native.merge: lengths {na}/{a_val.numel()} and {nb}/{b_val.numel()}, k={k}")
    cap = na + nb
    out_idx = torch.empty(cap, dtype=torch.int32)
    out_val = torch.empty(cap, dtype=torch.float32)
    keys = torch.empty(2 * cap, dtype=torch.int32)
    into_a = torch.empty(na, dtype=torch.int64) if trace else None
    into_b = torch.empty(nb, dtype=torch.int64) if trace else None
    kept = torch.empty(min(k, cap) + 1, dtype=torch.int64) if trace else None   # +1: see the C compaction
    n = _i64(0)
    m = lib.ssgd_gtopk_merge(a_idx.data_ptr(), a_val.data_ptr(), na, b_idx.data_ptr(), b_val.data_ptr(), nb, k,
                             out_idx.data_ptr(), out_val.data_ptr(), keys.data_ptr(), _address(into_a),
                             _address(into_b), _address(kept), ctypes.byref(n))
    if m < 0:
        return None
    return (out_idx[:m], out_val[:m], n.value, into_a, into_b,
            kept[:m] if trace and n.value > k else None)
