"""paper_figs/fig_convergence.py and runs.py on hand-made run directories: seeds aggregate into one legend
entry, achieved density and time to accuracy are the hand-computed ones, and Top-k's density is taken
from Gaussian-k's runs."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from tests.conftest import make_cfg, paper_script

an = paper_script("analysis")
conv = paper_script("fig_convergence")
runs_py = paper_script("runs")

STEPS = list(range(10, 101, 10))          # train records every 10 steps; 10 steps per epoch


def fake_run(root: Path, series: str, seed: int, scheme: str, density: float, val_acc: list[float],
             achieved: tuple[float, float] = (0.008, 0.003), iter_s: float = 0.01, comm_s: float = 0.002,
             figure: str = "fig", label: str | None = None) -> Path:
    """A run directory as src/train.py + runs.py write it. Density warm-up: the first 2 records
    (steps 1-20) at target 0.004 sending achieved[0], then target `density` sending achieved[1]."""
    run = root / figure / f"{series}_s{seed}"
    (run / ".hydra").mkdir(parents=True)
    cfg = make_cfg(f"compressor={scheme}", f"seed={seed}", "compressor.density_warmup=[0.004,0.004]",
                   "trainer.batch_size=8", "schedule.warmup_epochs=1")
    if scheme != "dense":
        cfg.compressor.density = density
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")
    records = []
    for i, step in enumerate(STEPS):
        warm = i < 2 and scheme != "dense"
        records.append({"step": step, "epoch": step / 10, "train/loss": 1.0 / step,
                        "density/scheduled": 0.004 if warm else (1.0 if scheme == "dense" else density),
                        "density/achieved": 1.0 if scheme == "dense" else achieved[0 if warm else 1],
                        "target/iter_s": iter_s, "target/comm_s": comm_s})
        if step % 20 == 0:
            records.append({"step": step, "epoch": float(step // 10), "val/acc": val_acc[step // 20 - 1]})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "summary.json").write_text(json.dumps({"compressor": scheme, "dataset": "mnist_embedded", "world_size": 4,
                                                  "cluster": "4x1gbe", "target/comm_s": comm_s,
                                                  "time/compute_s": 0.005, "val/acc": val_acc[-1]}))
    (run / "run_info.json").write_text(json.dumps({"figure": figure, "title": "a test", "series": series,
                                                   "label": label or series, "seed": seed, "profile": "full",
                                                   "target_acc": 0.9}))
    return run


def rows_of(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_analysis_helpers_by_hand():
    assert an.interval_lengths([10, 20, 25]).tolist() == [10, 10, 5]
    assert an.step_mean([10, 20, 25], [1.0, 2.0, 4.0]) == pytest.approx((10 + 20 + 20) / 25)
    # warm-up records (target 0.004) are left out; a record straddling the change (mixed target) too
    assert an.steady_density([10, 20, 30, 40], [9.0, 7.0, 3.0, 5.0], [0.004, 0.0025, 0.001, 0.001], 0.001) == 4.0
    assert np.isnan(an.steady_density([10], [1.0], [0.004], 0.001))
    assert an.time_at([10, 20], [0.1, 0.2], [0, 5, 10, 15, 20]).tolist() == pytest.approx([0, 0.5, 1, 2, 3])
    assert an.first_reach([20, 40, 60], [0.5, 0.91, 0.95], 0.9) == 40 and an.first_reach([20], [0.5], 0.9) is None
    # phases: the warm-up records (target 0.004), then thirds of the remaining steps 21-80
    assert an.density_phases([10, 20, 30, 40, 50, 60, 70, 80], [8, 8, 3, 3, 3, 3, 3, 6],
                             [0.004, 0.004] + [0.001] * 6, 0.001) == [
        (1, 20, 2000.0), (21, 40, 3000.0), (41, 60, 3000.0), (61, 80, 4500.0)]   # exact in binary: 8/0.004 ...
    assert an.density_phases([10, 20, 30], [1, 2, 3], [1, 1, 1], 1.0) == [(1, 10, 1.0), (11, 20, 2.0), (21, 30, 3.0)]
    mean, lo, hi = an.seed_band([[1.0, 2.0, 3.0], [3.0, 4.0]])
    assert mean.tolist() == [2.0, 3.0] and lo.tolist() == [1.0, 2.0] and hi.tolist() == [3.0, 4.0]


def test_seeds_aggregate_and_time_to_accuracy_is_the_hand_computed_one(tmp_path):
    # Top-k: seed 1 reaches 0.9 at step 40, seed 2 at step 60, seed 3 never; dense: every seed at step 20
    for seed, curve in [(1, [0.5, 0.9, 0.92, 0.93, 0.94]), (2, [0.5, 0.8, 0.9, 0.93, 0.94]),
                        (3, [0.5, 0.6, 0.7, 0.8, 0.85])]:
        fake_run(tmp_path, "topk", seed, "topk", 0.001, curve, label="Top-k")
        fake_run(tmp_path, "dense", seed, "dense", 1.0, [0.95] * 5, iter_s=0.02, comm_s=0.015, label="dense")
    assert conv.main(["--runs", str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "fig_convergence_fig.png").stat().st_size > 0
    summary = {r["series"]: r for r in rows_of(tmp_path / "out" / "convergence_summary.csv")}
    assert set(summary) == {"dense", "topk"}
    t = summary["topk"]
    assert t["seeds"] == "3" and t["reached"] == "2/3"
    assert float(t["steps_to_target_mean"]) == 50 and float(t["steps_to_target_min"]) == 40
    assert float(t["time_to_target_s_mean"]) == pytest.approx(0.5)            # 50 steps x 0.01 s
    assert float(t["time_to_target_s_min"]) == pytest.approx(0.4)
    assert float(t["time_to_target_s_max"]) == pytest.approx(0.6)
    assert float(t["comm_to_target_s_mean"]) == pytest.approx(0.1)            # 50 steps x 0.002 s
    assert float(t["density_achieved_mean"]) == pytest.approx((20 * 0.008 + 80 * 0.003) / 100)
    assert float(t["density_achieved_after_warmup"]) == pytest.approx(0.003)
    assert float(t["final_val_acc_mean"]) == pytest.approx((0.94 + 0.94 + 0.85) / 3)
    assert float(t["final_val_acc_min"]) == pytest.approx(0.85)
    phases = rows_of(tmp_path / "out" / "convergence_density_phases.csv")
    assert [(r["phase"], r["first_step"], r["last_step"]) for r in phases] == [
        ("warm-up", "1", "20"), ("first third", "21", "50"), ("second third", "51", "80"), ("last third", "81", "100")]
    assert float(phases[0]["achieved_over_target_mean"]) == pytest.approx(2.0)    # 0.008 sent at target 0.004
    assert float(phases[1]["achieved_over_target_mean"]) == pytest.approx(3.0)
    d = summary["dense"]
    assert d["reached"] == "3/3" and float(d["time_to_target_s_mean"]) == pytest.approx(0.4)   # 20 x 0.02 s
    # one legend entry per series (never one per seed), with the achieved density in it
    info, series = conv.group(conv.find_runs(tmp_path), 0.9)["fig"]
    fig, rows, _ = conv.draw("fig", info, series)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(legend) == 2 and "3 seeds" in legend[0] and "0.004 achieved" in legend[1]
    assert "0.003 after warm-up" in legend[1]
    band = [r for r in rows if r[1] == "topk" and r[5] == "val"]
    assert [r[6] for r in band] == [20, 40, 60, 80, 100]
    assert band[1][12] == pytest.approx((0.9 + 0.8 + 0.6) / 3) and band[1][13] == 0.6 and band[1][14] == 0.9
    for ax in fig.axes:                        # every axis labelled
        assert ax.get_xlabel() and ax.get_ylabel()


def test_runs_without_run_info_form_one_figure_by_compressor(tmp_path):
    for seed in (1, 2):
        run = fake_run(tmp_path, "x", seed, "gtopk", 0.001, [0.5, 0.9, 0.92, 0.93, 0.94])
        (run / "run_info.json").unlink()
    assert conv.main(["--runs", str(tmp_path), "--out", str(tmp_path / "out"), "--target-acc", "0.92"]) == 0
    (row,) = rows_of(tmp_path / "out" / "convergence_summary.csv")
    assert row["series"] == "gtopk" and row["seeds"] == "2" and float(row["steps_to_target_mean"]) == 60
    assert (tmp_path / "out" / "fig_convergence.png").exists()


def test_topk_takes_gaussiank_achieved_density(tmp_path):
    for seed, steady in [(1, 0.003), (2, 0.005)]:
        fake_run(tmp_path / "convergence", "gaussiank", seed, "gaussiank", 0.001, [0.9] * 5,
                 achieved=(0.02, steady))
    job = runs_py.Job("convergence/fig/topk_at_gaussiank_s1", ["-cn", "x", "compressor=topk"], ("convergence",), 1.0,
                      {}, ["convergence/fig/gaussiank_s1", "convergence/fig/gaussiank_s2"])
    overrides = runs_py.resolve(job, tmp_path)
    assert overrides[-2:] == ["compressor.density=0.004", "compressor.density_warmup=[0.004,0.004]"]
    assert job.info["density_from"]["density"] == 0.004


def test_plan_profiles_and_resume_check(tmp_path):
    spec = runs_py.load_figures()
    full, quick = runs_py.plan("full", spec), runs_py.plan("quick", spec)
    conv_full = [j for j in full if j.name.startswith("convergence/")]
    assert all(len([j for j in conv_full if j.name.rsplit("_s", 1)[0] == name]) == 3
               for name in {j.name.rsplit("_s", 1)[0] for j in conv_full})          # 3 seeds per series
    assert all(j.name.startswith("convergence/") for j in quick)
    # quick: 300 steps, except a figure that is shorter already (its own trainer.max_steps, never lengthened)
    for j in quick:
        own = runs_py.steps_of(spec["figures"][j.info["figure"]].get("overrides", []), 0)
        assert runs_py.steps_of(j.overrides, 0) == (min(own, 300) if own else 300), j.name
        assert ("trainer.max_steps=300" in j.overrides) == (not own or own > 300), j.name
    assert runs_py.capped(["a=1", "trainer.max_steps=300"], 200) == ["a=1"]
    assert runs_py.capped(["a=1", "trainer.max_steps=300"], 500) == ["a=1", "trainer.max_steps=300"]
    assert runs_py.capped(["trainer.max_steps=300"], 0) == ["trainer.max_steps=300"]
    # the SmallCNN figure: dense / Top-k / gTop-k, 3 seeds, the gTop-k setting's warm-ups for every scheme
    cnn = [j for j in conv_full if j.info["figure"] == "gtopk_cnn"]
    assert sorted({j.info["series"] for j in cnn}) == ["dense", "gtopk", "topk"] and len(cnn) == 9
    cfgs = [runs_py.composed(j.overrides) for j in cnn[::3]]
    assert all(c["model"]["_target_"] == "ssgd.models.SmallCNN" for c in cfgs)
    assert len({(str(c["compressor"]["density_warmup"]), c["schedule"]["warmup_epochs"], c["trainer"]["max_steps"])
                for c in cfgs}) == 1
    dependent = [i for i, j in enumerate(full) if j.density_from]
    assert dependent and min(dependent) > max(i for i, j in enumerate(full) if not j.density_from)
    # a finished run is kept only if its saved config is what the overrides compose to now
    job = conv_full[0]
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / "summary.json").write_text("{}")
    OmegaConf.save(OmegaConf.create(runs_py.composed(job.overrides)), run / ".hydra" / "config.yaml")
    assert runs_py.is_done(run, job.overrides)
    assert not runs_py.is_done(run, [*job.overrides, "optimizer.lr=0.5"])
