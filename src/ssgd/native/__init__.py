"""The package's C kernels, one shared library built from the sources of this folder:

- `gtopk_merge.c`: the gTop-k tree merge at O(k). `merge(a_idx, a_val, b_idx, b_val, k, trace)` runs
  it on CPU tensors (else `ssgd.comm.collectives.gtopk` uses its torch implementation, with the same results bit
  for bit).
- `block_peaks.c`: the largest |u_j| of every block of u and u's float64 sum and sum of squares, in one
  read of u (`block_peaks(u, block, sums)`; else `ssgd.compress.sparse.BlockPeaks` uses torch
  reductions: the same peaks, and statistics equal to ~1e-14 relative).
- `scatter.c`: a sparse vector, divided by a scale, written into a zeroed buffer that holds its parts in
  another order (`scatter_segments(out, idx, val, scale, starts, shifts)`: the DDP hook's decode into DDP's
  bucket; else the hook's torch operations, with the same bits).
- `topk_select.c`: the radix selection of the k-th largest magnitude (the merge's), and the Top-k
  positions of u from its block peaks (`topk_blocks(u, peak, block, k)`; its scan of the candidate
  blocks compares eight entries at once with AVX2 where the CPU has it, the same entries in the same
  order; else, and where a tie at the k-th magnitude leaves a choice, `ssgd.compress.sparse.select_topk`
  uses torch.topk: the same magnitudes, and on a tie torch.topk picks among the kernel's candidates,
  `topk_or_candidates`).

`available()` says whether they can run. The shared library is compiled from the sources with the
system C compiler (`cc -O2`, under a second) by `make setup`, or on first use when it is missing,
into this folder (or, when the package folder is read-only, as in a system-wide install, into
`$XDG_CACHE_HOME/ssgd`, default `~/.cache/ssgd`) as `_ssgd_native-<hash of the sources>.so` (a changed
source gets a new file; concurrent builds by several ranks each write their own temporary file and
rename it into place). It is called through ctypes on tensors that torch allocates; nothing is
copied. `SSGD_NATIVE=0` turns it off. Without a C compiler the torch paths are used, with one
warning per process.
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
SOURCES = (SOURCE, HERE / "block_peaks.c", HERE / "topk_select.c", HERE / "scatter.c")
PREFIX = "_ssgd_native-"
STALE = ("_ssgd_native-*.so", "_gtopk_merge-*.so")   # libraries of other sources, under either name they had
log = logging.getLogger(__name__)

_i64, _ptr = ctypes.c_int64, ctypes.c_void_p


def build_dir() -> Path:
    """Where the library is built: this folder when it is writable, else the per-user cache."""
    if os.access(HERE, os.W_OK):
        return HERE
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ssgd"


def library_path() -> Path:
    digest = hashlib.sha1(b"".join(src.read_bytes() for src in SOURCES)).hexdigest()[:12]
    name = f"{PREFIX}{digest}.so"
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
        raise RuntimeError("no C compiler (cc or gcc, or $CC) to build the C kernels of ssgd/native")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.stem + ".", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        done = subprocess.run([cc, "-O2", "-std=c99", "-ffp-contract=off", "-shared", "-fPIC", *map(str, SOURCES), "-o", tmp],
                              capture_output=True, text=True)
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["no output"])[0]
            raise RuntimeError(f"building the C kernels of ssgd/native with {cc} failed: {first}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    for pattern in STALE:                                      # builds of other sources
        for stale in target.parent.glob(pattern):
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
        log.warning("the C kernels are unavailable (%s); using the torch gTop-k merge (several times slower "
                    "at large k) and torch block peaks (5x slower)", err)
        return None
    fn = lib.ssgd_gtopk_merge
    fn.restype = _i64
    fn.argtypes = [_ptr, _ptr, _i64, _ptr, _ptr, _i64, _i64, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr]
    fn = lib.ssgd_block_peaks
    fn.restype = None
    fn.argtypes = [_ptr, _i64, _i64, _ptr, _ptr]
    fn = lib.ssgd_float64_sums
    fn.restype = None
    fn.argtypes = [_ptr, _i64, _ptr]
    fn = lib.ssgd_topk_threshold
    fn.restype = _i64
    fn.argtypes = [_ptr, _i64, _i64, _ptr, _ptr]
    fn = lib.ssgd_scatter_segments
    fn.restype = _i64
    fn.argtypes = [_ptr, _ptr, _i64, ctypes.c_float, _ptr, _ptr, _i64, _ptr, _i64]
    fn = lib.ssgd_topk_blocks
    fn.restype = _i64
    fn.argtypes = [_ptr, _i64, _i64, _ptr, ctypes.c_uint32, _i64, _ptr, _ptr, _ptr, _i64, _ptr, _ptr]
    return lib


def available() -> bool:
    """Whether `merge` and `block_peaks` can run here (the library loads, and SSGD_NATIVE is not 0)."""
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
        raise RuntimeError("ssgd.native.merge called while the C merge is unavailable")
    for name, t, dtype in (("a_idx", a_idx, torch.int32), ("a_val", a_val, torch.float32),
                           ("b_idx", b_idx, torch.int32), ("b_val", b_val, torch.float32)):
        if t.dtype != dtype or t.device.type != "cpu" or t.dim() != 1 or not t.is_contiguous():
            raise ValueError(f"ssgd.native.merge: {name} must be a contiguous 1-D {dtype} CPU tensor, "
                             f"got {t.dtype} {tuple(t.shape)} on {t.device}")
    na, nb = a_idx.numel(), b_idx.numel()
    if a_val.numel() != na or b_val.numel() != nb or k < 1:
        raise ValueError(f"ssgd.native.merge: lengths {na}/{a_val.numel()} and {nb}/{b_val.numel()}, k={k}")
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


PEAK_BLOCKS = tuple(1 << e for e in range(3, 17))    # block_peaks.c: a power of two from LANES (8) to CHUNK


def _float32_vector(u: Tensor) -> bool:
    return u.dtype == torch.float32 and u.device.type == "cpu" and u.dim() == 1 and u.is_contiguous()


def block_peaks(u: Tensor, block: int, sums: bool = False) -> tuple[Tensor, tuple[float, float] | None] | None:
    """(peak, (sum, sum of squares) or None) of the C kernel for a contiguous 1-D float32 CPU tensor u:
    peak[b] = max |u_j| over entries b*block .. b*block+block-1 for b < numel // block (NaN when the
    block holds a NaN, +0.0 for a block of zeros), and with `sums` `float64_sums(u)`. None when the
    kernel is unavailable or u is not such a tensor (callers then use torch); ValueError on a block
    not in PEAK_BLOCKS."""
    if block not in PEAK_BLOCKS:
        raise ValueError(f"ssgd.native.block_peaks: block must be a power of two from 8 to 65536, got {block!r}")
    lib = _library()
    if lib is None or not _float32_vector(u):
        return None
    peak = torch.empty(u.numel() // block, dtype=torch.float32)
    out = torch.zeros(2, dtype=torch.float64) if sums else None
    lib.ssgd_block_peaks(u.data_ptr(), u.numel(), block, peak.data_ptr(), _address(out))
    return peak, ((float(out[0]), float(out[1])) if out is not None else None)


def float64_sums(u: Tensor) -> tuple[float, float] | None:
    """(sum of u_j, sum of u_j * u_j) in float64 by the C kernel, in block_peaks.c's fixed order (the
    bits `block_peaks(u, block, sums=True)` gives with any block), or None as `block_peaks`."""
    lib = _library()
    if lib is None or not _float32_vector(u):
        return None
    out = torch.zeros(2, dtype=torch.float64)
    lib.ssgd_float64_sums(u.data_ptr(), u.numel(), out.data_ptr())
    return float(out[0]), float(out[1])


def topk_blocks(u: Tensor, peak: Tensor, block: int, k: int) -> Tensor | None:
    """int64 [k], increasing: the positions of the k entries of u of largest magnitude, by the C kernel
    (topk_select.c), from `peak`, u's NaN-free block peaks (`block_peaks(u, block)`; 1 <= k <= numel //
    block). None when the kernel is unavailable or u is not a contiguous 1-D float32 CPU tensor, and when
    more entries of u share the k-th largest magnitude than the k largest take: the set then depends on a
    tie rule, which the caller applies (`topk_or_candidates` also gives the candidates for it). ValueError
    on a peak of the wrong length or a k out of range."""
    found = topk_or_candidates(u, peak, block, k)
    return None if found is None else found[0]


def topk_or_candidates(u: Tensor, peak: Tensor, block: int, k: int) -> tuple[Tensor | None, Tensor | None] | None:
    """`topk_blocks` with what a tie leaves: (positions, None) when the Top-k set is unique, (None, candidates)
    when a tie at the k-th magnitude leaves a choice, None when the kernel cannot run on u (as `topk_blocks`).
    candidates: int64, the positions of u's entries of magnitude >= t (t = the k-th largest peak) in the blocks
    whose peak is >= t, in increasing order, then those of the last numel mod block entries: every Top-k
    entry is among them, and they are the entries `ssgd.compress.sparse.BlockPeaks.visit` keeps for t, in
    its order (tests/unit/test_topk_select.py)."""
    lib = _library()
    if lib is None or not _float32_vector(u) or not _float32_vector(peak):
        return None
    blocks = u.numel() // block
    if peak.numel() != blocks or not 1 <= k <= blocks:
        raise ValueError(f"ssgd.native.topk_blocks: {peak.numel()} peaks for {blocks} blocks, k={k}")
    work = torch.empty(blocks, dtype=torch.int32)
    thr = ctypes.c_uint32(0)
    candidates = lib.ssgd_topk_threshold(peak.data_ptr(), blocks, k, work.data_ptr(), ctypes.byref(thr))
    cap = candidates * block + u.numel() - blocks * block
    pos = torch.empty(cap, dtype=torch.int64)
    keys = torch.empty(2 * cap, dtype=torch.int32)          # the gathered keys, then the selection's work
    out = torch.empty(k, dtype=torch.int64)
    gathered = _i64(0)
    got = lib.ssgd_topk_blocks(u.data_ptr(), u.numel(), block, peak.data_ptr(), thr, k, pos.data_ptr(),
                               keys.data_ptr(), keys[cap:].data_ptr(), cap, out.data_ptr(), ctypes.byref(gathered))
    if got < 0:
        raise RuntimeError(f"ssgd.native.topk_blocks: {cap} candidate slots did not hold the top {k}")
    return (out, None) if got == k else (None, pos[:gathered.value])


def scatter_segments(out: Tensor, idx: Tensor, val: Tensor, scale: int, starts: Tensor, shifts: Tensor) -> bool:
    """out = 0, then out[idx[j] + shifts[s]] = val[j] / scale for every entry j (IEEE float32 division; val[j]
    itself when scale is 1), s the last segment with starts[s] <= idx[j]: the C kernel of scatter.c. `out`, `val`:
    contiguous 1-D float32 CPU tensors; `idx`, `starts` (increasing, starts[0] = 0), `shifts`: contiguous 1-D
    int64 CPU tensors. False (out untouched) when the kernel is unavailable or a tensor is not of that kind, so
    the caller uses torch; ValueError when an index or its target falls outside `out` (the vector and `out`
    have the same length; out is then partly written)."""
    lib = _library()
    if (lib is None or not _float32_vector(out) or not _float32_vector(val) or idx.numel() != val.numel()
            or starts.numel() != shifts.numel() or starts.numel() == 0
            or not all(_int64_vector(t) for t in (idx, starts, shifts))):
        return False
    if lib.ssgd_scatter_segments(idx.data_ptr(), val.data_ptr(), idx.numel(), float(scale), starts.data_ptr(),
                                 shifts.data_ptr(), starts.numel(), out.data_ptr(), out.numel()) < 0:
        raise ValueError(f"ssgd.native.scatter_segments: an index of {idx.numel()} falls outside the {out.numel()} "
                         "entries of out")
    return True


def _int64_vector(t: Tensor) -> bool:
    return t.dtype == torch.int64 and t.device.type == "cpu" and t.dim() == 1 and t.is_contiguous()
