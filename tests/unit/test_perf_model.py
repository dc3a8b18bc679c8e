"""Iteration-time model: the WFBP timeline (the authors' `Simulator.wfbp`, hclhkbu/gtopkssgd
scripts/icdcs2019/communication.py), the S-SGD step model against the cost model, schemes built from
conf/compressor, scaling efficiency, the shipped profiles and a smoke run of paper_figs/fig_scaling.py."""
import csv
import json
import random

import pytest

from tests.conftest import paper_script

from ssgd.compress.sparse import k_of
from ssgd.perf import cost, profiles
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.perf.iteration import (SELECTION_COSTS, Profile, SchemeCost, iteration_seconds, iteration_time, rescale_batch,
                                 scaling_efficiency, threads_step_time)
from ssgd.perf.paper import PAPER_MODELS
from ssgd.perf.wfbp import no_overlap_seconds, wfbp_seconds, wfbp_starts
from ssgd.tools import scheme_costs as schemes
from ssgd.tools.make_profiles import main as make_profiles_main

GBE = AlphaBeta(alpha=4.36e-4, beta=9e-9)             # conf/cluster/32x1gbe.yaml
TEN_GBE = AlphaBeta(alpha=4.525e-5, beta=1.0667e-9)   # conf/cluster/32x10gbe.yaml
POWERS = [2**i for i in range(11)]                    # 1 ... 1024


def S(name: str, prof: Profile, **kw) -> SchemeCost:
    """The model's scheme of conf/compressor/<name>.yaml for `prof` ("dense_wfbp": dense, layer-wise WFBP)."""
    if name == "dense_wfbp":
        return schemes.scheme("dense", prof.d, layerwise_overlap=True)
    return schemes.scheme(name, prof.d, **kw)


ALL = (*schemes.names(), "dense_wfbp")                # every compressor config + the overlapped dense


def toy(compute: float = 1.0, select: float = 0.0, params=(1000, 200_000, 30_000)) -> Profile:
    n = len(params)
    return Profile(name="toy", batch_size=16, layers=tuple(f"l{i}" for i in range(n)), params=tuple(params),
                   forward_s=(compute / (3 * n),) * n, backward_s=(2 * compute / (3 * n),) * n,
                   select_s=select, threshold_select_s=select / 4)


# --- WFBP timeline ----------------------------------------------------------------------------------
@pytest.mark.parametrize("compute,comm,starts,total", [
    # communication fully hidden: each allreduce ends before the next gradient is ready
    ([1, 1, 1], [0.5, 0.5, 0.5], [1, 2, 3], 3.5),
    # not hidden: the first allreduce (3 s) delays the others past the end of backward
    ([1, 1, 1], [3, 0.5, 0.5], [1, 4, 4.5], 5.0),
    # mixed: layer 2 waits for the link, layer 3 waits again
    ([1, 2, 1], [2.5, 1, 0.5], [1, 3.5, 4.5], 5.0),
    ([2], [1], [2], 3.0),
    ([], [], [], 0.0),
])
def test_wfbp_hand_computed(compute, comm, starts, total):
    assert wfbp_starts(compute, comm) == pytest.approx(starts)
    assert wfbp_seconds(compute, comm) == pytest.approx(total)


def test_wfbp_limits_and_bounds():
    assert wfbp_seconds([1, 2, 3], [0, 0, 0]) == pytest.approx(6)        # nothing to send: t_b
    assert wfbp_seconds([0, 0, 0], [1, 2, 3]) == pytest.approx(6)        # no compute: sum of allreduces
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 8)
        c = [rng.uniform(0, 1) for _ in range(n)]
        m = [rng.uniform(0, 1) for _ in range(n)]
        t = wfbp_seconds(c, m)
        assert max(sum(c), c[0] + sum(m)) - 1e-12 <= t <= sum(c) + sum(m) + 1e-12


def test_wfbp_rejects_bad_input():
    with pytest.raises(ValueError):
        wfbp_seconds([1, 2], [1])
    with pytest.raises(ValueError):
        wfbp_seconds([1, -1], [1, 1])
    with pytest.raises(ValueError):
        wfbp_seconds([1, float("nan")], [1, 1])


