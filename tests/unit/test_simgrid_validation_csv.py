"""docs/data/simgrid_validation.csv (make bench-testbed-simgrid): its schema, the points it must cover, that every
network-bound row reports SimGrid's ratio to the measurement, and that its network_bound column is the rule of
bench/testbed_simgrid.py applied to the row's own numbers. The 15 % goal itself is reported in
docs/simgrid-validation.md, not asserted here."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from bench_modules import load

sim = load("testbed_simgrid")
CSV = Path(__file__).resolve().parents[2] / "docs" / "data" / "simgrid_validation.csv"
COLLECTIVES = {"dense_allreduce", "topk_allgather", "gaussiank_allgather", "gtopk_allreduce"}
REQUIRED_D = {269_722, 2**20, int(6.5 * 2**20), 25_557_032}       # 0.27M, 1M, 6.5M, 25M


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    with open(CSV, newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == sim.CSV_COLUMNS
        return list(reader)


def test_every_collective_at_p_2_and_4_and_the_required_sizes_at_1gbit(rows):
    got = {(r["collective"], int(r["P"]), int(r["d"])) for r in rows if r["bandwidth"] == "1gbit"}
    want = {(c, P, d) for c in COLLECTIVES for P in (2, 4) for d in REQUIRED_D}
    assert want <= got
    assert {r["collective"] for r in rows} <= COLLECTIVES


def test_every_row_has_its_times_and_ratios(rows):
    for r in rows:
        measured = float(r["measured_s"])
        for key in ("measured_s", "simgrid_s", "simgrid_network_s", "token_bucket_s", "alphabeta_s"):
            assert math.isfinite(float(r[key])) and float(r[key]) > 0, (key, r)
        assert float(r["simgrid_ratio"]) == pytest.approx(float(r["simgrid_s"]) / measured, rel=1e-4)
        assert float(r["alphabeta_ratio"]) == pytest.approx(float(r["alphabeta_s"]) / measured, rel=1e-4)
        assert float(r["token_bucket_ratio"]) == pytest.approx(float(r["token_bucket_s"]) / measured, rel=1e-4)
        assert r["load_average"].strip(), r


def test_network_bound_is_the_benchs_rule_and_some_points_are(rows):
    for r in rows:
        assert r["network_bound"] in ("True", "False")
        rule = sim.network_bound(float(r["link_bytes_per_s"]), float(r["busiest_link_bytes"]),
                                 float(r["burst_bytes"]), float(r["compute_s"]), float(r["token_bucket_network_s"]))
        assert (r["network_bound"] == "True") == rule, r
    held_out = [r for r in rows if r["network_bound"] == "True" and r["calibration"] == "False"]
    assert held_out
    assert all(math.isfinite(float(r["simgrid_ratio"])) for r in held_out)


def test_the_calibration_point_is_marked_and_only_it(rows):
    marked = {(r["collective"], r["P"], r["d"]) for r in rows if r["calibration"] == "True"}
    assert marked <= {("dense_allreduce", "2", str(sim.CALIBRATION_D))}


def test_the_rule_on_hand_made_points():
    """1 Gbit/s, 10 MB on the busiest link, 1 ms of compute against 80 ms on the link: network-bound; the same at
    10 Gbit/s, or with 200 KB (below 4 bursts of 248 KB), or with 20 ms of compute: not."""
    assert sim.network_bound(125e6, 10e6, 248e3, 1e-3, 80e-3)
    assert not sim.network_bound(1.25e9, 10e6, 248e3, 1e-3, 8e-3)
    assert not sim.network_bound(125e6, 200e3, 248e3, 1e-4, 1.6e-3)
    assert not sim.network_bound(125e6, 10e6, 248e3, 20e-3, 80e-3)
