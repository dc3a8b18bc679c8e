"""The C block peaks and float64 sums (ssgd/native/block_peaks.c) against torch and exact sums."""
import math
import os
import shutil

import pytest
import torch

from ssgd import native
from ssgd.compress import sparse
from ssgd.compress.gaussiank import GaussianK
from ssgd.compress.sparse import BlockPeaks, float64_sums, select_topk

needs_native = pytest.mark.skipif(not native.available(), reason="the C kernels are not built (no C compiler)")
SPECIALS = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -1.0, 2.5, 1e-40, -3e38])


def test_the_kernels_are_built_where_a_compiler_is():
    if os.environ.get("SSGD_NATIVE") == "0" or not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("SSGD_NATIVE=0 or no C compiler: the torch paths are the only ones here")
    assert native.available()


def torch_peaks(u: torch.Tensor, block: int) -> torch.Tensor:
    rows = u[:u.numel() // block * block].view(-1, block)
    return torch.maximum(rows.amax(1), rows.amin(1).neg())


def exact_sums(u: torch.Tensor) -> tuple[float, float]:
    values = u.double().tolist()
    return math.fsum(values), math.fsum(v * v for v in values)


def with_specials(d: int, seed: int, count: int = 12) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(d, generator=g)
    if d:
        at = torch.randint(d, (min(d, count),), generator=g)
        u[at] = SPECIALS[torch.randint(len(SPECIALS), (at.numel(),), generator=g)]
    return u


@needs_native
@pytest.mark.parametrize("d", [0, 7, 8, 31, 32, 33, 1000, 65_535, 65_536, 65_537, 200_003])
@pytest.mark.parametrize("block", [8, 32, 64, 65_536])
def test_peaks_equal_torch_amax_amin_with_nan_inf_and_signed_zeros(d, block):
    u = with_specials(d, seed=d + block)
    u[: min(d, 16)] = -0.0                         # a block of (signed) zeros
    peak, sums = native.block_peaks(u, block)
    want = torch_peaks(u, block)
    assert sums is None and peak.shape == want.shape
    assert torch.equal(peak.isnan(), want.isnan())
    assert torch.equal(peak[~want.isnan()], want[~want.isnan()])
    assert not bool((peak.view(torch.int32) < 0).any())     # +0.0, never -0.0 or a negative NaN


@needs_native
@pytest.mark.parametrize("d", [1, 9, 65_536, 65_543, 300_001])
@pytest.mark.parametrize("scale,shift", [(1.0, 0.0), (1e-3, 0.02), (2.0, -5.0)])
def test_sums_are_near_exact_and_the_same_bits_for_every_block(d, scale, shift):
    u = torch.randn(d, generator=torch.Generator().manual_seed(d)) * scale + shift
    total, squares = native.float64_sums(u)
    exact_total, exact_squares = exact_sums(u)
    assert total == pytest.approx(exact_total, rel=1e-13, abs=1e-12 * d * scale)
    assert squares == pytest.approx(exact_squares, rel=1e-13)
    for block in (8, 32, 64, 4096):
        assert native.block_peaks(u, block, sums=True)[1] == (total, squares), block
    torch_total, torch_squares = torch_sums(u)
    assert total == pytest.approx(torch_total, rel=1e-13, abs=1e-12 * d * scale)
    assert squares == pytest.approx(torch_squares, rel=1e-13)


def torch_sums(u: torch.Tensor) -> tuple[float, float]:
    """float64_sums' torch path (a float64 vector never goes to the kernel)."""
    return float64_sums(u.double())


@needs_native
def test_a_nan_makes_the_sums_nan_and_inf_makes_them_inf():
    u = torch.randn(70_000)
    u[5] = float("inf")
    assert native.float64_sums(u)[1] == math.inf
    u[6] = float("nan")
    assert all(math.isnan(v) for v in native.float64_sums(u))


def test_bad_blocks_are_refused_and_other_tensors_go_to_torch():
    for block in (0, 4, 24, 1 << 17, True):
        with pytest.raises(ValueError, match="power of two"):
            native.block_peaks(torch.randn(100), block)
    for u in (torch.randn(100, dtype=torch.float64), torch.randn(10, 10), torch.randn(200)[::2]):
        assert native.block_peaks(u, 8) is None and native.float64_sums(u) is None


@pytest.mark.parametrize("d", [65_536 * 3 + 5, 1_000_003])
@pytest.mark.parametrize("dist", ["normal", "laplace"])
def test_compressors_select_the_same_through_torch_and_the_kernel(monkeypatch, d, dist):
    """The peaks are the same bits both ways; Gaussian-k's sums differ in the last bits only, which moves
    no entry of these vectors across its threshold."""
    g = torch.Generator().manual_seed(d)
    u = torch.randn(d, generator=g)
    if dist == "laplace":
        u = torch.sign(u) * torch.empty(d).exponential_(generator=g)
    fast = GaussianK().compress(u, 0.001), select_topk(u, d // 1000)
    monkeypatch.setattr(sparse.native, "block_peaks", lambda *a, **k: None)
    monkeypatch.setattr(sparse.native, "float64_sums", lambda *a, **k: None)
    assert BlockPeaks(u, 32, sums=True).sums == torch_sums(u)           # the torch path really ran
    slow = GaussianK().compress(u, 0.001), select_topk(u, d // 1000)
    for a, b in zip(fast, slow):
        assert torch.equal(a.idx, b.idx) and torch.equal(a.val, b.val)