def test_no_overlap_is_backward_plus_one_collective():
    assert no_overlap_seconds([1, 2, 3], [10, 20, 30], lambda n: 0.01 * n) == pytest.approx(6.6)
    assert no_overlap_seconds([0.1, 0.2], [5, 7], lambda n: cost.allreduce_seconds(GBE, 4, n)) == \
        pytest.approx(0.3 + cost.dense_seconds(GBE, 4, 12))
    with pytest.raises(ValueError):
        no_overlap_seconds([1], [1, 2], lambda n: 0.0)


# --- iteration model --------------------------------------------------------------------------------
@pytest.mark.parametrize("P", [1, 2, 3, 4, 8, 32, 128])
@pytest.mark.parametrize("net", [GBE, TEN_GBE])
def test_zero_compute_reduces_to_the_cost_model(P, net):
    prof = toy(compute=0.0, select=0.0)
    d, k = prof.d, k_of(prof.d, 0.001)
    assert iteration_seconds(prof, S("dense", prof), net, P) == pytest.approx(cost.dense_seconds(net, P, d))
    assert iteration_seconds(prof, S("dense_wfbp", prof), net, P) == pytest.approx(
        sum(cost.allreduce_seconds(net, P, n) for n in prof.params))
    for scheme in ("topk", "randomk", "dgcsampling"):
        assert iteration_seconds(prof, S(scheme, prof), net, P) == pytest.approx(
            cost.sparse_allgather_seconds(net, [k] * P))
    assert iteration_seconds(prof, S("gtopk", prof), net, P) == pytest.approx(cost.gtopk_seconds(net, P, k))
    assert iteration_seconds(prof, S("gaussiank", prof, count_factor=1.5), net, P) == pytest.approx(
        cost.sparse_allgather_seconds(net, [round(1.5 * k)] * P))


def test_parts_add_up_and_wfbp_hides_communication():
    prof = toy(compute=1.0, select=0.05)
    for scheme in ALL:
        t = iteration_time(prof, S(scheme, prof), GBE, 8)
        assert t.total_s == pytest.approx(t.compute_s + t.compress_s + t.comm_s)
        assert t.compute_s == pytest.approx(1.0)
    t = iteration_time(prof, S("dense_wfbp", prof), GBE, 8)
    per_layer = [cost.allreduce_seconds(GBE, 8, n) for n in prof.params]
    assert t.total_s == pytest.approx(prof.t_f + wfbp_seconds(prof.backward_s, per_layer))
    assert t.comm_s < sum(per_layer)                                       # something was hidden
    assert iteration_time(prof, S("gtopk", prof), GBE, 8).compress_s == 0.05
    assert iteration_time(prof, S("gaussiank", prof), GBE, 8).compress_s == 0.0125
    assert iteration_time(prof, S("dgcsampling", prof), GBE, 8).compress_s == 0.0125
    assert iteration_time(prof, S("dense", prof), GBE, 8).compress_s == 0


def test_bad_arguments_are_rejected():
    prof = toy()
    with pytest.raises(ValueError, match="allowed: dense"):
        S("powersgd", prof)
    with pytest.raises(ValueError, match="P="):
        iteration_seconds(prof, S("dense", prof), GBE, 0)
    with pytest.raises(ValueError, match="density"):
        S("topk", prof, density=0.0)
    with pytest.raises(ValueError, match="count_factor"):
        S("gaussiank", prof, count_factor=0.0)
    with pytest.raises(ValueError, match="model_seconds"):
        SchemeCost(collective=object())
    with pytest.raises(ValueError, match="selection"):
        SchemeCost(collective=S("dense", prof).collective, selection="approximate")
    with pytest.raises(ValueError, match="dense payload"):
        S("topk", prof, layerwise_overlap=True)
    with pytest.raises(ValueError, match="count"):
        SchemeCost(collective=S("dense", prof).collective, count=0)


