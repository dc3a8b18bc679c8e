"""The SimGrid replay's series in `make fig-scaling` and its verdicts (paper_figs/scaling_efficiency.py,
paper_figs/reproduction.py, fig_scaling.findings), by hand."""
from __future__ import annotations

import csv

import matplotlib
import pytest

from ssgd.perf import profiles
from tests.conftest import paper_script

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

scaling_efficiency = paper_script("scaling_efficiency")
rep = paper_script("reproduction")
fig_scaling = paper_script("fig_scaling")


def write(path, fields, rows):
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fields)
        w.writeheader()
        w.writerows(rows)
    return path


def test_simgrid_points_are_read_per_network_profile_and_scheme(tmp_path):
    path = write(tmp_path / "s.csv", ["network", "profile", "scheme", "P", "efficiency"],
                 [{"network": "1GbE", "profile": "resnet20", "scheme": "gtopk", "P": 32, "efficiency": 0.7},
                  {"network": "1GbE", "profile": "resnet20", "scheme": "gtopk", "P": 4, "efficiency": 0.9},
                  {"network": "10GbE", "profile": "resnet20", "scheme": "gtopk", "P": 4, "efficiency": 0.95}])
    assert scaling_efficiency.load_simgrid(path) == {("1GbE", "resnet20", "gtopk"): [(4, 0.9), (32, 0.7)],
                                                     ("10GbE", "resnet20", "gtopk"): [(4, 0.95)]}
    assert scaling_efficiency.load_simgrid(tmp_path / "absent.csv") == {}
    bad = write(tmp_path / "bad.csv", ["a"], [{"a": 1}])
    with pytest.raises(ValueError, match="bad.csv: needs the columns"):
        scaling_efficiency.load_simgrid(bad)


def test_simgrid_series_is_drawn_and_written_with_source_simgrid():
    prof = profiles.load("resnet20")
    fig, ax = plt.subplots()
    rows = scaling_efficiency.simgrid_series(ax, prof, "1GbE", {("1GbE", "resnet20", "dense"): [(4, 0.5), (8, 0.4)],
                                                                ("10GbE", "resnet20", "dense"): [(4, 0.9)]})
    plt.close(fig)
    v1 = prof.batch_size / prof.single_worker_seconds()
    assert rows == [["resnet20", "1GbE", "simgrid", "dense", 4, 0.5, v1 * 0.5],
                    ["resnet20", "1GbE", "simgrid", "dense", 8, 0.4, v1 * 0.4]]
    assert "SimGrid, simulated: Dense (Horovod)" in ax.get_legend_handles_labels()[1]


def eff_row(source, scheme, P, eff, model="m", network="1GbE"):
    return {"profile": model, "network": network, "source": source, "scheme": scheme, "P": str(P),
            "efficiency": str(eff)}


def test_simulated_ratios_at_32_against_the_papers():
    rows = [eff_row("paper", "gtopk", 32, 0.9), eff_row("paper", "dense", 32, 0.3), eff_row("paper", "topk", 32, 0.6),
            eff_row("simgrid", "gtopk", 32, 0.8), eff_row("simgrid", "dense", 32, 0.2),   # 4.0 vs 3.0: +33 %
            eff_row("simgrid", "topk", 32, 0.55),                                           # 1.4545 vs 1.5: -3 %
            eff_row("simgrid", "dense", 32, 0.8, network="10GbE"),                          # ignored
            eff_row("paper", "gtopk", 32, 0.5, model="n"), eff_row("paper", "dense", 32, 0.25, model="n")]
    got = {m: cells for _, m, _, cells in rep.simulated_ratio_rows(rows)}
    assert got["m"]["gTop-k / dense"][1] == "direction only" and "+33 %" in got["m"]["gTop-k / dense"][0]
    assert got["m"]["gTop-k / Top-k"][1] == "reproduced"
    assert got["n"] == {"gTop-k / dense": ("- / 2: not attempted", "not attempted")}


def test_findings_gain_the_simulated_rows(tmp_path):
    eff = [eff_row(s, sc, P, e) for s, e in (("paper", 0.9), ("model", 0.85), ("simgrid", 0.88))
           for sc in ("dense", "topk", "gtopk") for P in (4, 32)]
    write(tmp_path / "fig_scaling_efficiency.csv", list(eff[0]), eff)
    ratio = {"network": "1GbE", "profile": "m", "model_gtopk_over_dense": 2.0, "paper_gtopk_over_dense": 2.1,
             "model_gtopk_over_topk": 1.1, "paper_gtopk_over_topk": 1.2}
    write(tmp_path / "ratios_p32.csv", list(ratio), [ratio])
    text = "\n".join(fig_scaling.findings(tmp_path))
    assert "| ratio at P = 32 (simulated) | SimGrid replay" in text
    assert "| efficiency (simgrid) | m | 32 | dense: 0.88 / 0.9 (-2 %): reproduced" in text
