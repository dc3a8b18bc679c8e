"""Smoke run of paper_figs/fig_selection.py (and bench/selection.py's timing it uses) on tiny sizes."""
import csv
import json

import numpy as np
import pytest
import torch
from scipy.stats import norm

from conftest import paper_script


def load_fig_selection():
    return paper_script("fig_selection")


def test_writes_png_pdf_and_the_plotted_csv(tmp_path, capsys):
    fig = load_fig_selection()
    assert fig.main(["--sizes", "1000", "5e3", "--reps", "1", "--devices", "cpu", "--out", str(tmp_path),
                     "--results-dir", str(tmp_path / "results"), "--min-round-s", "0", "--retries", "0"]) == 0
    for ext in ("png", "pdf", "csv"):
        assert (tmp_path / f"fig_selection.{ext}").stat().st_size > 0
    with (tmp_path / "fig_selection.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == fig.COLUMNS
    methods = list(fig.bench.METHODS)
    assert len(rows) == 2 * 2 * len(methods)                          # sizes x distributions x methods
    assert {(r["dist"], int(r["d"]), r["method"]) for r in rows} == {
        (dist, d, m) for dist in ("normal", "laplace") for d in (1000, 5000) for m in methods}
    for r in rows:
        assert r["device"] == "cpu" and int(r["reps"]) == 1 and float(r["median_ms"]) > 0
        k = max(int(int(r["d"]) * 0.001), 1)
        if r["method"] in ("topk", "randomk", "dgcsampling"):          # these send exactly k here
            assert float(r["density_mean"]) * int(r["d"]) == pytest.approx(k)
        if r["method"] == "topk":
            assert float(r["topk_over_method"]) == 1.0
        assert r["noisy"] in ("True", "False", "")                     # "" = unmeasured (no /proc/stat)
        assert float(r["noise_threshold"]) == 0.2 and int(r["inner"]) == 1
    saved = json.loads((tmp_path / "results" / "selection.json").read_text())["rows"]
    assert len(saved) == len(rows) and {"noisy", "other_cores_max"} <= set(saved[0])
    printed = capsys.readouterr().out
    assert "| d | rounds x calls | topk | topk_blocks | gaussiank |" in printed and "Achieved density / target" in printed
    assert "other CPU, cores" in printed and "Noise: CPU used by processes outside this benchmark" in printed
    assert "cpu normal d=5,000" in printed                             # one progress line per size


@pytest.mark.parametrize("flags,message", [
    (["--sizes", "0"], "--sizes"), (["--sizes", "1e3", "100.5"], "--sizes"), (["--density", "2"], "--density"),
    (["--reps", "0"], "--reps"), (["--methods", "gaussiank"], "topk"), (["--dists", "cauchy"], "--dists"),
    (["--devices", "tpu"], "--devices"), (["--noise-threshold", "0"], "--noise-threshold")])
def test_bad_flags_fail_with_one_line(flags, message, tmp_path, capsys):
    fig = load_fig_selection()
    with pytest.raises(SystemExit) as err:
        fig.main([*flags, "--out", str(tmp_path), "--results-dir", str(tmp_path)])
    assert err.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]
    assert not list(tmp_path.iterdir())                               # nothing written


def test_error_bars_never_negative():
    """A mean of equal floats can round just past their min or max; the bars clamp at zero."""
    fig = load_fig_selection()
    assert fig.spread([1.0, 2.0], [1.0000001, 1.5], [3.0, 1.9999]) == [[0.0, 0.5], [2.0, 0.0]]


# --- the real-u part (--runs) -------------------------------------------------------------------------
def released_gaussiank_count(u: np.ndarray, density: float) -> int:
    """Independent oracle, in numpy + scipy: the count GaussianK-SGD's released loop sends
    (hclhkbu/GaussianK-SGD compression.py; Shi et al. arXiv:1911.08772): thr = mean + Phi^-1(1 - rho/2) std,
    then up to 3 passes of |I| = #{|u| > thr}, halving thr below 2k/3 and x1.5 above 4k/3; the last pass's |I|."""
    k = max(int(u.size * density), 1)
    u64 = u.astype(np.float64)
    thr = u64.mean() + norm.ppf(1 - density / 2) * u64.std(ddof=1)
    for _ in range(3):
        count = int((np.abs(u) > np.float32(thr)).sum())
        if count < 2 * k / 3:
            thr *= 0.5
        elif count > 4 * k / 3:
            thr *= 1.5
        else:
            break
    return count


