"""bench/testbed_simgrid.py's arithmetic: a measured row and SimGrid's times into the CSV row, the goal's summary,
and the CSV rewritten for one bandwidth keeping the others. The measurements need the testbed; the predictions
SimGrid (tests/unit/test_simgrid_calibrate.py checks its closed forms)."""
from __future__ import annotations

import csv

import pytest

from bench_modules import load

sim = load("testbed_simgrid")


def measured(collective: str = "dense_allreduce", P: int = 4, d: int = 2**20, ms: float = 50.0,
             bw: str = "1gbit") -> dict:
    """A row as bench/testbed_comm.py writes it, with the load averages of --measure."""
    return {"bw": bw, "P": P, "d": d, "collective": collective, "measured_ms": ms, "modelled_ms": 45.0,
            "network_ms": 44.8, "compute_ms": 0.2, "alphabeta_ms": 48.0, "noisy": False, "other_cores_max": 0.1,
            "busiest_link_bytes": 6.3e6, "burst_bytes": 250e3, "link_bytes_per_s": 125e6,
            "load_before": "1.0 1.1 1.2", "load_after": "1.5 1.2 1.2"}


def test_a_csv_row_has_every_column_and_the_ratios():
    row = sim.csv_row(measured(), [0.055, 0.054])
    assert tuple(row) == sim.CSV_COLUMNS
    assert row["simgrid_ratio"] == pytest.approx(1.1)
    assert row["token_bucket_ratio"] == pytest.approx(0.9)
    assert row["alphabeta_ratio"] == pytest.approx(0.96)
    assert row["network_bound"] is True and row["calibration"] is False
    assert row["load_average"] == "1.0 1.1 1.2 -> 1.5 1.2 1.2"
    assert sim.csv_row(measured(P=2, d=sim.CALIBRATION_D), [0.1, 0.1])["calibration"] is True


def test_the_summary_counts_held_out_network_bound_points_and_names_the_misses():
    rows = [sim.csv_row(measured(d=2**20, ms=50.0), [0.051, 0.051]),           # +2 %: within; a-b -4 %
            sim.csv_row(measured(d=2**22, ms=50.0), [0.070, 0.070]),           # +40 %: a miss
            sim.csv_row(measured(P=2, d=sim.CALIBRATION_D, ms=50.0), [0.09, 0.09]),   # fitted: not counted
            sim.csv_row(measured("topk_allgather", ms=5.0), [0.001, 0.001])]          # CPU-bound: not counted
    rows[-1]["network_bound"] = False
    lines = sim.summary(rows)
    assert lines[0].startswith("SimGrid within 15% of the measurement: 1 of 2 held-out network-bound points")
    assert "better than alpha-beta at 1 of the 2" in lines[0]
    assert len(lines) == 2 and "P=4 d=4194304 dense_allreduce: SimGrid / measured = 1.400" in lines[1]


def test_the_csv_keeps_the_other_bandwidths_rows(tmp_path):
    path = tmp_path / "v.csv"
    sim.write_csv(path, [sim.csv_row(measured(bw="10gbit"), [0.05, 0.05]), sim.csv_row(measured(), [0.05, 0.05])])
    sim.write_csv(path, [sim.csv_row(measured(ms=60.0), [0.05, 0.05])])
    with open(path, newline="") as f:
        got = list(csv.DictReader(f))
    assert [(r["bandwidth"], r["measured_s"]) for r in got] == [("10gbit", "0.05"), ("1gbit", "0.06")]


def test_the_predictions_need_a_platform_per_measured_file(capsys):
    assert sim.main(["--measured", "a.json"]) == 2
    assert "--measured (1 files) and --platform (0)" in capsys.readouterr().err


def test_the_markdown_table_has_a_line_per_row_with_the_ratios():
    lines = sim.table([sim.csv_row(measured(), [0.055, 0.054]), sim.csv_row(measured(P=2, d=sim.CALIBRATION_D),
                                                                            [0.1, 0.1])])
    assert len(lines) == 4
    assert lines[2] == ("| 1gbit | 4 | 1,048,576 | dense_allreduce | yes | 50 | 55 (1.10) | 0.90 | 0.96 "
                        "| 1.0 1.1 1.2 -> 1.5 1.2 1.2 |")
    assert "| yes (fitted) |" in lines[3]


def test_a_missing_input_file_is_named(tmp_path, capsys):
    there = tmp_path / "measured.json"
    there.write_text("{}")
    assert sim.main(["--measured", str(there), "--platform", str(tmp_path / "none.yaml")]) == 2
    assert f"--platform {tmp_path / 'none.yaml'}: no such file" in capsys.readouterr().err
