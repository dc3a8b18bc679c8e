"""The C gTop-k merge (ssgd/native/gtopk_merge.c) against the torch merge and the oracle, bit for bit."""
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/, for `oracles`
from oracles import AmbiguousTopK, merge as oracle_merge  # noqa: E402
from ssgd import native  # noqa: E402
from ssgd.comm.collectives.gtopk import _merge_native, _merge_torch, merge_entries  # noqa: E402

F32 = np.float32


def test_the_c_merge_is_built_where_a_compiler_is():
    if os.environ.get("SSGD_NATIVE") == "0" or not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("SSGD_NATIVE=0 or no C compiler: the torch merge is the only one here")
    assert native.available(), "make setup (or the first merge) should have built ssgd/native"
    assert native.library_path().exists()


needs_native = pytest.mark.skipif(not native.available(), reason="the C merge is not built (no C compiler)")


def bits(t: torch.Tensor) -> list[int]:
    return t.contiguous().view(torch.int32).tolist()


def assert_same(got, want):
    (gi, gv, gt), (wi, wv, wt) = got, want
    assert gi.tolist() == wi.tolist()
    assert bits(gv) == bits(wv)                    # -0.0 vs 0.0 and NaN payloads included
    assert (gt is None) == (wt is None)
    if gt is not None:
        assert gt.n == wt.n
        assert gt.into_a.tolist() == wt.into_a.tolist() and gt.into_b.tolist() == wt.into_b.tolist()
        assert (gt.kept is None) == (wt.kept is None)
        if gt.kept is not None:
            assert gt.kept.tolist() == wt.kept.tolist()


def operand(gen: torch.Generator, n: int, d: int, values: str, ordered: bool) -> tuple[torch.Tensor, torch.Tensor]:
    if d <= 10_000:
        idx = torch.randperm(d, generator=gen)[:n]
    else:                             # distinct draws from a range too large for randperm
        idx = torch.unique(torch.randint(0, d, (n + 8,), generator=gen))[:n]
        idx = idx[torch.randperm(idx.numel(), generator=gen)]
    idx = idx.sort().values.to(torch.int32) if ordered else idx.to(torch.int32)
    n = idx.numel()
    if values == "ties":              # few distinct magnitudes: ties at the boundary, signed zeros
        val = torch.tensor([-2.0, -1.0, -0.0, 0.0, 1.0, 2.0])[torch.randint(0, 6, (n,), generator=gen)]
    elif values == "special":         # NaN, infinities and signed zeros among normal values
        val = torch.randn(n, generator=gen)
        pick = torch.rand(n, generator=gen)
        val[pick < 0.1] = float("nan")
        val[(pick >= 0.1) & (pick < 0.2)] = float("inf")
        val[(pick >= 0.2) & (pick < 0.3)] = -float("inf")
        val[(pick >= 0.3) & (pick < 0.4)] = -0.0
    else:
        val = torch.randn(n, generator=gen)
    return idx, val


@needs_native
@pytest.mark.parametrize("values", ["normal", "ties", "special"])
@pytest.mark.parametrize("ordered", [True, False])
def test_c_merge_equals_the_torch_merge(values, ordered):
    # a seed fixed across processes (hash() of a str is salted per process: PYTHONHASHSEED)
    gen = torch.Generator().manual_seed(10 * ["normal", "ties", "special"].index(values) + int(ordered))
    for case in range(300):
        na, nb = (int(x) for x in torch.randint(0, 40, (2,), generator=gen))
        d = int(torch.randint(1, 3, (1,), generator=gen)) * max(na, nb, 1)
        d += 2**31 - 200 if case % 7 == 0 else 0                  # indices near the int32 edge
        k = int(torch.randint(1, 50, (1,), generator=gen))
        a, b = operand(gen, min(na, d), d, values, ordered), operand(gen, min(nb, d), d, values, ordered)
        for trace in (True, False):
            want = _merge_torch(a[0], a[1], b[0], b[1], k, trace)
            assert_same(_merge_native(a[0], a[1], b[0], b[1], k, trace), want)


