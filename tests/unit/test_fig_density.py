"""paper_figs/fig_density.py and runs.py's density sweep on hand-made run directories: one row per
(scheme, density) with the hand-computed final accuracy, achieved density and modelled time to accuracy,
the dense runs as every scheme's density-1 point, "not reached" kept apart; and the plan's jobs."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import make_cfg, paper_script

dens = paper_script("fig_density")
conv = paper_script("fig_convergence")
runs_py = paper_script("runs")

STEPS = list(range(10, 101, 10))          # train records every 10 steps; val every 20


def fake_run(root: Path, scheme: str, density: float, seed: int, val_acc: list[float], achieved: float,
             iter_s: float = 0.01, comm_s: float = 0.002) -> Path:
    """A density-sweep run as src/train.py + runs.py write it: no density warm-up, `achieved` sent at every
    step, val acc at steps 20, 40, ..., 100."""
    run = root / "density" / (f"dense_s{seed}" if scheme == "dense" else f"{scheme}_d{density:g}_s{seed}")
    (run / ".hydra").mkdir(parents=True)
    cfg = make_cfg(f"compressor={scheme}", f"seed={seed}", "compressor.density_warmup=[]")
    if scheme != "dense":
        cfg.compressor.density = density
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")
    records = []
    for step in STEPS:
        records.append({"step": step, "epoch": step / 10, "train/loss": 1.0 / step, "density/scheduled": density,
                        "density/achieved": achieved, "target/iter_s": iter_s, "target/comm_s": comm_s})
        if step % 20 == 0:
            records.append({"step": step, "epoch": step / 10, "val/acc": val_acc[step // 20 - 1]})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "summary.json").write_text(json.dumps({"compressor": scheme, "cluster": "4x1gbe"}))
    label = {"dense": "dense", "topk": "Top-k", "gaussiank": "Gaussian-k"}[scheme]
    (run / "run_info.json").write_text(json.dumps({"kind": "density", "figure": "density", "title": "t",
                                                   "series": scheme, "label": label, "seed": seed,
                                                   "profile": "full", "target_acc": 0.9, "density": density}))
    return run


def test_rows_are_the_hand_computed_ones(tmp_path):
    for seed in (1, 2):
        fake_run(tmp_path, "dense", 1.0, seed, [0.92, 0.95, 0.95, 0.95, 0.96], 1.0, iter_s=0.02, comm_s=0.015)
    # Top-k at 0.01: seed 1 reaches 0.9 at step 40, seed 2 at step 80; at 0.001 never
    fake_run(tmp_path, "topk", 0.01, 1, [0.5, 0.9, 0.91, 0.92, 0.93], 0.01)
    fake_run(tmp_path, "topk", 0.01, 2, [0.5, 0.6, 0.7, 0.9, 0.91], 0.01)
    fake_run(tmp_path, "topk", 0.001, 1, [0.5, 0.6, 0.7, 0.8, 0.85], 0.001)
    fake_run(tmp_path, "topk", 0.001, 2, [0.5, 0.6, 0.7, 0.8, 0.75], 0.001)
    # Gaussian-k at 0.01 sends 0.006 and 0.004 (achieved differs from the target)
    fake_run(tmp_path, "gaussiank", 0.01, 1, [0.9] * 5, 0.006)
    fake_run(tmp_path, "gaussiank", 0.01, 2, [0.8] * 5, 0.004)
    # a convergence run in the same folder is not part of the sweep, and fig_convergence leaves the sweep alone
    other = fake_run(tmp_path / "convergence", "topk", 0.01, 3, [0.5] * 5, 0.01)
    (other / "run_info.json").write_text(json.dumps({"figure": "x", "series": "topk", "label": "Top-k", "seed": 3,
                                                     "title": "x", "profile": "full", "target_acc": 0.9}))
    assert dens.main(["--runs", str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    with (tmp_path / "out" / "fig_density.csv").open() as f:
        rows = {(r["scheme"], float(r["density"])): r for r in csv.DictReader(f)}
    assert list(rows) == [("topk", 1.0), ("topk", 0.01), ("topk", 0.001),
                          ("gaussiank", 1.0), ("gaussiank", 0.01)]
    assert (tmp_path / "out" / "fig_density.png").stat().st_size > 0
    shared = rows[("topk", 1.0)]                     # the dense runs, as every scheme's density-1 point
    assert shared == {**rows[("gaussiank", 1.0)], "scheme": "topk", "label": "Top-k"}
    assert shared["seeds"] == "2" and shared["reached"] == "2/2"
    assert float(shared["time_to_target_s_mean"]) == pytest.approx(0.4)     # step 20 x 0.02 s
    assert float(shared["final_val_acc_mean"]) == pytest.approx(0.96)
    t = rows[("topk", 0.01)]
    assert t["reached"] == "2/2" and float(t["steps_to_target_mean"]) == 60
    assert float(t["steps_to_target_min"]) == 40 and float(t["steps_to_target_max"]) == 80
    assert float(t["time_to_target_s_mean"]) == pytest.approx(0.6)          # 60 steps x 0.01 s
    assert float(t["time_to_target_s_min"]) == pytest.approx(0.4)
    assert float(t["comm_to_target_s_mean"]) == pytest.approx(0.12)         # 60 steps x 0.002 s
    assert float(t["final_val_acc_mean"]) == pytest.approx(0.92)
    assert float(t["final_val_acc_min"]) == pytest.approx(0.91) and float(t["final_val_acc_max"]) == 0.93
    never = rows[("topk", 0.001)]                    # "not reached": counted, no time
    assert never["reached"] == "0/2" and never["time_to_target_s_mean"] == "" and never["steps_to_target_mean"] == ""
    assert float(never["final_val_acc_mean"]) == pytest.approx(0.8)
    g = rows[("gaussiank", 0.01)]
    assert float(g["density_achieved_mean"]) == pytest.approx(0.005)
    assert float(g["density_achieved_min"]) == pytest.approx(0.004)
    assert float(g["density_achieved_max"]) == pytest.approx(0.006)
    assert g["reached"] == "1/2" and float(g["steps_to_target_mean"]) == 20
    runs = [r for r in conv.find_runs(tmp_path) if r.metrics]
    assert len(dens.density_runs(runs)) == 8
    assert conv.main(["--runs", str(tmp_path), "--out", str(tmp_path / "conv")]) == 0
    with (tmp_path / "conv" / "convergence_summary.csv").open() as f:
        assert [(r["figure"], r["seeds"]) for r in csv.DictReader(f)] == [("x", "1")]


def test_plan_has_every_scheme_density_and_seed_once():
    spec = runs_py.load_figures()
    d = spec["density"]
    jobs = [j for j in runs_py.plan("full", spec) if j.figures == ("density",)]
    seeds = spec["profiles"]["full"]["seeds"]
    got = sorted((j.info["series"], j.info["density"], j.info["seed"]) for j in jobs)
    want = sorted([("dense", 1.0, s) for s in seeds]
                  + [(sch, rho, s) for sch in d["schemes"] for rho in d["densities"] for s in seeds])
    assert got == want and len(got) == len(set(got))
    assert {sch for sch, _, _ in got} == {"dense", "gtopk", "topk", "gaussiank"}
    assert {1.0, 0.1, 0.01, 0.001, 0.0001} <= {rho for _, rho, _ in got}
    for j in jobs:          # the same step count and warm-ups for every scheme: max(0.004, density) in epoch 0
        assert f"trainer.max_steps={d['steps']}" in j.overrides and j.info["kind"] == "density"
        if j.info["series"] != "dense":
            rho = j.info["density"]
            assert f"compressor.density={rho:g}" in j.overrides
            assert f"compressor.density_warmup=[{max(0.004, rho):g}]" in j.overrides
    assert not [j for j in runs_py.plan("quick", spec) if j.figures == ("density",)]
    cfg = runs_py.composed(next(j for j in jobs if j.name == "density/gaussiank_d0.0001_s2").overrides)
    assert (cfg["compressor"]["name"], cfg["compressor"]["density"], cfg["compressor"]["density_warmup"],
            cfg["seed"], cfg["trainer"]["max_steps"]) == ("gaussiank", 0.0001, [0.004], 2, d["steps"])
