"""The sparse value type: wire format, summation order, merge, selection."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ssgd.comm.collectives.gtopk import merge_topk
from ssgd.comm.wire import MAX_NUMEL, pack_sparse, unpack_sparse
from ssgd.compress.sparse import k_of, select_topk
from ssgd.payload import Sparse, sum_sparse


def sparse(idx, val, d=10):
    return Sparse(torch.tensor(idx, dtype=torch.int64), torch.tensor(val, dtype=torch.float32), d)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), min_size=0, max_size=30))
def test_pack_unpack_is_bit_exact(values):
    d = 2**31 - 1
    idx = torch.arange(len(values), dtype=torch.int64) * 65537 % d
    s = Sparse(idx, torch.tensor(values, dtype=torch.float32), d)
    buf = pack_sparse(s)
    assert buf.dtype == torch.int32 and buf.numel() == 2 * len(values)   # 8 bytes per entry
    back = unpack_sparse(buf, d)
    assert torch.equal(back.idx, s.idx)
    assert torch.equal(back.val.view(torch.int32), s.val.view(torch.int32))  # NaN payloads too


def test_sum_sparse_adds_common_indices_in_list_order():
    a, b, c = sparse([3, 1], [1e8, 2.0]), sparse([1, 3], [5.0, 1.0]), sparse([3], [-1e8])
    s = sum_sparse([a, b, c])
    assert s.idx.tolist() == [1, 3]
    # (1e8 + 1) rounds to 1e8 in float32, then - 1e8 = 0: left-to-right order, not (1e8 - 1e8) + 1
    dense_order = ((torch.tensor(1e8) + torch.tensor(1.0)) + torch.tensor(-1e8)).item()
    assert s.val.tolist() == [7.0, dense_order]


def test_merge_topk_sums_before_selecting():
    a = sparse([0, 1], [3.0, -2.0])
    b = sparse([1, 2], [-2.0, 3.5])
    m = merge_topk(a, b, 2)
    # index 1 sums to -4 and wins over 0 (3.0); selecting before summing would keep 2 and 0
    assert m.idx.tolist() == [1, 2] and m.val.tolist() == [-4.0, 3.5]


def test_merge_topk_returns_exactly_k_when_union_is_larger():
    a, b = sparse([0, 1, 2], [1.0, 2.0, 3.0]), sparse([3, 4, 5], [4.0, 5.0, 6.0])
    assert merge_topk(a, b, 3).idx.tolist() == [3, 4, 5]


def test_select_topk_is_exact_by_magnitude():
    u = torch.tensor([0.1, -5.0, 2.0, 4.0, -0.2])
    s = select_topk(u, 2)
    assert sorted(s.idx.tolist()) == [1, 3] and sorted(s.val.tolist()) == [-5.0, 4.0]


def sort_oracle_topk(u: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest magnitudes of u, in decreasing order, from a full sort (float64)."""
    return u.double().abs().sort(descending=True).values[:k]


@pytest.mark.parametrize("d, density", [
    (65_536, 0.01), (65_536 + 17, 0.001), (300_007, 0.001), (300_007, 0.004), (1_000_003, 0.01),
    (200_003, 1 / 32), (200_003, 0.05)])             # block 64, block 32 (tails of 17, 7, 3 entries); full
@pytest.mark.parametrize("dist", ["normal", "laplace", "sparse", "ties"])
def test_select_topk_through_block_peaks_equals_a_sort_and_torch_topk(d, density, dist):
    """The block-peak path (select_topk's docstring) against a sort oracle: the same magnitudes, k distinct
    increasing indices, values u[idx]; and the same set as torch.topk over all d entries where the k-th
    magnitude is not tied (with ties, the same magnitudes). Laplace: heavy tails; 'sparse': 95 % zeros,
    so some blocks hold only zeros; 'ties': magnitudes from 50 values, so the k-th is tied many times."""
    from ssgd.compress.sparse import select_topk_full, topk_block

    gen = torch.Generator().manual_seed(d + int(1e6 * density))
    u = {"normal": lambda: torch.randn(d, generator=gen),
         "laplace": lambda: torch.distributions.Laplace(0.0, 1.0).sample((d,)),
         "sparse": lambda: torch.randn(d, generator=gen) * (torch.rand(d, generator=gen) < 0.05),
         "ties": lambda: (torch.randint(-50, 51, (d,), generator=gen) / 7.0)}[dist]()
    k = k_of(d, density)
    s = select_topk(u, k)
    assert s.idx.numel() == k and torch.equal(s.idx, s.idx.unique()) and torch.equal(s.val, u[s.idx])
    assert torch.equal(s.val.double().abs().sort(descending=True).values, sort_oracle_topk(u, k))
    full = select_topk_full(u, k)
    magnitudes = u.abs().sort(descending=True).values
    if dist != "ties" and magnitudes[k - 1] != magnitudes[k]:
        assert torch.equal(s.idx, full.idx)
    assert (topk_block(u, k) is None) == (density > 1 / 32)


def test_select_topk_with_nan_or_infinity_falls_back_or_keeps_them():
    """A NaN anywhere: torch.topk over all entries (which ranks NaN first), as before the block path; an
    infinity is an ordinary largest magnitude."""
    from ssgd.compress.sparse import select_topk_full

    u = torch.randn(100_000, generator=torch.Generator().manual_seed(3))
    u[[5, 77_777]] = torch.tensor([float("inf"), float("-inf")])
    s = select_topk(u, 100)
    assert {5, 77_777} <= set(s.idx.tolist()) and torch.equal(s.idx, select_topk_full(u, 100).idx)
    u[99_999] = float("nan")
    assert torch.equal(select_topk(u, 100).idx, select_topk_full(u, 100).idx)


def test_k_of_matches_released_code():
    assert k_of(199210, 0.001) == 199 and k_of(10, 0.001) == 1 and k_of(1000, 1.0) == 1000


def test_to_dense_divides_elementwise():
    s = sparse([2, 5], [3.0, 1.0], d=6)
    third = (torch.tensor(1.0) / 3).item()   # float32 division
    assert s.to_dense(scale=3).tolist() == [0, 0, 1.0, 0, 0, third]


def test_pack_refuses_a_vector_longer_than_the_int32_wire_carries():
    assert MAX_NUMEL == 2**31 - 1
    largest = pack_sparse(sparse([MAX_NUMEL - 1], [1.0], d=MAX_NUMEL))
    assert largest[0].item() == MAX_NUMEL - 1
    with pytest.raises(ValueError, match="int32 wire format") as err:
        pack_sparse(sparse([0], [1.0], d=MAX_NUMEL + 1))
    assert "\n" not in str(err.value)


def test_pack_into_a_buffer_is_the_same_bits_and_checks_the_buffer():
    s = sparse([7, 0, 3], [float("nan"), -0.0, 1e-45])
    out = torch.full((6,), -1, dtype=torch.int32)
    assert pack_sparse(s, out=out) is out and torch.equal(out, pack_sparse(s))
    for bad in (torch.empty(5, dtype=torch.int32), torch.empty(6, dtype=torch.int64)):
        with pytest.raises(ValueError, match="out must be int32"):
            pack_sparse(s, out=bad)
