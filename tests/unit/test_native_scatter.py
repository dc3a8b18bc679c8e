"""`ssgd.native.scatter_segments` (scatter.c), the DDP hook's decode, against a torch oracle written from its
contract: zero the buffer, move every index by its segment's shift, divide by the scale."""
from __future__ import annotations

import pytest
import torch

from ssgd import native

needs_native = pytest.mark.skipif(not native.available(), reason="the C kernels are unavailable here")


def layout(sizes: list[int], order: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(starts, shifts) of parameters of `sizes` (model order) laid out in a buffer in `order`."""
    starts = torch.tensor([sum(sizes[:p]) for p in range(len(sizes))])
    offset, at = 0, {}
    for p in order:
        at[p] = offset
        offset += sizes[p]
    return starts, torch.tensor([at[p] for p in range(len(sizes))]) - starts


def oracle(n: int, idx: torch.Tensor, val: torch.Tensor, scale: int, starts: torch.Tensor,
           shifts: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(n)
    for i, v in zip(idx.tolist(), val.tolist()):
        s = max(j for j in range(len(starts)) if starts[j] <= i)
        out[i + int(shifts[s])] = torch.tensor(v, dtype=torch.float32) / scale if scale != 1 else v
    return out


@needs_native
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("scale", [1, 2, 3, 7])
def test_it_writes_what_the_oracle_writes_bit_for_bit(seed, scale):
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 40, (int(torch.randint(1, 8, (1,), generator=g)),), generator=g).tolist()
    order = torch.randperm(len(sizes), generator=g).tolist()
    n = sum(sizes)
    idx = torch.randperm(n, generator=g)[:max(1, n // 3)]
    if seed % 2:
        idx = idx.sort().values
    val = torch.randn(idx.numel(), generator=g)
    val[0] = -0.0
    starts, shifts = layout(sizes, order)
    out = torch.full((n,), float("nan"))
    assert native.scatter_segments(out, idx, val, scale, starts, shifts)
    want = oracle(n, idx, val, scale, starts, shifts)
    assert torch.equal(out.view(torch.int32), want.view(torch.int32))


@needs_native
def test_bad_input_is_declined_or_refused():
    starts, shifts = layout([3, 2], [1, 0])
    out, idx, val = torch.zeros(5), torch.tensor([0, 4]), torch.ones(2)
    assert not native.scatter_segments(out.double(), idx, val.double(), 2, starts, shifts)   # not float32: torch
    assert not native.scatter_segments(out, idx.int(), val, 2, starts, shifts)
    assert not native.scatter_segments(out, idx, val[:1], 2, starts, shifts)
    with pytest.raises(ValueError, match="scatter_segments"):
        native.scatter_segments(out, torch.tensor([0, 5]), val, 2, starts, shifts)
    with pytest.raises(ValueError, match="scatter_segments"):
        native.scatter_segments(out, torch.tensor([-1, 0]), val, 2, starts, shifts)
