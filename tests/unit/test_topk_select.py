"""The C block-peak Top-k (ssgd/native/topk_select.c) against a sort oracle and the torch path."""
import pytest
import torch

from ssgd import native
from ssgd.compress import sparse
from ssgd.compress.sparse import BlockPeaks, k_of, select_topk, topk_block

needs_native = pytest.mark.skipif(not native.available(), reason="the C kernels are not built (no C compiler)")


def vector(d: int, dist: str, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dist == "normal":
        return torch.randn(d, generator=g)
    if dist == "laplace":
        return torch.sign(torch.randn(d, generator=g)) * torch.empty(d).exponential_(generator=g)
    if dist == "sparse":        # 95 % zeros: blocks of zeros; at density 0.05+ the k-th magnitude is a tied 0
        return torch.randn(d, generator=g) * (torch.rand(d, generator=g) < 0.05)
    if dist == "ties":          # 101 magnitudes: the k-th is tied many times
        return torch.randint(-50, 51, (d,), generator=g) / 7.0
    if dist == "specials":      # signed zeros and infinities among normal values
        u = torch.randn(d, generator=g)
        u[torch.randint(d, (40,), generator=g)] = torch.tensor([float("inf"), -float("inf"), -0.0, 0.0] * 10)
        return u
    raise ValueError(dist)


def tied_at_k(u: torch.Tensor, k: int) -> bool:
    """Whether more entries share the k-th largest magnitude than the k largest take (the set is not unique)."""
    mags = u.abs().sort(descending=True).values
    return k < u.numel() and bool(mags[k - 1] == mags[k])


CASES = [(65_536, 0.01), (65_536 + 17, 0.001), (300_007, 0.001), (300_007, 0.004), (401_920, 0.01),
         (1_000_003, 0.01), (200_003, 1 / 32)]        # blocks of 64 and 32, tails of 0 to 31 entries
DISTS = ["normal", "laplace", "sparse", "ties", "specials"]


@needs_native
@pytest.mark.parametrize("d, density", CASES)
@pytest.mark.parametrize("dist", DISTS)
def test_the_kernel_gives_the_unique_top_k_set_and_declines_a_tie(d, density, dist):
    """Where the k-th magnitude is not tied the set is unique: the kernel's positions are it (increasing),
    equal to torch.topk's over all d; where it is tied the kernel returns None and leaves the choice."""
    u, k = vector(d, dist, seed=d + int(1e6 * density)), k_of(d, density)
    block = topk_block(u, k)
    assert block is not None
    idx = native.topk_blocks(u, BlockPeaks(u, block).peak, block, k)
    if tied_at_k(u, k):
        assert idx is None
        return
    assert idx is not None and idx.dtype == torch.int64 and idx.numel() == k
    assert torch.equal(idx, torch.topk(u.abs(), k, sorted=False).indices.sort().values)


@needs_native
@pytest.mark.parametrize("d, density", CASES)
@pytest.mark.parametrize("dist", DISTS)
def test_on_a_tie_the_kernel_gives_the_candidates_the_torch_visit_finds(d, density, dist):
    """The oracle is `BlockPeaks.visit` in torch at t = the k-th largest peak: the same positions, in the same
    order, so torch.topk breaks a tie among the same input either way."""
    u, k = vector(d, dist, seed=3 * d + int(1e6 * density)), k_of(d, density)
    block = topk_block(u, k)
    peaks = BlockPeaks(u, block)
    found = native.topk_or_candidates(u, peaks.peak, block, k)
    assert found is not None
    idx, cand = found
    assert (idx is None) == tied_at_k(u, k) and (cand is None) == (idx is not None)
    if cand is None:
        assert torch.equal(idx, native.topk_blocks(u, peaks.peak, block, k))
        return
    t = torch.topk(peaks.peak, k, sorted=False).values.min()
    pos, mags = peaks.visit(torch.nonzero(peaks.peak >= t).view(-1), lambda a: a >= t)
    assert cand.dtype == torch.int64 and torch.equal(cand, pos)
    assert torch.equal(u.index_select(0, cand).abs(), mags)


@pytest.mark.parametrize("d, density", CASES)
@pytest.mark.parametrize("dist", DISTS)
def test_select_topk_is_the_same_bits_with_and_without_the_kernel(monkeypatch, d, dist, density):
    """The kernel changes no selection: ties included (there torch.topk picks among the kernel's candidates,
    or, without the kernel, among the entries the torch visit finds)."""
    u, k = vector(d, dist, seed=7 * d + int(1e6 * density)), k_of(d, density)
    fast = select_topk(u, k)
    monkeypatch.setattr(sparse.native, "topk_or_candidates", lambda *a, **kw: None)
    slow = select_topk(u, k)
    assert torch.equal(fast.idx, slow.idx) and torch.equal(fast.val, slow.val)
    assert torch.equal(fast.val, u[fast.idx])


@needs_native
def test_a_single_winner_in_the_tail_and_k_equal_to_the_blocks():
    u = torch.zeros(64 * 100 + 9)
    u[-1] = -3.0                                         # the largest magnitude sits in the 9-entry tail
    u[64 * torch.arange(100)] = torch.arange(1, 101, dtype=torch.float32) / 1000   # one entry per block
    peak = BlockPeaks(u, 64).peak
    assert native.topk_blocks(u, peak, 64, 1).tolist() == [u.numel() - 1]
    idx = native.topk_blocks(u, peak, 64, 100)           # k = blocks: 99 block winners and the tail's
    assert idx.tolist() == (64 * torch.arange(1, 100)).tolist() + [u.numel() - 1]


@needs_native
def test_bad_peaks_or_k_are_refused_and_other_tensors_go_to_torch():
    u = torch.randn(6400)
    peak = BlockPeaks(u, 64).peak
    for bad_peak, k in ((peak[:-1], 5), (peak, 0), (peak, 101)):
        with pytest.raises(ValueError, match="topk_blocks"):
            native.topk_blocks(u, bad_peak, 64, k)
    assert native.topk_blocks(u.double(), peak, 64, 5) is None
    assert native.topk_blocks(u[::1].view(80, 80), peak, 64, 5) is None
