"""paper_figs/analysis.py on hand-made inputs, and the analysis figure scripts on tiny real runs."""
import csv

import numpy as np
import pytest
from omegaconf import OmegaConf

from tests.conftest import make_cfg, paper_script, train

an = paper_script("analysis")


def test_moments_by_hand():
    u = np.array([1.0, 2.0, 3.0, 4.0])
    assert an.normal_fit(u) == pytest.approx((2.5, 1.25**0.5))
    assert an.kurtosis(u) == pytest.approx(2.5625 / 1.5625)       # mean c^4 / var^2


def test_histogram_of_a_normal_sample_matches_its_fitted_pdf():
    u = np.random.default_rng(0).normal(3.0, 2.0, 1_000_000)
    edges, dens, outside = an.histogram(u, bins=101)
    assert (dens * np.diff(edges)).sum() == pytest.approx(1.0 - outside)
    mean, std = an.normal_fit(u)
    centers = (edges[:-1] + edges[1:]) / 2
    assert np.abs(dens - an.normal_pdf(centers, mean, std)).max() < 0.01 * an.normal_pdf(mean, mean, std) * 5
    assert outside < 1e-5


def test_qq_is_diagonal_for_normal_and_bends_for_laplace():
    rng = np.random.default_rng(1)
    theo, emp = an.qq_points(rng.normal(size=400_000))
    assert np.abs(emp - theo).max() < 0.15
    theo, emp = an.qq_points(rng.laplace(size=400_000))
    assert emp[-1] > theo[-1] + 1.0 and emp[0] < theo[0] - 1.0             # heavier tails


def test_tail_share_ratio():
    rng = np.random.default_rng(2)
    assert an.tail_share_ratio(rng.normal(size=2_000_000), 0.01) == pytest.approx(1.0, abs=0.05)
    assert an.tail_share_ratio(rng.laplace(size=2_000_000), 0.001) > 2.0    # Gaussian-k keeps too many
    assert an.tail_share_ratio(np.array([1.0, -1.0] * 500), 0.01) == 0.0     # every |u - mean| = std


def test_bounds_epoch_delta_and_modelled_time_by_hand():
    assert an.bounds(1, 1000) == pytest.approx((0.999, 0.998001))
    epochs, delta = an.epoch_delta([0, 0, 1], [1.0, 3.0, 2.0], [2.0, 2.0, 4.0])
    assert epochs.tolist() == [0, 1] and delta.tolist() == [1.0, 0.5]
    assert an.modelled_time([5, 10, 12], [1.0, 2.0, 3.0]).tolist() == [5.0, 15.0, 21.0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three tiny runs as src/train.py writes them: Top-k with u snapshots, gTop-k with statistics,
    dense without capture."""
    root = tmp_path_factory.mktemp("runs")
    small = ["trainer.max_steps=8", "trainer.batch_size=16", "trainer.eval_every=1", "trainer.epochs=1"]
    for name, extra in [("topk", ["compressor=topk", "capture.stats=true", "capture.u_steps=[1,8]"]),
                        ("gtopk", ["compressor=gtopk", "capture.stats=true"]),
                        ("dense", ["compressor=dense"])]:
        train(root / name, *small, *extra)
        (root / name / ".hydra").mkdir()
        OmegaConf.save(make_cfg(*small, *extra), root / name / ".hydra" / "config.yaml")
    return root


def rows_of(path):
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.mark.slow       # runs every figure script end to end
def test_figure_scripts_read_run_directories(runs, tmp_path):
    for script in ("fig_histograms", "fig_bounds", "fig_convergence"):
        assert paper_script(script).main(["--runs", str(runs), "--out", str(tmp_path)]) == 0
        assert (tmp_path / f"{script}.png").stat().st_size > 0 and (tmp_path / f"{script}.pdf").exists()
    hist = rows_of(tmp_path / "fig_histograms.csv")
    assert {r["step"] for r in hist} == {"1", "8"} and {r["kind"] for r in hist} == {"hist", "normal", "qq"}
    bounds = rows_of(tmp_path / "fig_bounds.csv")
    assert {r["scheme"] for r in bounds} == {"topk"} and len(bounds) == 8
    assert all(float(r["ratio_topk"]) <= float(r["bound_linear"]) for r in bounds)   # always true: the top k hold >= k/d of the energy
    assert {r["scheme"] for r in rows_of(tmp_path / "fig_bounds_delta.csv")} == {"topk", "gtopk"}
    cond = rows_of(tmp_path / "fig_bounds_condition.csv")  # one row per u snapshot of the Top-k run
    assert cond and {r["scheme"] for r in cond} == {"topk"}
    assert all(int(r["k"]) == max(int(int(r["d"]) * float(r["density"])), 1) for r in cond)
    assert all(r["holds"] == str(int(float(r["tail_over_line"]) <= 1 + 1e-12 and float(r["head_over_line"]) >= 1 - 1e-12))
               for r in cond)
    conv = rows_of(tmp_path / "fig_convergence.csv")
    assert {r["scheme"] for r in conv} == {"dense"}                # runs with capture are analysis runs
    assert any(r["val_acc_mean"] for r in conv) and any(r["model_time_s_mean"] for r in conv)
    (summary,) = rows_of(tmp_path / "convergence_summary.csv")
    assert summary["scheme"] == "dense" and summary["seeds"] == "1"


def test_no_runs_is_a_clear_error(tmp_path, capsys):
    fig = paper_script("fig_bounds")
    with pytest.raises(SystemExit) as exit_:
        fig.main(["--runs", str(tmp_path), "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2 and "make figs-runs" in capsys.readouterr().err
    runs_py = paper_script("runs")
    with pytest.raises(SystemExit) as exit_:
        runs_py.main(["--figure", "nope", "--out", str(tmp_path)])
    assert exit_.value.code == 2 and "allowed: bounds, convergence, density, histograms, selection" in capsys.readouterr().err
