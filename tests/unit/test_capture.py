"""Capture of u = g + e (ssgd.loop.capture): statistics against independent oracles, files, and the
invariant that capturing never changes training."""
import json
import math

import numpy as np
import pytest
import torch
from scipy import stats as sps

from ssgd.loop.capture import ijcai_parts, randk_error, topk_error, u_statistics
from ssgd.compress.randomk import sample_distinct
from ssgd.errors import ConfigError
from ssgd.payload import Sparse
from tests.conftest import make_cfg, train


def test_statistics_of_a_hand_made_vector():
    u = torch.tensor([3.0, -4.0, 1.0, 0.0, 2.0])
    payload = Sparse(torch.tensor([0, 1]), torch.tensor([3.0, -4.0]), 5)      # its top-2
    sent = Sparse(torch.tensor([1]), torch.tensor([-4.0]), 5)                  # gTop-k kept only one
    s = u_statistics(u, payload, sent, density=0.4, generator=torch.Generator().manual_seed(0))
    assert s["k"] == 2 and s["u/norm2"] == 30.0
    assert s["err/topk"] == s["err/active"] == 5.0        # 1 + 0 + 4
    assert s["err/active_sent"] == 14.0                   # 9 more: index 0 stays in the residual
    assert s["ratio/topk"] == pytest.approx(5 / 30)
    assert (s["bound/linear"], s["bound/square"]) == pytest.approx((0.6, 0.36))
    assert s["density/achieved"] == 0.4
    x = u.double().numpy()
    assert s["u/mean"] == pytest.approx(x.mean()) and s["u/std"] == pytest.approx(x.std())
    assert s["u/kurtosis"] == pytest.approx(sps.kurtosis(x, fisher=False))
    kept = sample_distinct(5, 2, torch.Generator().manual_seed(0))
    assert s["err/randk"] == pytest.approx(30.0 - float((u[kept] ** 2).sum()))


@pytest.mark.parametrize("seed", range(5))
def test_topk_error_equals_a_sort_oracle(seed):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(1000, generator=g)
    u[::7] = 0.5                                         # ties
    for k in (1, 10, 999, 1000, 2000):
        order = np.sort(np.abs(u.double().numpy()))
        expected = float((order[: max(1000 - k, 0)] ** 2).sum())
        assert topk_error(u, k) == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_randk_error_is_unbiased_for_the_random_k_bound():
    """E ||u - RandK(u)||^2 = (1 - k/d) ||u||^2 (Random-k without rescaling, as compared in Shi et al.,
    arXiv:1911.08772): the draws are uniform k-subsets."""
    u = torch.randn(500, generator=torch.Generator().manual_seed(1)) ** 3      # uneven magnitudes
    g = torch.Generator().manual_seed(2)
    ratios = np.array([randk_error(u, 50, g) for _ in range(3000)]) / float((u.double() ** 2).sum())
    assert abs(ratios.mean() - 0.9) < 5 * ratios.std() / math.sqrt(ratios.size)


def test_the_papers_tighter_bound_holds_on_gaussian_u_but_not_on_flat_u():
    d, k = 10_000, 100
    u = torch.randn(d, generator=torch.Generator().manual_seed(3))
    assert topk_error(u, k) / float((u.double() ** 2).sum()) <= (1 - k / d) ** 2
    flat = torch.ones(d)
    assert topk_error(flat, k) / d == pytest.approx(1 - k / d) and 1 - k / d > (1 - k / d) ** 2


def test_ijcai_parts():
    x = torch.tensor([1.0, -2.0, 0.5, 0.0])
    parts = ijcai_parts(x, x.clone(), 0.5, torch.Generator().manual_seed(0))
    assert parts["ijcai/err_scheme"] == 0.0 and parts["ijcai/x_norm2"] == 5.25
    zero = ijcai_parts(x, torch.zeros(4), 0.5, torch.Generator().manual_seed(0))
    assert zero["ijcai/err_scheme"] == 5.25


CAPTURE = ["capture.stats=true", "capture.u_steps=[1,4]"]
SMALL = ["cluster.world_size=3", "trainer.max_steps=6", "trainer.batch_size=16", "model.dropout=0.3"]


@pytest.mark.parametrize("compressor", ["gtopk", "randomk", "gaussiank"])
def test_capture_never_changes_training(compressor, tmp_path):
    _, plain = train(tmp_path / "plain", f"compressor={compressor}", *SMALL)
    _, captured = train(tmp_path / "cap", f"compressor={compressor}", *SMALL, *CAPTURE)
    assert all(torch.equal(a, b) for a, b in zip(plain, captured))
    records = [json.loads(line) for line in (tmp_path / "cap" / "capture" / "stats.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert sorted(p.name for p in (tmp_path / "cap" / "capture").glob("u_step*.pt")) == \
        ["u_step000001.pt", "u_step000004.pt"]


def test_topk_run_records_match_its_snapshot(tmp_path):
    train(tmp_path, "compressor=topk", *SMALL, *CAPTURE, "capture.every=2")
    records = {r["step"]: r for r in map(json.loads, (tmp_path / "capture" / "stats.jsonl").read_text().splitlines())}
    assert sorted(records) == [2, 4, 6]
    snap = torch.load(tmp_path / "capture" / "u_step000004.pt", weights_only=False)
    u, r = snap["u"], records[4]
    assert r["err/active"] == pytest.approx(r["err/topk"], rel=1e-9)         # the scheme IS Top-k
    assert r["u/norm2"] == pytest.approx(float((u.double() ** 2).sum()), rel=1e-12)
    top = set(torch.topk(u.abs(), snap["k"]).indices.tolist())
    assert set(snap["selected"].tolist()) == top and snap["k"] == r["k"]
    assert r["ijcai/err_scheme"] <= r["ijcai/x_norm2"]


def test_dense_run_has_no_compression_error(tmp_path):
    train(tmp_path, "compressor=dense", *SMALL, "capture.stats=true")
    for r in map(json.loads, (tmp_path / "capture" / "stats.jsonl").read_text().splitlines()):
        assert r["err/active"] == 0.0 and r["density/achieved"] == 1.0 and r["ijcai/err_scheme"] == 0.0


def test_gtopk_sends_less_than_it_selects(tmp_path):
    train(tmp_path, "compressor=gtopk", *SMALL, "capture.stats=true")
    records = [json.loads(line) for line in (tmp_path / "capture" / "stats.jsonl").read_text().splitlines()]
    assert all(r["err/active_sent"] >= r["err/active"] for r in records)
    assert any(r["err/active_sent"] > r["err/active"] for r in records)      # some local picks lost
