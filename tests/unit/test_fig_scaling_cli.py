"""paper_figs/fig_scaling.py --profile PATH: measured profiles in the scaling figures, and its errors."""
import csv
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from ssgd.perf.iteration import Profile
from tests.conftest import paper_script
from ssgd.perf.measure import measure_profile



def load_fig_scaling():
    return paper_script("fig_scaling")


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    """A profile measured like `python -m ssgd.perf.measure ... out=PATH` does, of a tiny MLP."""
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
