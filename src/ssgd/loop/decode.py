"""Decoding a collective's result into one persistent dense buffer, touching only what changed.

Every step the trainer turns `results[0]` (a `Reduced`: the sum over ranks and P) into the averaged
gradient total / P. `Reduced.average()` makes a new d-sized tensor for that: at d = 25M a 100 MB
allocation per step, whose page faults cost more than the whole gTop-k collective. A `Decoder` owns
one float32 [d] buffer instead (the parameters' .grad are views of it, allocated once) and
remembers which positions the previous result set:

* a sparse result (a payload with `write_into`) first clears the previous result's positions, then
  writes its own: O(k) per step, instead of zeroing d entries;
* a dense result overwrites the whole buffer (one pass, the division by P that is needed anyway);
  for P = 1 the decoder returns the sum itself (no pass; the buffer is left as it was);
* a payload kind without `write_into` goes through `to_dense(scale, out=buffer)` (O(d)).

On the CPU the buffer lives in memory the kernel may back with 2 MiB transparent huge pages
(`hugepage_zeros`): the k scattered writes of a sparse result then miss the TLB on far fewer pages
(timings with their command: docs/hot-path.md).

The bits equal `Reduced.average()`'s. Contract: between two calls, nobody writes into the buffer
except by scaling it in place by a finite factor (gradient clipping does, which keeps zeros zero);
whoever writes anything else calls `invalidate()`. The optimizers of torch.optim only read gradients.
"""
from __future__ import annotations

import mmap

import torch
from torch import Tensor

from ssgd.comm.base import Reduced


HUGE_PAGE = 2 * 1024 * 1024


def hugepage_zeros(n: int, device: torch.device | str = "cpu") -> Tensor:
    """float32 [n] of zeros. On the CPU, for at least 2 MiB and where Python offers MADV_HUGEPAGE
    (Linux), in an anonymous mapping aligned to 2 MiB and advised for transparent huge pages (which
    the kernel honours when /sys/kernel/mm/transparent_hugepage/enabled is `madvise` or `always`);
    otherwise `torch.zeros`. The tensor keeps its mapping alive."""
    nbytes = 4 * n
    if torch.device(device).type != "cpu" or nbytes < HUGE_PAGE or not hasattr(mmap, "MADV_HUGEPAGE"):
        return torch.zeros(n, dtype=torch.float32, device=device)
    region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)   # zero-filled
    region.madvise(mmap.MADV_HUGEPAGE)
    raw = torch.frombuffer(region, dtype=torch.uint8)
    start = -raw.data_ptr() % HUGE_PAGE
    return raw[start:start + nbytes].view(torch.float32)


class Decoder:
    """total / P of successive results, written into the float32 [d] `out` (see the module docstring).

    One per process, since every local rank receives the same result; it holds no per-rank state.
    """

    def __init__(self, out: Tensor) -> None:
        if out.dim() != 1 or out.dtype != torch.float32:
            raise ValueError(f"Decoder: out must be a 1-D float32 tensor, got {out.dtype} {tuple(out.shape)}")
        self.out = out
        self._written: Tensor | None = None     # positions that may be nonzero; None: any position
        self._clean = bool(out.count_nonzero() == 0)

    def __call__(self, reduced: Reduced) -> Tensor:
        """The averaged gradient of `reduced`: `self.out`, or for a dense result with P = 1 the
        result's own tensor (read-only, like `to_dense()`)."""
        total = reduced.total
        carried = total.indices()
        write = getattr(total, "write_into", None)
        if carried is None and reduced.P == 1:
            return total.to_dense()                # the sum itself (read-only): no copy at all
        if carried is None or write is None:
            reduced.average(out=self.out)          # overwrites every position
            self._written, self._clean = carried, carried is not None
            return self.out
        if not self._clean:
            self.out.zero_()
        elif self._written is not None:
            self.out.index_fill_(0, self._written, 0.0)
        write(self.out, scale=reduced.P)
        self._written, self._clean = carried, True
        return self.out

    def invalidate(self) -> None:
        """Someone wrote into the buffer: the next sparse result clears all of it first."""
        self._clean = False


class ParamGrads:
    """The parameters' .grad as views of one `Decoder` buffer, made once: `set(reduced)` decodes a
    result and points every .grad at its part of the averaged gradient (no allocation per step)."""

    def __init__(self, params: list[torch.nn.Parameter]) -> None:
        self.params = params
        self.sizes = [p.numel() for p in params]
        self.decoder = Decoder(hugepage_zeros(sum(self.sizes), device=params[0].device))
        self.views = self._views_of(self.decoder.out)

    def _views_of(self, flat: Tensor) -> list[Tensor]:
        return [g.view_as(p) for g, p in zip(flat.split(self.sizes), self.params)]

    def set(self, reduced: Reduced) -> Tensor:
        """Decode `reduced` and make each .grad a view of the result; returns the flat gradient."""
        grad = self.decoder(reduced)
        views = self.views if grad is self.decoder.out else self._views_of(grad)
        for p, g in zip(self.params, views):
            p.grad = g
        return grad