def fake_runs(root, d: int = 3000, steps=(1, 30)):
    """Two finished Top-k run folders (FNN3, SmallCNN) with u snapshots of heavy-tailed (Student t, 3 dof) u."""
    rng = np.random.default_rng(7)
    us = {}
    for name, target, scale in (("hist_fnn3_d0.001", "ssgd.models.FNN3", 1.0), ("hist_cnn_d0.001", "ssgd.models.SmallCNN", 3.0)):
        run = root / name
        (run / ".hydra").mkdir(parents=True)
        (run / "capture").mkdir()
        (run / ".hydra" / "config.yaml").write_text(
            f"model:\n  _target_: {target}\ncompressor:\n  name: topk\n  density: 0.001\n")
        (run / "summary.json").write_text(json.dumps({"compressor": "topk"}))
        for step in steps:
            u = (scale * rng.standard_t(3, d)).astype(np.float32)
            us[(target.rsplit(".", 1)[-1], step)] = u
            torch.save({"u": torch.from_numpy(u), "step": step, "density": 0.001}, run / "capture" / f"u_step{step:06d}.pt")
    return us


REAL_FLAGS = ["--sizes", "1000", "--dists", "normal", "--reps", "2", "--devices", "cpu", "--min-round-s", "0",
              "--retries", "0", "--reference-d", "4000"]


def test_achieved_counts_against_k():
    fig = load_fig_selection()
    a = fig.achieved([3, 5, 10], d=1000, density=0.005)             # k = 5 by hand
    assert (a.k, a.mean, a.lo, a.hi, a.ratio) == (5, 6.0, 3, 10, 1.2)
    assert fig.achieved([1], d=10, density=0.001).k == 1             # k = max(int(d rho), 1)
    with pytest.raises(ValueError):
        fig.achieved([], d=10, density=0.1)


