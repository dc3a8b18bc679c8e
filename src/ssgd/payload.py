"""What one rank sends in a communication step: the payload protocol and its two built-in kinds.

A compressor turns the compensated gradient u = g + e (float32 [d]) into a payload; a collective
aggregates the P ranks' payloads; the error-feedback memory then removes from e what counted as
sent. Every code path outside the compressor and the collective that consumes it (the memory, the
per-rank sync step, capture, the trainer's accounting) talks to payloads only through `Payload`,
so a new kind (quantised, low-rank, ...) is one new class here or in its own module, plus the
compressor that makes it and a collective that understands its wire format; nothing else changes.
`docs/collectives.md` shows a worked example.

This module depends on torch only: `ssgd.compress` and `ssgd.comm` both import it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor


class Payload(Protocol):
    """One rank's contribution to a collective, describing a float32 vector of length `numel`.

    numel: d, the length of the vector it describes.
    count: entries it carries (d for a dense payload); logged as the achieved density and passed
        to `Collective.model_seconds`.
    to_dense(scale, out): float32 [d], the described vector divided element-wise by `scale`
        (zero where nothing is carried). Written into `out` (float32 [d]) when given, which is
        then returned; otherwise the result may be a new tensor or the payload's own storage
        (read-only for the caller).
    restrict(support): the part that counts as sent when `support` (int64 indices, distinct) is
        the set of positions a collective kept, e.g. gTop-k's global index set; `self` when
        support is None (everything was sent). The result is again a payload.
    subtract_from(e): e -= what this payload describes, in place on float32 [d] e. Contract: the
        payload was made from e (compressors copy u, which lives in e), so a kind whose values
        are exact copies may set those positions to zero instead of subtracting; a lossy kind
        (quantised values) must subtract its decoded values, so that e keeps the rounding error.
    indices(): int64 positions carried, or None when the payload is dense (analysis capture).

    Optional, for decoding in O(count) instead of O(d) (`ssgd.loop.decode.Decoder`):
    write_into(out, scale): out[positions carried] = values / scale, every other position of
        float32 [d] `out` untouched. A kind without it is decoded by `to_dense(scale, out=...)`.
    """

    @property
    def numel(self) -> int: ...

    @property
    def count(self) -> int: ...

    def to_dense(self, scale: float = 1.0, out: Tensor | None = None) -> Tensor: ...

    def restrict(self, support: Tensor | None) -> Payload: ...

    def subtract_from(self, e: Tensor) -> None: ...

    def indices(self) -> Tensor | None: ...


def _check_out(out: Tensor, numel: int) -> None:
    if out.shape != (numel,) or out.dtype != torch.float32:
        raise ValueError(f"to_dense: out must be float32 [{numel}], got {out.dtype} {tuple(out.shape)}")


@dataclass(frozen=True)
class Dense:
    """The whole vector: values float32 [d] (not copied; a compressor may hand over u itself), or
    float16 / bfloat16 [d] when a 16-bit wire format rounded them (`ssgd.comm.wire.WireFormat.encode`):
    decoding gives float32, and `subtract_from` subtracts the rounded values, so e keeps the rounding."""

    values: Tensor

    @property
    def numel(self) -> int:
        return self.values.numel()

    @property
    def count(self) -> int:
        return self.values.numel()

    def to_dense(self, scale: float = 1.0, out: Tensor | None = None) -> Tensor:
        """values / scale; `values` itself when scale == 1 and no `out` is given."""
        values = self.values.float()                 # float32: the tensor itself, no copy
        if out is None:
            return values if scale == 1.0 else values / scale
        _check_out(out, self.numel)
        return out.copy_(values) if scale == 1.0 else torch.div(values, scale, out=out)

    def restrict(self, support: Tensor | None) -> Payload:
        """self, or the entries at `support` as a `Sparse` (copies of values)."""
        if support is None:
            return self
        return Sparse(support, self.values[support], self.numel)

    def subtract_from(self, e: Tensor) -> None:
        """e -= values (16-bit values are widened to float32 first: e keeps their rounding error)."""
        e.sub_(self.values)

    def indices(self) -> Tensor | None:
        return None

    def write_into(self, out: Tensor, scale: float = 1.0) -> Tensor:
        """The whole of `out` = values / scale (what `to_dense(scale, out)` does)."""
        return self.to_dense(scale, out=out)


@dataclass(frozen=True)
class Sparse:
    """n entries of a flat vector of length `numel`.

    idx: int64 [n], distinct positions in [0, numel); val: float32 [n], copies of the described
    vector's values (compressors copy u), or float16 / bfloat16 [n], those copies rounded by a
    16-bit wire format (`ssgd.comm.wire.WireFormat.encode`). Order carries no meaning. Decoding
    (`to_dense`, `write_into`) always gives float32.
    """

    idx: Tensor
    val: Tensor
    numel: int

    def __len__(self) -> int:
        return self.idx.numel()

    @property
    def count(self) -> int:
        return self.idx.numel()

    def to_dense(self, scale: float = 1.0, out: Tensor | None = None) -> Tensor:
        """float32 [numel], zero outside idx; val / scale at idx (division done element-wise)."""
        if out is None:
            out = torch.zeros(self.numel, dtype=torch.float32, device=self.val.device)
        else:
            _check_out(out, self.numel)
            out.zero_()
        return self.write_into(out, scale)

    def write_into(self, out: Tensor, scale: float = 1.0) -> Tensor:
        """out[idx] = val / scale (division element-wise); the rest of `out` untouched. O(n)."""
        val = self.val.float()                       # float32: the tensor itself, no copy
        return out.scatter_(0, self.idx, val if scale == 1.0 else val / scale)

    def restrict(self, support: Tensor | None, marks: Tensor | None = None) -> Payload:
        """self, or the entries whose index is in `support` (in this payload's order). `marks`: see
        `member_of` (the same result, found by marking instead of searching)."""
        if support is None:
            return self
        keep = member_of(self.idx, support, marks).nonzero().view(-1)    # one nonzero for both selections
        return Sparse(self.idx.index_select(0, keep), self.val.index_select(0, keep), self.numel)

    def subtract_from(self, e: Tensor) -> None:
        """float32 values: e[idx] = 0, since they are copies of e's (the contract), so e - val is zero
        there; zeroing is O(n) and exact even for infinite values. 16-bit values (lossy): e[idx] -=
        val, in float32, so e keeps the rounding error; e[idx] + val == the old e[idx] exactly when
        the value is finite (x - round(x) is exact in float32: Sterbenz, or the low bits of x)."""
        if self.val.dtype == torch.float32:
            e.index_fill_(0, self.idx, 0.0)
        else:
            e.scatter_(0, self.idx, e.index_select(0, self.idx) - self.val.float())

    def indices(self) -> Tensor | None:
        return self.idx


def member_of(x: Tensor, support: Tensor, marks: Tensor | None = None) -> Tensor:
    """bool [len(x)]: which entries of x occur in `support` (int64, distinct), as `torch.isin`.

    `marks`: a bool tensor, all False, longer than every entry of x and support (a rank's scratch of d
    flags): support's positions are marked, read at x and cleared again, O(n + m) with no search (in
    the DDP hook's settle, 37 us against 320 us at n = m = 4,019, d = 401,920); `marks` is all False
    again on return. Without it, a support in increasing order (gTop-k's global set and strict
    supports are) is searched by bisection, O(n log m) without the sort that `torch.isin` does; any
    other order goes to isin.
    """
    m = support.numel()
    if m == 0 or x.numel() == 0:
        return torch.zeros(x.numel(), dtype=torch.bool, device=x.device)
    if marks is not None:
        marks.index_fill_(0, support, True)
        keep = marks.index_select(0, x)
        marks.index_fill_(0, support, False)
        return keep
    if m > 1 and not bool((support[1:] > support[:-1]).all()):
        return torch.isin(x, support)
    return support.index_select(0, torch.searchsorted(support, x).clamp_(max=m - 1)) == x


def sum_sparse(parts: list[Sparse]) -> Sparse:
    """Sum of sparse vectors of one length; result has distinct indices in increasing order.

    Values are added in float32 (16-bit values are widened first). Values on a common index are
    added left to right in list order (index_add_ on CPU is serial
    at one intra-op thread), so the bits equal a dense rank-order sum of the parts (on CPU; CUDA's
    index_add_ accumulates in no fixed order).
    """
    numel = parts[0].numel
    idx = torch.cat([p.idx for p in parts])
    val = torch.cat([p.val.float() for p in parts])
    uniq, inverse = torch.unique(idx, sorted=True, return_inverse=True)
    out = torch.zeros(uniq.numel(), dtype=val.dtype, device=val.device).index_add_(0, inverse, val)
    return Sparse(uniq, out, numel)
