"""Selection helpers shared by the sparsifying compressors: k, exact Top-k and block peaks.

The sparse value type is `ssgd.payload.Sparse` and its wire format `ssgd.comm.wire`; `sum_sparse`
is re-exported here for callers that import it from this module (bench/threads_overhead.py).
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

import ssgd.native as native
from ssgd.payload import Sparse, sum_sparse

__all__ = ["BlockPeaks", "float64_sums", "k_of", "select_topk", "sum_sparse"]


def select_topk(u: Tensor, k: int, peaks: "BlockPeaks | None" = None) -> Sparse:
    """Exact Top-k by magnitude of the 1-D float tensor u, in increasing index order (the order gTop-k's merge
    walks). Ties at the k-th magnitude are broken by torch.topk (among the candidates, below).

    On the CPU, for d >= TOPK_BLOCKS_FROM and k <= d / 32, through block peaks (`BlockPeaks`, as Gaussian-k's
    threshold passes): t = the k-th largest of the d / B block maxima of |u| is a lower bound of the k-th
    largest |u_j| (each of the k blocks with a peak >= t holds an entry >= t), so every Top-k entry lies in a
    block whose peak is >= t. Only those blocks are visited and their entries >= t kept (about 1.0-1.2 k).
    The C kernel (`ssgd.native.topk_or_candidates`) does that and a radix selection among them; when more
    entries share the k-th magnitude than the set can take (a tie), torch.topk picks the k largest of the
    kernel's candidates, and without the kernel, of the same entries found in torch operations (`visit`).
    Either way: the magnitudes torch.topk over all d entries picks, and its set where the k-th magnitude is
    not tied (docs/hot-path.md). Elsewhere (small d, high density, a NaN in u, a
    GPU): torch.topk over all d. `peaks`: u's `BlockPeaks`, if known (used when its block is `topk_block`'s)."""
    block = topk_block(u, k)
    if block is None:
        return select_topk_full(u, k)
    if peaks is None or peaks.u is not u or peaks.block != block:
        peaks = BlockPeaks(u, block)
    if not peaks.nan_free or bool(peaks.tail.isnan().any()):    # torch.topk ranks NaN first: keep its choice
        return select_topk_full(u, k)
    found = native.topk_or_candidates(u, peaks.peak, block, k)
    if found is not None and found[0] is not None:               # the set is unique: torch.topk's too
        return Sparse(found[0], u.index_select(0, found[0]), u.numel())
    if found is not None:                                        # a tie: the kernel's candidates are the visit's
        pos = found[1]
        mags = u.index_select(0, pos).abs_()
    else:
        t = torch.topk(peaks.peak, k, sorted=False).values.min()
        pos, mags = peaks.visit(torch.nonzero(peaks.peak >= t).view(-1), lambda a: a >= t)
    idx = pos.index_select(0, torch.topk(mags, k, sorted=False).indices).sort().values
    return Sparse(idx, u[idx], u.numel())


TOPK_BLOCKS_FROM = 1 << 16    # below this d, torch.topk over all entries is as fast


def topk_block(u: Tensor, k: int) -> int | None:
    """Entries per block of `select_topk`'s block-peak path for u and k, or None for torch.topk over all d:
    64 at density <= 1/256 (about 1.03 k candidates), 32 up to 1/32 (about 1.2 k at 0.01); smaller
    blocks cost more in the two reductions than they save in candidates (measured, docs/hot-path.md)."""
    d = u.numel()
    if u.device.type != "cpu" or d < TOPK_BLOCKS_FROM or u.dim() != 1 or not u.is_contiguous():
        return None
    if 256 * k <= d:
        return 64
    return 32 if 32 * k <= d else None


def select_topk_full(u: Tensor, k: int) -> Sparse:
    idx = torch.topk(u.abs(), k, sorted=False).indices.sort().values
    return Sparse(idx, u[idx], u.numel())


BLOCK = 32      # entries per block of Gaussian-k's `BlockPeaks` (smaller blocks: fewer candidates, slower reductions)


STATS_CHUNK = 1 << 16      # entries per float64 chunk of float64_sums: 512 KiB, cache-resident (1 << 20, 8 MiB: 3x slower)


def float64_sums(u: Tensor) -> tuple[float, float]:
    """(sum of u_j, sum of u_j * u_j) over all entries of u, accumulated in float64: ~1e-14 relative of
    the exact sums at any d, where float32 sums drift (a float32 dot's relative error is ~6e-4 at
    d = 2.5e7). On a float32 CPU vector the C kernel's fixed order (`ssgd.native.float64_sums`, the
    bits `BlockPeaks(u, sums=True).sums` has), else torch operations on float64 copies of chunks of
    STATS_CHUNK entries."""
    found = native.float64_sums(u) if u.dim() == 1 else None
    if found is not None:
        return found
    total, squares = 0.0, 0.0
    for c in u.reshape(-1).split(STATS_CHUNK):
        c64 = c.to(torch.float64)
        total += float(c64.sum())
        squares += float(torch.dot(c64, c64))
    return total, squares


class BlockPeaks:
    """The largest |u_j| of each block of `block` consecutive entries of the 1-D tensor u (the last
    d mod block entries form a tail that is always visited), and with `sums` u's float64 `float64_sums`.

    On a float32 CPU u the C kernel (`ssgd.native.block_peaks`) reads u once for both (timings:
    docs/hot-path.md; its sums are in a fixed order of its own, equal to `float64_sums` to ~1e-14 relative);
    elsewhere one `amax` and one `amin` (two reads of u, no d-sized temporary; `abs().amax()` would
    write one), and `float64_sums`. The peaks are the same either way (a NaN in a block makes its peak NaN).

    `above(thr)` equals `torch.nonzero(u.abs() > thr).view(-1)` (increasing positions; NaN entries
    never pass) but visits only the blocks that can hold such an entry; `bounds(thr)` brackets its
    length from the peaks alone.
    """

    def __init__(self, u: Tensor, block: int = BLOCK, sums: bool = False) -> None:
        self.u, self.block = u, block
        self.n = u.numel() // block * block
        self.rows = u[:self.n].view(-1, block)
        self.tail = u[self.n:]
        found = native.block_peaks(u, block, sums) if block in native.PEAK_BLOCKS else None
        if found is not None:
            self.peak, self.sums = found
        else:
            # max |u_j| per block, NaN when the block holds a NaN (amax/amin and maximum propagate it):
            # such a block is always a candidate, and proves nothing
            self.peak = torch.maximum(self.rows.amax(1), self.rows.amin(1).neg_())
            self.sums = float64_sums(u) if sums else None
        self.nan_free = not bool(self.peak.isnan().any())

    def candidates(self, thr: float) -> Tensor:
        """int64 increasing block numbers that may hold an entry with |u_j| > thr."""
        if thr != thr:                                   # NaN threshold: nothing compares greater
            return torch.zeros(0, dtype=torch.int64, device=self.u.device)
        return torch.nonzero(self.peak > thr if self.nan_free else ~(self.peak <= thr)).view(-1)

    def bounds(self, thr: float, cand: Tensor) -> tuple[int, int]:
        """(lower, upper) bound of the number of entries with |u_j| > thr, given `candidates(thr)`:
        every candidate block of NaN-free peaks holds at least one; none holds more than `block`."""
        upper = cand.numel() * self.block + self.tail.numel()
        return (cand.numel() if self.nan_free else 0), upper

    def above(self, thr: float, cand: Tensor | None = None) -> Tensor:
        """int64 increasing positions j with |u_j| > thr (`cand`: `candidates(thr)`, if known)."""
        cand = self.candidates(thr) if cand is None else cand
        idx, _ = self.visit(cand, lambda a: a > thr)              # abs(NaN) > thr is False, as released
        return idx if thr == thr else idx[:0]

    def visit(self, cand: Tensor, keep: Callable[[Tensor], Tensor]) -> tuple[Tensor, Tensor]:
        """(int64 positions, |u| there) of the entries of blocks `cand` (increasing block numbers), then of the
        tail, whose |u_j| passes `keep` (a mask of its argument); only about len(cand) * block entries are read."""
        mags = self.rows.index_select(0, cand).view(-1).abs_()
        hit = torch.nonzero(keep(mags)).view(-1)
        pos = cand.index_select(0, torch.div(hit, self.block, rounding_mode="floor")).mul_(self.block)
        pos.add_(torch.remainder(hit, self.block))
        mags = mags.index_select(0, hit)
        if self.tail.numel():                                     # the last d mod block entries: always visited
            tail = self.tail.abs()
            near = torch.nonzero(keep(tail)).view(-1)
            pos, mags = torch.cat([pos, near.add(self.n)]), torch.cat([mags, tail.index_select(0, near)])
        return pos, mags


def k_of(d: int, density: float) -> int:
    """k = max(int(d * density), 1), as in both released code bases (hclhkbu/gtopkssgd,
    hclhkbu/GaussianK-SGD)."""
    return max(int(d * density), 1)
