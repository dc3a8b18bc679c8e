"""bench/testbed_comm.py and bench/testbed_e2e.py: the arithmetic that turns measured collectives and runs into their
tables (model error, physical floor, time to accuracy), pinned against hand computations. The measurements
themselves need the testbed and are benchmarks, not tests."""
from __future__ import annotations

import sys

import pytest

from bench_modules import load

testbed = load("testbed_comm")
e2e = load("testbed_e2e")
harness = load("harness")


@pytest.mark.parametrize("bw, rate", [("1gbit", 125e6), ("10gbit", 1.25e9), ("100mbit", 12.5e6),
                                      ("2.5gbit", 312.5e6), ("125mbps", 125e6)])
def test_tc_rates_in_bytes_per_second(bw, rate):
    assert testbed.rate_bytes_per_s(bw) == pytest.approx(rate)


@pytest.mark.parametrize("size, nbytes", [("256kb", 262_144), ("1mb", 2**20), ("32kbit", 4096), ("1500", 1500),
                                           ("1500b", 1500)])
def test_tc_sizes_in_bytes(size, nbytes):
    assert testbed.size_bytes(size) == nbytes
    with pytest.raises(ValueError, match="burst 'big'"):
        testbed.size_bytes("big")


def test_a_bad_rate_is_refused():
    with pytest.raises(ValueError, match="BW='fast'"):
        testbed.rate_bytes_per_s("fast")


PINGPONG = [8 * 4**i for i in range(13)]          # ssgd.tools.pingpong's sizes


def fit_of(alpha: float, beta: float) -> dict:
    """A ping-pong on a link whose bucket never helps (alpha + n beta at every size) and its regime fit."""
    return {"alpha": alpha, "beta": beta, "nbytes": PINGPONG, "seconds": [alpha + n * beta for n in PINGPONG]}


def case(P: int, d: int, name: str, seconds: list[float], entries: list[int], sent: list[int],
         compute: list[list[float]] | None = None) -> dict:
    rounds = [harness.Round(i, {name: s}, 0.0, False, 1, s) for i, s in enumerate(seconds)]
    series = harness.Series([name], rounds, 0.2, 0, 1)
    steps = {"dense_allreduce": 2, "gtopk_allreduce": 4}[name]      # rank 0's operations + 1 (others: same length here)
    return {"P": P, "d": d, "k": max(int(d * 0.001), 1), "series": series.to_json(),
            "counted": {name: {"entries_by_rank": entries, "bytes_by_rank_measured": sent}},
            "slowest_s": {name: 1.1 * seconds[0]}, "skew_s": {name: 1e-5},
            "compute_s": {name: compute or [[0.0] * steps for _ in range(P)]}}


def test_dense_row_model_error_and_floor_by_hand():
    """P = 4 ring allreduce of d = 1M float32: 2(P-1) = 6 messages of d/4 elements; each rank sends 1.5 x 4d bytes.
    The alpha-beta column by hand; the link model (ssgd.perf.shaped) is the program on the modelled links plus
    the measured compute: here a link whose bucket never helps, so the network is the alpha-beta time, and 1 ms
    of compute before the allreduce on every rank adds 1 ms."""
    d, P = 2**20, 4
    fit = fit_of(1e-4, 8e-9)
    sent = [6 * d] * P                                        # 2(P-1) chunks of d/P elements x 4 bytes
    given = case(P, d, "dense_allreduce", [0.070, 0.060, 0.080], [d] * P, sent, [[1e-3, 0.0]] * P)
    (row,) = testbed.rows_of(given, "1gbit", fit)
    alphabeta = 6 * (1e-4 + d * 8e-9)                         # 6 steps of one d/4-element (d bytes) chunk
    floor = 6 * d / 125e6 + 6 * 1e-4
    assert row["critical_messages"] == 6 and row["busiest_link_bytes"] == 6 * d
    assert row["alphabeta_ms"] == pytest.approx(1e3 * alphabeta)
    assert row["alphabeta_error"] == pytest.approx(alphabeta / 0.070 - 1)
    assert row["network_ms"] == pytest.approx(1e3 * alphabeta, rel=1e-3)
    assert row["compute_ms"] == pytest.approx(1.0) and row["modelled_ms"] == pytest.approx(row["network_ms"] + 1.0)
    assert row["model_error"] == pytest.approx(row["modelled_ms"] / 70.0 - 1)
    assert row["floor_ms"] == pytest.approx(1e3 * floor)
    assert row["ratio_to_floor"] == pytest.approx(0.070 / floor)
    assert (row["measured_lo_ms"], row["measured_hi_ms"]) == pytest.approx((60.0, 80.0))
    assert (row["slowest_rank_ms"], row["entry_skew_ms"]) == pytest.approx((77.0, 0.01))


