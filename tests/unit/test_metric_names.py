"""One name, one quantity; two clocks, never mixed.

docs/metrics.md is the registry's page (stale: fails); every key a real short run writes to metrics.jsonl,
summary.json and the wandb summary is in the registry; the target clock of a run does not move when this
host's compute is slowed, and equals the iteration model of `ssgd.perf.iteration` on the target's profile;
a model without a profile has no target time and says so; totals are integer sums.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import ROOT, make_cfg, train
from ssgd.compress.sparse import k_of
from ssgd.perf import profiles
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.perf.iteration import SchemeCost, iteration_time, rescale_batch
from ssgd.perf.target import matching_profile, target_compute
from ssgd.run import build
from ssgd.run.final_lines import final_lines
from ssgd.utils import metric_names, wandb_run
from ssgd.utils.result_files import run_figure

REPLAY = ["model=replay", "model.profile=resnet20", "dataset=synthetic_cifar10", "cluster=32x1gbe",
          "cluster.world_size=4", "trainer.max_steps=3", "trainer.batch_size=16", "threads=2"]


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_the_page_is_generated_from_the_registry():
    page = (ROOT / "docs" / "metrics.md").read_text()
    assert page == metric_names.markdown(), "docs/metrics.md is stale: python -m ssgd.utils.metric_names docs/metrics.md"


def test_every_key_of_a_real_run_is_registered_and_totals_are_integer_sums(tmp_path):
    summary, _ = train(tmp_path, "cluster=32x1gbe", "cluster.world_size=3", "trainer.max_steps=4")
    rows = records(tmp_path)
    written = {k for r in rows for k in r} | set(summary) | set(wandb_run.final_summary(summary))
    assert metric_names.unknown(written) == []
    assert not set(written) & set(metric_names.RENAMED)
    train_rows = [r for r in rows if "train/loss" in r]              # log_every=1: one record per step
    assert isinstance(summary["comm/bytes_total"], int)
    assert summary["comm/bytes_total"] == sum(int(r["comm/bytes_all_ranks"]) for r in train_rows)
    assert summary["density/configured"] == 0.001                        # gtopk's setting, not the warm-up mean
    assert [r["density/scheduled"] for r in train_rows] == [0.004] * 4    # epoch 0 is warm-up


def test_a_model_without_a_profile_has_no_target_time_and_says_so(tmp_path):
    summary, _ = train(tmp_path, "cluster=32x1gbe", "cluster.world_size=3", "trainer.max_steps=2")
    assert matching_profile(summary["params"]) is None                    # FNN-3: 199,210 parameters
    assert not {"target/iter_s", "throughput/target", "target/compute_s", "target/profile"} & set(summary)
    assert summary["target/comm_s"] > 0                                   # the network part is still modelled
    assert "no modelled time per iteration on 32x1gbe" in final_lines(summary)


def target_oracle(cfg, density: float, P: int, batch: int) -> float:
    """The iteration model of ssgd.perf.iteration (no overlap) on the shipped resnet20 profile, gTop-k counts."""
    profile = rescale_batch(profiles.load("resnet20"), batch)
    net = AlphaBeta(alpha=cfg.cluster.network.alpha, beta=cfg.cluster.network.beta)
    scheme = SchemeCost(build.scheme(cfg, 1).collective, "exact_topk", k_of(profile.d, density))
    return iteration_time(profile, scheme, net, P).total_s


def test_the_target_clock_does_not_move_with_this_hosts_compute(tmp_path):
    """The same config twice, the second with its compute slowed here (the replayed sleeps on): this host's
    times differ, the target's are equal to the last digit and equal the iteration model."""
    fast, _ = train(tmp_path / "fast", *REPLAY, "model.time_scale=0")
    slow, _ = train(tmp_path / "slow", *REPLAY, "model.time_scale=1")
    assert slow["time/compute_s"] > fast["time/compute_s"] + 0.01        # ~35 ms of replayed compute per rank
    target = [k for k in metric_names.METRICS if k.startswith("target/") or k == "throughput/target"]
    assert [k for k in target if k in fast] == [k for k in target if k in slow]
    assert "target/iter_s" in fast and fast["target/profile"] == "resnet20"
    assert all(fast[k] == slow[k] for k in target if k in fast)
    a, b = records(tmp_path / "fast"), records(tmp_path / "slow")
    cfg = make_cfg(*REPLAY)
    for ra, rb in zip(a, b):
        if "target/iter_s" in ra:
            assert ra["target/iter_s"] == rb["target/iter_s"]
            assert math.isclose(ra["target/iter_s"], target_oracle(cfg, ra["density/scheduled"], 4, 16), rel_tol=1e-12)


def test_target_compute_takes_the_selection_cost_from_the_profile():
    p = profiles.load("vgg16")
    top, linear, free = (target_compute(p.d, p.batch_size, kind) for kind in ("exact_topk", "linear", "none"))
    assert (top.compress_s, linear.compress_s, free.compress_s) == (p.select_s, p.threshold_select_s, 0.0)
    assert top.compute_s == pytest.approx(p.t_f + p.t_b, rel=1e-12)
    assert target_compute(p.d, 2 * p.batch_size, "none").compute_s == pytest.approx(2 * (p.t_f + p.t_b), rel=1e-12)
    assert target_compute(p.d + 1, p.batch_size, "none") is None


def test_report_reads_an_older_run_folder_and_says_so(tmp_path, capsys):
    (tmp_path / "summary.json").write_text(json.dumps({"compressor": "gtopk", "world_size": 4, "steps": 1,
                                                      "throughput_model": 1.0, "time/iter_model_s": 0.01}))
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "train/loss": 1.0, "density/target": 0.004}) + "\n")
    assert run_figure(tmp_path).is_file()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "older version" in err and "density/target" in err