@needs_native
def test_c_merge_at_the_benchmark_size_equals_the_torch_merge():
    d, k = 25 * 2**20, 26_214
    gen = torch.Generator().manual_seed(1)
    u = [torch.randn(d, generator=gen) for _ in range(2)]
    ops = []
    for x in u:
        i = torch.topk(x.abs(), k, sorted=False).indices.sort().values
        ops.append((i.to(torch.int32), x[i]))
    (ai, av), (bi, bv) = ops
    bi = torch.cat([ai[: k // 3], bi[~torch.isin(bi, ai[: k // 3])][: k - k // 3]]).sort().values   # a third in common
    bv = torch.randn(k, generator=gen)
    assert_same(merge_entries(ai, av, bi, bv, k), _merge_torch(ai, av, bi, bv, k, True))


@pytest.mark.parametrize("merge", [pytest.param(_merge_native, marks=needs_native), _merge_torch], ids=["c", "torch"])
def test_the_tie_and_nan_rules_by_hand(merge):
    i32, f32 = torch.int32, torch.float32
    # |1.0| three times for two places: the lower indices win
    idx, val, _ = merge(torch.tensor([0, 5], dtype=i32), torch.tensor([1.0, -1.0]),
                        torch.tensor([3], dtype=i32), torch.tensor([1.0]), 2, False)
    assert idx.tolist() == [0, 3] and val.tolist() == [1.0, 1.0]
    # NaN ranks above infinity, infinity above numbers
    idx, val, _ = merge(torch.tensor([1, 2], dtype=i32), torch.tensor([float("inf"), float("nan")]),
                        torch.tensor([0], dtype=i32), torch.tensor([5.0]), 2, False)
    assert idx.tolist() == [1, 2] and val[0].item() == float("inf") and val[1].isnan()
    # (0 + a) + b on a common index; a lone -0.0 becomes +0.0, as index_add into zeros does
    idx, val, _ = merge(torch.tensor([4, 7], dtype=i32), torch.tensor([-0.0, 1e8]),
                        torch.tensor([7], dtype=i32), torch.tensor([1.0], dtype=f32), 5, False)
    assert idx.tolist() == [4, 7] and bits(val) == bits(torch.tensor([0.0, 1e8 + 1.0]))


@needs_native
def test_c_merge_agrees_with_the_oracle_and_refuses_repeated_indices():
    gen = torch.Generator().manual_seed(5)
    checked = 0
    for _ in range(200):
        k = int(torch.randint(1, 20, (1,), generator=gen))
        a, b = operand(gen, 15, 60, "normal", False), operand(gen, 15, 60, "normal", False)
        da = {int(i): F32(v) for i, v in zip(a[0], a[1])}
        db = {int(i): F32(v) for i, v in zip(b[0], b[1])}
        try:
            want = oracle_merge(da, db, k)
        except AmbiguousTopK:
            continue
        idx, val, _ = merge_entries(a[0], a[1], b[0], b[1], k, trace=False)
        assert dict(zip(idx.tolist(), val.tolist())) == {i: float(v) for i, v in want.items()}
        assert idx.tolist() == sorted(want)
        checked += 1
    assert checked > 150
    with pytest.raises(ValueError, match="repeated indices"):
        merge_entries(torch.tensor([3, 1, 3], dtype=torch.int32), torch.ones(3),
                      torch.tensor([2], dtype=torch.int32), torch.ones(1), 2)


@needs_native
def test_native_merge_checks_what_it_is_given():
    with pytest.raises(ValueError, match="a_idx must be a contiguous 1-D torch.int32 CPU tensor"):
        native.merge(torch.arange(3), torch.ones(3), torch.arange(2, dtype=torch.int32), torch.ones(2), 2)