def test_efficiency_is_one_at_one_worker():
    prof = toy(compute=0.2, select=0.01)
    for net in (GBE, TEN_GBE):
        assert scaling_efficiency(prof, S("dense", prof), net, 1) == pytest.approx(1.0)
        assert scaling_efficiency(prof, S("dense_wfbp", prof), net, 1) == pytest.approx(1.0)
        # sparse schemes still select at P = 1; the baseline v_1 is plain single-worker SGD
        assert scaling_efficiency(prof, S("gtopk", prof), net, 1) == pytest.approx(0.2 / 0.21)


@pytest.mark.parametrize("name", ["resnet20", "vgg16", "alexnet", "resnet50", "lstm_ptb"])
def test_dense_efficiency_decreases_with_P_on_1gbe(name):
    prof = profiles.load(name)
    for scheme in ("dense", "dense_wfbp"):
        eff = [scaling_efficiency(prof, S(scheme, prof), GBE, P) for P in POWERS]
        assert eff[0] == pytest.approx(1.0)
        assert all(a > b for a, b in zip(eff, eff[1:])), (scheme, eff)
    # gTop-k beats dense at 32 workers on 1 GbE for every shipped model (the paper's claim)
    assert scaling_efficiency(prof, S("gtopk", prof), GBE, 32) > scaling_efficiency(prof, S("dense", prof), GBE, 32)


def test_rescale_batch_scales_compute_only():
    prof = toy(compute=1.0, select=0.3)
    big = rescale_batch(prof, 64)
    assert big.batch_size == 64 and big.single_worker_seconds() == pytest.approx(4.0)
    assert big.select_s == prof.select_s and big.params == prof.params


# --- schemes from conf/compressor -----------------------------------------------------------------------
def test_every_compressor_declares_a_selection_cost_the_model_knows():
    from hydra.utils import get_class

    expected = {"dense": "none", "topk": "exact_topk", "gtopk": "exact_topk", "randomk": "linear",
                "gaussiank": "linear", "dgcsampling": "linear"}
    for name in schemes.names():
        cls = get_class(schemes.load_config(name).compress._target_)
        assert cls.selection_cost in SELECTION_COSTS, (name, cls)
        if name in expected:
            assert cls.selection_cost == expected[name], name


def test_the_model_calls_the_collective_it_is_given():
    """Any object with model_seconds is a collective to the model; it sees the scheme's count per rank."""
    calls = []

    class Fixed:
        def model_seconds(self, net, P, d, counts):
            calls.append((P, d, list(counts)))
            return 0.125

    prof = toy(compute=1.0, select=0.08)
    t = iteration_time(prof, SchemeCost(Fixed(), selection="linear", count=7, name="fixed"), GBE, 3)
    assert t.comm_s == 0.125 and t.compress_s == prof.threshold_select_s == 0.02
    assert calls == [(3, prof.d, [7, 7, 7])]
    calls.clear()
    t = iteration_time(prof, SchemeCost(Fixed(), layerwise_overlap=True), GBE, 2)      # one call per layer
    assert calls == [(2, n, [n, n]) for n in prof.params] and t.compress_s == 0


@pytest.mark.parametrize("name", schemes.names())
def test_scheme_of_each_config_uses_its_collective_and_k(name):
    prof = toy()
    cfg = schemes.load_config(name)
    scheme = S(name, prof)
    assert type(scheme.collective).__name__ == cfg.collective._target_.rsplit(".", 1)[-1]
    k = k_of(prof.d, float(cfg.density))
    assert scheme.count == (None if k == prof.d else k)
    counts = [prof.d if scheme.count is None else scheme.count] * 8
    assert iteration_time(prof, scheme, GBE, 8).comm_s == scheme.collective.model_seconds(GBE, 8, prof.d, counts)