def test_gtopk_row_counts_both_trees():
    """gTop-k at P = 4: 2 reduce rounds + 2 broadcast rounds of 8k bytes on the critical path (alpha-beta)."""
    d, P, k = 2**20, 4, 1048
    fit = fit_of(1e-4, 8e-9)
    (row,) = testbed.rows_of(case(P, d, "gtopk_allreduce", [0.002], [k] * P, [16 * k, 8 * k, 16 * k, 8 * k]),
                             "1gbit", fit)
    assert row["critical_messages"] == 4
    assert row["alphabeta_ms"] == pytest.approx(1e3 * 4 * (1e-4 + 8 * k * 8e-9))
    assert row["floor_ms"] == pytest.approx(1e3 * (16 * k / 125e6 + 4 * 1e-4))
    assert 0 < row["network_ms"] == row["modelled_ms"]


def test_summary_counts_points_within_the_tolerance():
    rows = [{"collective": "dense_allreduce", "d": 2**20, "P": 2, "model_error": 0.10, "ratio_to_floor": 1.1,
             "noisy": False, "alphabeta_error": 0.3},
            {"collective": "gtopk_allreduce", "d": 2**20, "P": 2, "model_error": -0.5, "ratio_to_floor": 3.0,
             "noisy": True, "alphabeta_error": 0.1}]
    text = "\n".join(testbed.summary(rows))
    assert "1 of 2 (P, d, collective) points" in text and "at most 3.00" in text and "1 of 2 within the goal" in text
    assert "1 of 2 points were measured while other processes" in text


def test_time_to_target_sums_logged_intervals():
    records = [{"step": 10, "time/step_s": 0.02}, {"step": 20, "time/step_s": 0.04}, {"step": 31, "val/acc": 0.5},
               {"step": 30, "time/step_s": 0.01}, {"step": 62, "val/acc": 0.91}]
    assert e2e.time_to_target(records, 0.9) == (62, pytest.approx(10 * 0.02 + 10 * 0.04 + 10 * 0.01))
    assert e2e.time_to_target(records, 0.95) == (None, None)


def test_e2e_cells_say_how_many_seeds_missed():
    assert e2e.cell([1.0, 3.0, None], ".1f") == "2.0 [1.0-3.0] (1 of 3 not reached)"
    assert e2e.cell([None], ".1f") == "not reached"


@pytest.mark.parametrize("Ps, hosts, bad", [([2, 4], 4, False), ([4], 4, False), ([1], 4, True), ([2, 8], 4, True)])
def test_each_P_must_fit_the_testbed(Ps, hosts, bad):
    problem = testbed.check_hosts(Ps, hosts)
    assert (problem is not None) == bad
    if bad:
        assert problem == f"--P {' '.join(map(str, Ps))}: the testbed has {hosts} hosts; each P must be in 2..{hosts}"


def test_results_go_to_csv_and_json_with_the_command(tmp_path, monkeypatch):
    import csv
    import json
    import time

    monkeypatch.setattr(sys, "argv", ["bench/testbed_e2e.py", "--P", "2"])
    rows = [{"P": 2, "scheme": "dense", "x": 1.5}, {"P": 2, "scheme": "gtopk", "x": 0.25}]
    testbed.write_results(tmp_path / "out" / "t_1gbit", rows, ["P", "scheme", "x"], {"testbed": {"hosts": 2}},
                          time.perf_counter())
    with open(tmp_path / "out" / "t_1gbit.csv") as f:
        assert [{k: v for k, v in r.items()} for r in csv.DictReader(f)] == \
            [{"P": "2", "scheme": "dense", "x": "1.5"}, {"P": "2", "scheme": "gtopk", "x": "0.25"}]
    meta = json.loads((tmp_path / "out" / "t_1gbit.json").read_text())
    assert meta["command"] == "bench/testbed_e2e.py --P 2" and meta["rows"] == rows
    assert meta["testbed"] == {"hosts": 2} and meta["total_runtime_s"] >= 0
