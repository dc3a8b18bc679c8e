"""Smoke run of paper_figs/fig_selection.py (and bench/selection.py's timing it uses) on tiny sizes."""
import csv
import json

import pytest

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
    assert "| d | rounds x calls | topk | gaussiank |" in printed and "Achieved density / target" in printed
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