# --- the threads backend on one machine ---------------------------------------------------------------
def test_threads_step_time_hand_computed():
    """P = 5 workers on K = 2 pool threads: the busiest thread runs ceil(5/2) = 3 workers; the
    collective and the update run once (alpha 1 ms, beta 1 us/B; d = 231,000, k = 231)."""
    from dataclasses import replace

    prof = replace(toy(compute=1.0, select=0.06), io_s=0.01, update_s=0.02)
    net = AlphaBeta(alpha=1e-3, beta=1e-6)
    t = threads_step_time(prof, S("gtopk", prof), 5, 2, net)
    assert t.forward_s + t.backward_s + t.io_s == pytest.approx(3 * 1.01)
    assert t.compress_s == pytest.approx(3 * 0.06)
    assert t.comm_s == pytest.approx(2 * 3 * (1e-3 + 8 * 231 * 1e-6))       # 3 tree rounds up, 3 down
    assert t.update_s == 0.02
    assert t.total_s == pytest.approx(3.03 + 0.18 + 0.017088 + 0.02)
    dense = threads_step_time(prof, S("dense", prof), 5, 2, net)                        # ring: 8 steps of 46,200 floats
    assert dense.comm_s == pytest.approx(8 * (1e-3 + 4 * 46_200 * 1e-6)) and dense.compress_s == 0
    assert dense.total_s == pytest.approx(3.03 + 1.4864 + 0.02)
    gauss = threads_step_time(prof, S("gaussiank", prof, count_factor=1.5), 5, 2, net)   # 346 pairs per rank
    assert gauss.compress_s == pytest.approx(3 * 0.015)
    assert gauss.comm_s == pytest.approx(4 * (1e-3 + 8 * 346 * 1e-6))


def test_threads_step_time_limits_and_errors():
    prof = toy(compute=0.3, select=0.01)
    for scheme in schemes.names():
        # as many threads as workers: one worker per thread, the per-worker model
        assert threads_step_time(prof, S(scheme, prof), 4, 8, GBE) == iteration_time(prof, S(scheme, prof), GBE, 4)
        one = threads_step_time(prof, S(scheme, prof), 4, 1, GBE)               # one thread runs all 4
        assert one.forward_s == pytest.approx(4 * prof.t_f) and one.compress_s == pytest.approx(
            4 * iteration_time(prof, S(scheme, prof), GBE, 4).compress_s)
    with pytest.raises(ValueError, match="overlap"):
        threads_step_time(prof, S("dense_wfbp", prof), 4, 2, GBE)
    with pytest.raises(ValueError, match="K="):
        threads_step_time(prof, S("dense", prof), 4, 0, GBE)
    with pytest.raises(ValueError, match="P="):
        threads_step_time(prof, S("dense", prof), 0, 2, GBE)


# --- profiles ---------------------------------------------------------------------------------------
def test_profile_json_round_trip(tmp_path):
    prof = toy(compute=0.5, select=0.02)
    path = tmp_path / "toy.json"
    prof.save(path)
    assert Profile.load(path) == prof
    data = json.loads(path.read_text())
    assert data["format"] == 1 and data["layers"] == ["l0", "l1", "l2"]
    with pytest.raises(ValueError, match="unknown keys"):
        Profile.from_dict({**data, "gpu": "P102-100"})
    with pytest.raises(ValueError, match="entries"):
        Profile.from_dict({**data, "params": [1, 2]})
    with pytest.raises(ValueError, match="format"):
        Profile.from_dict({**data, "format": 99})


PARAMS = {"resnet20": 269_722, "vgg16": 14_728_266, "alexnet": 61_100_840, "resnet50": 25_557_032,
          "lstm_ptb": 66_034_000}


def test_shipped_profiles_follow_their_derivation():
    assert set(profiles.names()) == set(PARAMS)
    for pm in PAPER_MODELS:
        prof = profiles.load(pm.name)
        assert prof.d == PARAMS[pm.name] and prof.batch_size == pm.batch_size
        assert prof.single_worker_seconds() == pytest.approx(pm.batch_size / pm.v1)     # T = bs / v_1
        assert prof.t_f == pytest.approx(prof.t_b / 2)
        if pm.breakdown_s is not None:
            assert prof.select_s == pm.breakdown_s[1]
        assert "hclhkbu/gtopkssgd scripts/icdcs2019/communication.py" in prof.derivation     # cites its source
    with pytest.raises(ValueError, match="available"):
        profiles.load("googlenet")


def test_make_profiles_reproduces_the_shipped_file(tmp_path):
    assert make_profiles_main(["--out", str(tmp_path), "--only", "resnet20"]) == 0
    fresh = Profile.load(tmp_path / "resnet20.json")
    shipped = profiles.load("resnet20")
    assert fresh.layers == shipped.layers and fresh.params == shipped.params
    assert fresh.backward_s == pytest.approx(shipped.backward_s) and fresh.derivation == shipped.derivation


