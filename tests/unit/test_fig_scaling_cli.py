"""paper_figs/fig_scaling.py: measured profiles (--profile PATH) in the scaling figures and its errors,
the paper-calibrated mode (--calibrated, the default) and `make fig-scaling OUT=dir`."""
import csv
import json
import math
import subprocess
from pathlib import Path

import pytest
import torch
from torch import nn

from ssgd.perf.iteration import Profile
from ssgd.perf.paper import paper_model
from ssgd.tools.measure import measure_profile
from tests.conftest import ROOT, paper_script

pytestmark = pytest.mark.slow      # runs paper_figs/fig_scaling.py end to end


def load_fig_scaling():
    return paper_script("fig_scaling")


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    """A profile measured like `python -m ssgd.tools.measure ... out=PATH` does, of a tiny MLP."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    prof = measure_profile(model, torch.randn(4, 8), torch.randint(0, 4, (4,)), "tiny-measured", reps=2)
    path = tmp_path_factory.mktemp("prof") / "tiny.json"
    prof.save(path)
    return path


def rows_of(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_measured_profile_is_plotted_beside_the_shipped_ones(tmp_path, measured, capsys):
    fig = load_fig_scaling()
    assert fig.main(["--profile", str(measured), "--out", str(tmp_path)]) == 0
    eff = rows_of(tmp_path / "fig_scaling_efficiency.csv")
    names = {r["profile"] for r in eff}
    assert {"tiny-measured", "resnet20", "vgg16"} <= names
    mine = [r for r in eff if r["profile"] == "tiny-measured"]
    assert {r["source"] for r in mine} == {"model"}                     # no paper markers for it
    assert {r["scheme"] for r in mine} == {"dense", "dense_wfbp", "topk", "gtopk", "gaussiank"}
    assert all(0 < float(r["efficiency"]) <= 1 for r in mine)
    assert "tiny-measured" in {r["profile"] for r in rows_of(tmp_path / "ratios_p32.csv")}
    assert "tiny-measured" in {r["profile"] for r in rows_of(tmp_path / "fig_breakdown_32.csv")}
    assert "tiny-measured" in capsys.readouterr().out


def test_no_shipped_plots_only_the_given_profiles(tmp_path, measured):
    other = tmp_path / "other.json"
    data = json.loads(measured.read_text())
    other.write_text(json.dumps({**data, "name": "tiny-2"}))
    fig = load_fig_scaling()
    assert fig.main(["--profile", str(measured), "--profile", str(other), "--no-shipped", "--out", str(tmp_path)]) == 0
    assert {r["profile"] for r in rows_of(tmp_path / "fig_scaling_efficiency.csv")} == {"tiny-measured", "tiny-2"}
    assert Profile.load(other).name == "tiny-2"


@pytest.mark.parametrize("content,message", [
    (None, "no such file"),
    ("{not json", "not a profile: not JSON"),
    ("[1, 2]", "not a profile: profile: expected a JSON object"),
    ('{"name": "x"}', "not a profile: profile: missing keys"),
    ('{"name": "x", "batch_size": 1, "layers": ["a"], "params": 5, "forward_s": [1], "backward_s": [1]}',
     "params must be a list"),
])
def test_bad_profile_file_is_a_one_line_error(tmp_path, capsys, content, message):
    path = tmp_path / "p.json"
    if content is not None:
        path.write_text(content)
    fig = load_fig_scaling()
    out = tmp_path / "out"
    assert fig.main(["--profile", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --profile {path}: ") and message in err and "\n" not in err
    assert not out.exists()                                          # nothing written


def test_duplicate_profile_names_and_missing_profile_with_no_shipped(tmp_path, measured, capsys):
    fig = load_fig_scaling()
    assert fig.main(["--profile", str(measured), "--profile", str(measured), "--out", str(tmp_path)]) == 2
    assert "already plotted" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        fig.main(["--no-shipped"])
    assert exit_info.value.code == 2


# --- calibrated mode ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def calibrated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("calibrated")
    assert load_fig_scaling().main(["--out", str(out)]) == 0
    return out


def test_calibrated_mode_writes_held_out_errors_with_a_reason_for_every_miss(calibrated):
    errors = rows_of(calibrated / "scaling_calibrated_errors.csv")
    assert {(r["model"], r["scheme"]) for r in errors} == {
        (m, s) for m in ("vgg16", "resnet20", "alexnet", "resnet50", "lstm_ptb") for s in ("dense", "topk", "gtopk")}
    for r in errors:
        held_out = [float(r["error_P16"]), float(r["error_P32"])]
        assert (r["held_out_within_goal"] == "True") == all(abs(e) <= 0.25 for e in held_out), r
        assert (r["reason"] == "") == (r["held_out_within_goal"] == "True"), r      # every miss says why
        lo, hi, growth = float(r["model_growth_min"]), float(r["model_growth_max"]), float(r["paper_growth_4_8_32"])
        if r["reason"].startswith("paper's (t32 - t8)"):
            assert not lo <= growth <= hi                                     # the reason is the measured growth
    ok = {(r["model"], r["scheme"]) for r in errors if r["held_out_within_goal"] == "True"}
    assert ok == {("vgg16", "gtopk"), ("resnet20", "dense"), ("resnet20", "gtopk"), ("alexnet", "gtopk"),
                  ("resnet50", "topk"), ("resnet50", "gtopk")}
    # gTop-k's tree is logarithmic in P: its growth from P = 8 to 32 is exactly twice that from 4 to 8
    assert {(float(r["model_growth_min"]), float(r["model_growth_max"])) for r in errors if r["scheme"] == "gtopk"} \
        == {(2.0, 2.0)}


def test_naive_and_pinned_predictors_score_as_the_calibrated_fit(calibrated):
    """The paper's data: the mean of t4, t8, the line in log2 P and the fit with alpha, beta pinned to the
    measured testbed link each get 6 of 15 pairs within 25 % at both P = 16 and 32, as the calibrated fit
    does, but not the same 6 (docs/scaling-model.md)."""
    errors = rows_of(calibrated / "scaling_calibrated_errors.csv")
    for r in errors:
        pm = paper_model(r["model"])
        t4, t8, t16, t32 = pm.seconds(r["scheme"])
        assert float(r["mean_error_P32"]) == pytest.approx((t4 + t8) / 2 / t32 - 1, rel=1e-9)
        assert float(r["logline_error_P16"]) == pytest.approx((t4 + 2 * (t8 - t4)) / t16 - 1, rel=1e-9)
        assert float(r["logline_error_P32"]) == pytest.approx((t4 + 3 * (t8 - t4)) / t32 - 1, rel=1e-9)
        assert (float(r["pinned_alpha_s"]), float(r["pinned_beta_s_per_byte"])) == (2.54e-5, 8.44e-9)
        assert float(r["pinned_constant_s"]) >= 0
        for key in ("mean", "logline", "pinned"):
            held_out = [float(r[f"{key}_error_P16"]), float(r[f"{key}_error_P32"])]
            assert (r[f"{key}_within_goal"] == "True") == all(abs(e) <= 0.25 for e in held_out), (key, r)
    ok = {key: {(r["model"], r["scheme"]) for r in errors if r[f"{key}_within_goal"] == "True"}
          for key in ("held_out", "mean", "logline", "pinned")}
    naive = {("vgg16", "gtopk"), ("resnet20", "topk"), ("resnet20", "gtopk"), ("alexnet", "gtopk"),
             ("resnet50", "topk"), ("resnet50", "gtopk")}
    assert ok["mean"] == ok["logline"] == ok["pinned"] == naive
    assert ok["held_out"] ^ naive == {("resnet20", "dense"), ("resnet20", "topk")}


def test_counts_line_is_printed_and_link_from_sets_the_pinned_link(calibrated, tmp_path, capsys):
    link = tmp_path / "alphabeta.yaml"
    link.write_text("name: testbed\nnetwork:\n  alpha: 2.54e-5\n  beta: 8.44e-9\n")
    assert load_fig_scaling().main(["--out", str(tmp_path / "out"), "--link-from", str(link)]) == 0
    out = capsys.readouterr().out
    assert "held-out (model, scheme) pairs within 25 %: calibrated 6 of 15, mean 6, log-line 6, pinned 6\n" in out
    assert rows_of(tmp_path / "out" / "scaling_calibrated_errors.csv") == \
        rows_of(calibrated / "scaling_calibrated_errors.csv")          # the same link as the default
    assert load_fig_scaling().main(["--out", str(tmp_path / "free"), "--link", "0", "0"]) == 0
    free = rows_of(tmp_path / "free" / "scaling_calibrated_errors.csv")
    assert {float(r["pinned_alpha_s"]) for r in free} == {0.0}
    default = rows_of(calibrated / "scaling_calibrated_errors.csv")
    assert [r["mean_error_P16"] for r in free] == [r["mean_error_P16"] for r in default]     # naive: no link
    assert [r["pinned_error_P32"] for r in free] != [r["pinned_error_P32"] for r in default]


def test_calibrated_points_are_the_iteration_model_with_the_fitted_constants(calibrated):
    fig = paper_script("scaling_calibrated")
    points = rows_of(calibrated / "scaling_calibrated_points.csv")
    consts = {r["model"]: r for r in rows_of(calibrated / "scaling_calibrated_constants.csv")}
    assert len(points) == 5 * 3 * 4 and {r["role"] for r in points} == {"fit", "held-out"}
    for r in points:
        pm = paper_model(r["model"])
        t = pm.seconds(r["scheme"])[fig.P_SCALING.index(int(r["P"]))]
        assert float(r["paper_s"]) == pytest.approx(t)
        c = consts[r["model"]]
        scheme = fig.model_scheme(r["scheme"], int(c["d"]))
        L, B = fig.fit.latency_and_bytes(scheme, int(r["P"]), int(c["d"]))
        by_hand = float(c["compute_s"]) + (float(c["selection_s"]) if r["scheme"] != "dense" else 0.0) \
            + float(c["alpha_s"]) * L + float(c["beta_s_per_byte"]) * B
        assert float(r["calibrated_s"]) == pytest.approx(by_hand, rel=1e-12)
        assert float(r["error"]) == pytest.approx(by_hand / t - 1, rel=1e-9, abs=1e-12)
    vgg = consts["vgg16"]                       # the fit finds the 1 GbE cluster's own alpha and beta
    assert float(vgg["alpha_s"]) == pytest.approx(0.436e-3, rel=0.05)
    assert float(vgg["beta_s_per_byte"]) == pytest.approx(9e-9, rel=0.2)
    assert float(vgg["breakdown_over_fitted_comm"]) == pytest.approx(49, abs=1)
    assert math.isnan(float(consts["lstm_ptb"]["breakdown_over_fitted_comm"]))    # no breakdown in the scripts


def test_calibrated_curves_are_in_the_efficiency_csv_and_optional(calibrated, tmp_path):
    eff = rows_of(calibrated / "fig_scaling_efficiency.csv")
    cal = [r for r in eff if r["source"] == "calibrated"]
    assert {r["profile"] for r in cal} == {"vgg16", "resnet20", "alexnet", "resnet50", "lstm_ptb"}
    assert {r["network"] for r in cal} == {"1GbE"} and {int(r["P"]) for r in cal} == {4, 8, 16, 32}
    assert load_fig_scaling().main(["--out", str(tmp_path), "--no-calibrated"]) == 0
    assert not list(tmp_path.glob("scaling_calibrated_*"))
    assert "calibrated" not in {r["source"] for r in rows_of(tmp_path / "fig_scaling_efficiency.csv")}


def test_make_fig_scaling_passes_OUT_as_out():
    def dry(*args):
        return subprocess.run(["make", "-n", "-o", ".venv/.setup-done", "fig-scaling", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60).stdout
    assert "fig_scaling.py --out /tmp/some/dir" in dry("OUT=/tmp/some/dir")
    assert "--out" not in dry()