def test_real_u_csv_on_fake_snapshots(tmp_path, capsys):
    fig = load_fig_selection()
    us = fake_runs(tmp_path / "runs")
    out = tmp_path / "out"
    assert fig.main([*REAL_FLAGS, "--out", str(out), "--results-dir", str(tmp_path / "res"),
                     "--runs", str(tmp_path / "runs")]) == 0
    for ext in ("png", "pdf", "csv"):
        assert (out / f"fig_selection_real.{ext}").stat().st_size > 0
    with (out / "fig_selection_real.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == fig.REAL_COLUMNS
    methods = list(fig.bench.METHODS)
    vectors = {(m, str(s)) for m, s in us} | {("normal", ""), ("laplace", "")}
    assert {(r["model"], r["step"], float(r["density"]), r["method"]) for r in rows} == {
        (m, s, rho, meth) for m, s in vectors for rho in (0.001, 0.01) for meth in methods}
    assert len(rows) == len(vectors) * 2 * len(methods)
    rng_laplace = fig.bench.make_vector("laplace", 4000, seed=4000, device="cpu").numpy()
    for r in rows:
        d, rho = int(r["d"]), float(r["density"])
        k = max(int(d * rho), 1)
        assert int(r["k"]) == k and int(r["reps"]) == 2 and float(r["median_ms"]) > 0
        assert float(r["min_ms"]) <= float(r["median_ms"]) <= float(r["max_ms"])
        lo, mean, hi = int(r["k_sent_min"]), float(r["k_sent_mean"]), int(r["k_sent_max"])
        assert lo <= mean <= hi and float(r["k_sent_over_k"]) == pytest.approx(mean / k)
        if r["method"] in ("topk", "randomk"):
            assert lo == hi == k
        if r["method"] == "gaussiank":                                  # deterministic: every call the oracle's count
            u = us[(r["model"], int(r["step"]))] if r["source"] == "run" else (
                rng_laplace if r["model"] == "laplace" else None)
            if u is not None:
                assert lo == hi == released_gaussiank_count(u, rho), r
        if r["source"] == "run":
            assert d == 3000 and r["run"].startswith("hist_")
        else:
            assert d == 4000 and r["run"] == "" and r["step"] == ""
    assert any(r["method"] == "gaussiank" and int(r["k_sent_min"]) != int(r["k"]) for r in rows)   # not all exactly k
    printed = capsys.readouterr().out
    assert "Real u: median ms" in printed and "| cpu | SmallCNN step 30 | 3,000 | 0.01 |" in printed


def test_real_u_fails_with_one_line(tmp_path, capsys):
    fig = load_fig_selection()
    us = fake_runs(tmp_path / "runs")
    args = [*REAL_FLAGS, "--out", str(tmp_path / "out"), "--results-dir", str(tmp_path / "res")]
    bad = tmp_path / "runs" / "hist_cnn_d0.001" / "capture" / "u_step000030.pt"
    bad.write_bytes(b"not a torch file")
    with pytest.raises(SystemExit) as err:
        fig.main([*args, "--runs", str(tmp_path / "runs")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert err.value.code == 2 and len(lines) == 1 and str(bad) in lines[0] and "cannot read" in lines[0]
    with pytest.raises(SystemExit) as err:                              # no SmallCNN run at all
        fig.main([*args, "--runs", str(tmp_path / "runs" / "hist_fnn3_d0.001")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert err.value.code == 2 and len(lines) == 1 and "SmallCNN" in lines[0] and "make fig-selection" in lines[0]
    with pytest.raises(SystemExit) as err:
        fig.main([*args, "--runs", str(tmp_path / "runs"), "--real-densities", "0"])
    assert err.value.code == 2 and "--real-densities" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and len(us) == 4            # nothing written before the check


def test_readme_names_the_real_u_counts(tmp_path):
    """fig_selection's README findings: the min-max k_sent / k over the run snapshots, and the references."""
    fig = load_fig_selection()
    blank = dict.fromkeys(fig.REAL_COLUMNS, "")
    rows = [{**blank, "source": s, "model": m, "density": "0.01", "method": "gaussiank", "k_sent_over_k": x}
            for s, m, x in (("run", "FNN3", "0.5"), ("run", "SmallCNN", "8.25"), ("synthetic", "laplace", "6.47"))]
    with (tmp_path / "fig_selection_real.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fig.REAL_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    assert fig.findings(tmp_path) == [
        "- real u (FNN-3, SmallCNN snapshots), density 0.01: gaussiank sends 0.50-8.25 k (mean over calls); "
        "reference u ~ laplace 6.47 k"]


def test_make_figs_and_runs_py_feed_the_real_u_part(tmp_path):
    """`make figs` trains before fig_selection and passes it the runs; runs.py's `selection` figure is FNN-3 + SmallCNN."""
    make_figs, runs_py = paper_script("make_figs"), paper_script("runs")
    names = [name for name, _ in make_figs.steps(tmp_path / "o", tmp_path / "r", 2, False)]
    argv = dict(make_figs.steps(tmp_path / "o", tmp_path / "r", 2, False))["fig_selection"]
    assert names.index("runs") < names.index("fig_selection") and argv[-2:] == ["--runs", str(tmp_path / "r")]
    assert sorted(j.name for j in runs_py.plan("full", runs_py.load_figures()) if "selection" in j.figures) == [
        "hist_cnn_d0.001", "hist_fnn3_d0.001"]


def test_reports_the_contended_numbers_when_the_bench_wrote_them(tmp_path):
    fig = load_fig_selection()
    assert "make bench-selection-contention writes them" in fig.contended_report(tmp_path)
    contention = fig._load("bench_selection_contention", fig.ROOT / "bench" / "selection_contention.py")
    cells = [contention.Cell(load, t, m, 1000, 3, ms, ms, ms, 0.0, False) for m in ("topk", "gaussiank")
             for (load, t), ms in {("quiet", 1): 4.0, ("quiet", 2): 3.0, ("busy", 1): 5.0, ("busy", 2): 8.0}.items()]
    contention.write_csv(cells, tmp_path / contention.CSV_NAME)
    report = fig.contended_report(tmp_path)
    rows = [line for line in report.splitlines() if line.startswith(("| topk", "| gaussiank"))]
    assert len(rows) == 2 and all(r.endswith("| 1 | 0.80 |") for r in rows)     # busy: 1 thread, 4 / 5 kept
