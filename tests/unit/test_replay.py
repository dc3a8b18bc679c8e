"""Replay mode (ssgd.models.Replay): the paper model's layer sizes, its compute replayed by sleeping in the
right order, rank-dependent gradients; and the arithmetic of bench/testbed_replay.py and fig_scaling's
measured points. The measurements themselves need the testbed and are benchmarks, not tests."""
from __future__ import annotations

import csv
import time

import pytest
import torch

from bench_modules import load
from ssgd.data.base import DataSpec
from ssgd.errors import ConfigError
from ssgd.models import Replay, count_parameters
from ssgd.models import replay as replay_mod
from ssgd.perf import profiles
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.perf.iteration import iteration_time
from ssgd.tools import scheme_costs as schemes
from tests.conftest import paper_script

IMAGE = DataSpec("image", (3, 32, 32), 10, "synthetic_cifar10")


@pytest.mark.parametrize("name", profiles.names())
def test_parameters_are_the_profiles_layers(name):
    prof = profiles.load(name)
    with torch.device("meta"):
        m = Replay(IMAGE, profile=name)
    assert count_parameters(m) == prof.d == sum(prof.params)
    # parameter i is forward layer i: the profile's backward order reversed
    assert [w.numel() for w in m.weights] == list(prof.params)[::-1]
    assert m.layer_names == list(prof.layers)[::-1]


