"""paper_figs/reproduction.py: verdict per cell, against hand-computed cells (issue 26)."""
from __future__ import annotations

import pytest
from tests.conftest import paper_script

rep = paper_script("reproduction")


def row(source: str, scheme: str, p: int, eff: float, model: str = "m") -> dict:
    return {"profile": model, "network": "1GbE", "source": source, "scheme": scheme, "P": str(p), "efficiency": str(eff)}


def test_verdict_boundaries() -> None:
    assert rep.verdict(1.10, 1.0, same_direction=False) == "reproduced"  # exactly at the 10 % tolerance
    assert rep.verdict(1.11, 1.0, same_direction=True) == "direction only"
    assert rep.verdict(1.11, 1.0, same_direction=None) == "not reproduced"
    assert rep.verdict(0.5, 1.0, same_direction=False) == "not reproduced"
    assert rep.verdict(None, 1.0, same_direction=None) == "not attempted"
    with pytest.raises(ValueError):
        rep.verdict(1.0, None, same_direction=None)


def test_efficiency_rows_direction_from_p4_and_no_verdict_on_fitted_points() -> None:
    rows = [row("paper", "gtopk", 4, 1.0), row("paper", "gtopk", 32, 0.5),
            row("model", "gtopk", 4, 0.5), row("model", "gtopk", 32, 0.4),  # falls like the paper, 20 % low
            row("calibrated", "gtopk", 4, 1.0), row("calibrated", "gtopk", 32, 1.2),  # rises: wrong side
            {**row("model", "gtopk", 32, 9.9), "network": "10GbE"}]  # another network: ignored
    plain = rep.efficiency_rows(rows, "model")
    assert [(a, m, p) for a, m, p, _ in plain] == [("efficiency (model)", "m", 4), ("efficiency (model)", "m", 32)]
    assert plain[0][3]["gtopk"][1] == "not reproduced"  # -50 % and P = 4 has no direction
    assert plain[1][3]["gtopk"][1] == "direction only"
    assert "-20 %" in plain[1][3]["gtopk"][0]
    calibrated = rep.efficiency_rows(rows, "calibrated")
    assert [p for _, _, p, _ in calibrated] == [32]  # P = 4 was fitted
    assert calibrated[0][3]["gtopk"][1] == "not reproduced"
    assert rep.counts(plain)["efficiency (model)"] == {"not reproduced": 1, "direction only": 1}
    assert rep.summary_line("x", rep.counts(plain)["efficiency (model)"]) == \
        "0 of 2 cells reproduced (1 direction only, 1 not reproduced)"


def test_ratio_rows_count_every_cell_not_the_best() -> None:
    ratios = [{"profile": "a", "network": "1GbE", "model_gtopk_over_dense": "2.0", "paper_gtopk_over_dense": "2.1",
               "model_gtopk_over_topk": "0.9", "paper_gtopk_over_topk": "1.5"},
              {"profile": "a", "network": "10GbE", "model_gtopk_over_dense": "2.1", "paper_gtopk_over_dense": "2.1",
               "model_gtopk_over_topk": "1.5", "paper_gtopk_over_topk": "1.5"}]
    (artefact, model, p, cells), = rep.ratio_rows(ratios)
    assert (model, p) == ("a", 32)
    assert cells["gTop-k / dense"][1] == "reproduced" and cells["gTop-k / Top-k"][1] == "not reproduced"
    assert rep.summary_line(artefact, rep.counts([(artefact, model, p, cells)])[artefact]) == \
        "1 of 2 cells reproduced (1 not reproduced)"


def test_counts_by_cell_keeps_schemes_apart() -> None:
    rows = [("e", "m", 4, {"dense": ("", "not reproduced"), "gtopk": ("", "reproduced")}),
            ("e", "n", 4, {"dense": ("", "reproduced"), "gtopk": ("", "reproduced")})]
    by = rep.counts_by_cell(rows)
    assert by[("e", "dense")] == {"not reproduced": 1, "reproduced": 1} and by[("e", "gtopk")] == {"reproduced": 2}


def test_testbed_cells_beyond_its_hosts_are_not_attempted() -> None:
    rows = [row("paper", "gtopk", 4, 1.0), row("paper", "gtopk", 8, 0.9),
            row("testbed", "gtopk", 2, 0.99), row("testbed", "gtopk", 4, 0.95)]   # P = 2: not a paper cell
    measured = rep.efficiency_rows(rows, "testbed")
    assert [(a, p) for a, _, p, _ in measured] == [("efficiency (testbed)", 4), ("efficiency (testbed)", 8)]
    assert measured[0][3]["gtopk"][1] == "reproduced"          # -5 %
    assert measured[1][3]["gtopk"][1] == "not attempted"