@pytest.mark.parametrize("name", ["alexnet", "resnet50"])
def test_layer_tables_agree_with_the_package_models(name):
    """The profile builder's torchvision models against ssgd.models' (GenDropout swapped in)."""
    import torch

    import ssgd.models
    from ssgd.data.base import DataSpec
    from ssgd.tools.make_profiles import build_model, layer_table

    factory = getattr(ssgd.models, name)
    side, classes = 224, 1000
    ours, x = build_model(name)
    theirs = factory(DataSpec("image", (3, side, side), classes)).eval()
    assert [row[1:] for row in layer_table(theirs, torch.zeros(1, 3, side, side))] == \
        [row[1:] for row in layer_table(ours, x)]


# --- the figure script ------------------------------------------------------------------------------
def load_fig_scaling():
    return paper_script("fig_scaling")


def test_paper_closed_forms_match_the_derived_table():
    fig = paper_script("scaling_comm")
    curves = fig.comm_curves(GBE)
    i = fig.P_COMM.index(32)      # the paper's closed forms at m = 25 * 2^20, rho = 0.001, P = 32, milliseconds
    assert curves["paper: gTop-k 2a logP + 4k logP b (old)"][i] * 1e3 == pytest.approx(23.2, abs=0.06)
    assert curves["paper: gTop-k a logP + 2k logP b (new)"][i] * 1e3 == pytest.approx(11.6, abs=0.06)
    assert curves["paper: Top-k a logP + 2(P-1)k b"][i] * 1e3 == pytest.approx(60.7, abs=0.06)


@pytest.mark.slow
@pytest.mark.parametrize("sub", ["out", "nested/figs"])
def test_fig_scaling_runs_and_writes_its_files(tmp_path, sub, capsys):
    fig = load_fig_scaling()
    out = tmp_path / sub
    assert fig.main(["--out", str(out)]) == 0
    for stem in ("fig_scaling_efficiency", "fig_comm_vs_P", "fig_breakdown_32"):
        for ext in ("png", "pdf", "csv"):
            assert (out / f"{stem}.{ext}").stat().st_size > 0, (stem, ext)
    with (out / "ratios_p32.csv").open() as f:
        rows = {(r["profile"], r["network"]): r for r in csv.DictReader(f)}
    # gTop-k/dense and gTop-k/Top-k efficiency ratios at P = 32 of the authors' `realdata_speedup` lists
    for name, dense, topk in (("vgg16", 9.78, 1.96), ("resnet20", 2.74, 1.13), ("alexnet", 12.79, 1.71),
                              ("resnet50", 3.65, 1.28), ("lstm_ptb", 5.14, 2.00)):
        row = rows[(name, "1GbE")]
        assert float(row["paper_gtopk_over_dense"]) == pytest.approx(dense, abs=0.01)
        assert float(row["paper_gtopk_over_topk"]) == pytest.approx(topk, abs=0.01)
        assert float(row["model_gtopk_over_dense"]) > 1
    assert "gTop/dense" in capsys.readouterr().out


@pytest.mark.slow
def test_measured_profile_of_a_configured_model(tmp_path):
    """`python -m ssgd.tools.measure`: layers = modules owning parameters (backward order) + 'other',
    sizes add up to d, and the JSON reads back as a Profile."""
    from ssgd.tools.measure import main

    out = tmp_path / "fnn3.json"
    assert main(["model=fnn3", "dataset=synthetic_mnist", "trainer.batch_size=8", "reps=2", f"out={out}"]) == 0
    profile = Profile.load(out)
    assert profile.layers[-1] == "other"
    assert profile.d == 199_210 and profile.params[-1] == 0 and profile.batch_size == 8
    assert len(profile.layers) == 4                                   # three Linear layers + other
    assert profile.t_f > 0 and profile.t_b > 0 and profile.select_s > 0 and profile.update_s > 0
    assert main(["model=lstm", "dataset=mnist_embedded", f"out={out}"]) == 2          # mismatch: one-line error