def test_backward_visits_layers_in_backward_order_with_their_sleeps(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(replay_mod.time, "sleep", slept.append)
    m = Replay(IMAGE, profile="resnet20", time_scale=2.0)
    prof = profiles.load("resnet20")
    x = torch.randn(4, 3, 32, 32)
    out = m(x)
    assert out.shape == (4, 10) and torch.count_nonzero(out) == 0
    forward = [s for s in slept]
    assert forward == pytest.approx([2.0 * t for t in prof.forward_s[::-1] if t > 0])
    slept.clear()
    out.sum().backward()
    assert slept == pytest.approx([2.0 * t for t in prof.backward_s if t > 0])   # output layer first


def test_gradient_is_the_rolled_base_and_differs_between_batches():
    m = Replay(IMAGE, profile="resnet20", time_scale=0.0)
    x1, x2 = torch.rand(2, 3, 32, 32), torch.rand(2, 3, 32, 32)
    g1 = torch.autograd.grad(m(x1).sum(), list(m.weights))
    g1_again = torch.autograd.grad(m(x1).sum(), list(m.weights))
    g2 = torch.autograd.grad(m(x2).sum(), list(m.weights))
    shift = replay_mod.batch_shift(x1)
    for g, again, base in zip(g1, g1_again, m.bases()):
        assert torch.equal(g, torch.roll(base, shift % base.numel())) and torch.equal(g, again)
    assert any(not torch.equal(a, b) for a, b in zip(g1, g2))     # another rank's batch: other indices
    assert m.bases()[0].std().item() == pytest.approx(replay_mod.GRAD_STD, rel=0.3)


def test_sleeps_take_the_profiles_time():
    m = Replay(IMAGE, profile="resnet20")
    prof = profiles.load("resnet20")
    t0 = time.perf_counter()
    m(torch.rand(2, 3, 32, 32)).sum().backward()
    took = time.perf_counter() - t0
    assert took >= prof.t_f + prof.t_b


@pytest.mark.parametrize("kwargs, match", [({"profile": "resnet18"}, "model.profile=resnet18: .*available"),
                                           ({"time_scale": -1.0}, "model.time_scale=-1.0")])
def test_bad_input_names_the_key(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        Replay(IMAGE, **kwargs)


def test_token_data_is_refused():
    with pytest.raises(ConfigError, match="needs image data"):
        Replay(DataSpec("tokens", (35,), 10000, "ptb"), profile="lstm_ptb")


bench = load("testbed_replay")


def test_step_medians_leave_out_the_warmup():
    recs = [{"step": s, **{f"time/{p}_s": float(s) for p in bench.TIMES}} for s in range(1, 7)]
    recs.insert(3, {"step": 3, "val/acc": 0.1})                  # evaluation records carry no times
    med = bench.step_medians(recs, warmup=2)
    assert med["n"] == 4 and med["comm"] == pytest.approx(4.5)   # steps 3, 4, 5, 6
    with pytest.raises(ValueError, match="after the 6 warm-up"):
        bench.step_medians(recs, warmup=6)
    assert "comm_min" not in med                                   # runs from before the split: left out


def test_step_medians_split_the_collective_where_every_step_logged_it():
    recs = [{"step": s, **{f"time/{p}_s": float(s) for p in bench.TIMES},
             "time/comm_min_s": 0.1 * s, "time/comm_max_s": 2.0 * s} for s in range(1, 6)]
    med = bench.step_medians(recs, warmup=1)
    assert med["comm_min"] == pytest.approx(0.35) and med["comm_max"] == pytest.approx(7.0)
    del recs[-1]["time/comm_min_s"]                              # one step without it: not a median of a subset
    assert "comm_min" not in bench.step_medians(recs, warmup=1)


def test_efficiencies_swap_the_models_comm_for_the_measured_one():
    prof, net = profiles.load("resnet50"), AlphaBeta(1e-4, 8.4e-9)
    for scheme in bench.SCHEMES:
        model = iteration_time(prof, schemes.scheme(scheme, prof.d), net, 4)
        same = bench.efficiencies(prof, scheme, 4, {"comm": model.comm_s, "step": 1.0}, net)
        assert same["eff_testbed"] == pytest.approx(same["eff_model"])          # measured = model: same number
        slower = bench.efficiencies(prof, scheme, 4, {"comm": model.comm_s + 0.1, "step": 1.0}, net)
        single = prof.single_worker_seconds()
        assert slower["eff_testbed"] == pytest.approx(single / (model.total_s + 0.1))
        assert slower["eff_raw"] == pytest.approx(single / 1.0)
        # a run that logged its ranks' split: the slowest rank's time counts (t_iter = the slowest rank's step, as
        # the SimGrid replay's), not the least any rank spent nor the coordinator's
        split = bench.efficiencies(prof, scheme, 4, {"comm": model.comm_s, "comm_min": model.comm_s - 1e-3,
                                                     "comm_max": model.comm_s + 0.1, "step": 1.0}, net)
        assert split["eff_testbed"] == pytest.approx(slower["eff_testbed"])


def test_paper_points_only_at_the_papers_P():
    assert bench.paper_point("resnet20", "gtopk", 2) is None
    assert bench.paper_point("resnet20", "oktopk", 4) is None and bench.paper_point("vgg16", "topkdsa", 8) is None
    assert bench.paper_point("resnet20", "gtopk", 4) == pytest.approx(0.995, abs=5e-4)


scaling_efficiency = paper_script("scaling_efficiency")


def test_measured_points_are_read_from_the_bench_csv(tmp_path):
    path = tmp_path / "r.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, ["profile", "scheme", "P", "status", "eff_testbed"])
        w.writeheader()
        w.writerows([{"profile": "resnet20", "scheme": "gtopk", "P": 4, "status": "ok", "eff_testbed": 0.7},
                     {"profile": "resnet20", "scheme": "gtopk", "P": 2, "status": "ok", "eff_testbed": 0.8},
                     {"profile": "resnet20", "scheme": "dense", "P": 4, "status": "timed out", "eff_testbed": ""}])
    assert scaling_efficiency.load_measured(path) == {("resnet20", "gtopk"): [(2, 0.8), (4, 0.7)]}
    assert scaling_efficiency.load_measured(tmp_path / "absent.csv") == {}
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="bad.csv: needs the columns"):
        scaling_efficiency.load_measured(bad)


def test_the_trainer_runs_a_replay_model_and_sends_the_profiles_k(tmp_path):
    from tests.conftest import train

    summary, _ = train(tmp_path, "model=replay", "model.profile=resnet20", "model.time_scale=0",
                       "dataset=synthetic_cifar10", "compressor=gtopk", "compressor.density_warmup=[]",
                       "trainer.max_steps=3", "trainer.log_every=1")
    d = profiles.load("resnet20").d
    assert summary["params"] == d
    assert summary["density/achieved"] == pytest.approx(max(int(d * 0.001), 1) / d)
