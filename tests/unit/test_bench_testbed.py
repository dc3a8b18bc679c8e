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
    steps = {"dense_allreduce": 2, "gtopk_allreduce": 4}.get(name, 64)  # rank 0's operations + 1 (others: same
    # length here); the zoo's collectives: more than any rank's operations (run_threads reads what it needs)
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


def test_topkdsa_row_counts_the_doubling_rounds():
    """TopkDSA at P = 4 (no fold): 2 rounds in which both partners send a 4-byte count, then their partial sum
    (k, then 2 k entries with disjoint supports): alpha-beta 8 alpha + 2 (4 + 8k) beta + 2 (4 + 16k) beta."""
    d, P, k = 2**20, 4, 1048
    fit = fit_of(1e-4, 8e-9)
    sent = [8 + 24 * k] * P
    (row,) = testbed.rows_of(case(P, d, "topkdsa_allreduce", [0.004], [k] * P, sent), "1gbit", fit)
    assert row["critical_messages"] == 8 and row["busiest_link_bytes"] == 8 + 24 * k
    assert row["alphabeta_ms"] == pytest.approx(1e3 * (8 * 1e-4 + (2 * (4 + 8 * k) + 2 * (4 + 16 * k)) * 8e-9))
    assert row["floor_ms"] == pytest.approx(1e3 * ((8 + 24 * k) / 125e6 + 8 * 1e-4))
    assert row["ratio_to_floor"] == pytest.approx(0.004 / ((8 + 24 * k) / 125e6 + 8 * 1e-4))
    assert 0 < row["network_ms"] == row["modelled_ms"]


def test_oktopk_reuse_row_models_a_reuse_call_after_the_exact_one(monkeypatch):
    """Ok-Topk's reuse call at P = 4: alpha-beta (P - 1)(4 alpha + (4 + 8 + 2 x 8k/P) beta), 4 (P - 1) messages; its
    link model runs the exact call first (the same program as oktopk_allreduce's, without it: equal network time),
    then the reuse call, which sends less."""
    d, P, k = 2**20, 4, 1048
    fit = fit_of(1e-4, 8e-9)
    sent = [3 * (4 + 8 + 4 * k)] * P
    (reuse,) = testbed.rows_of(case(P, d, "oktopk_reuse", [0.01], [k] * P, sent), "1gbit", fit)
    (exact,) = testbed.rows_of(case(P, d, "oktopk_allreduce", [0.01], [k] * P, sent), "1gbit", fit)
    assert reuse["critical_messages"] == 12
    assert reuse["alphabeta_ms"] == pytest.approx(1e3 * 3 * (4 * 1e-4 + (12 + 4 * k) * 8e-9))
    assert reuse["floor_ms"] == pytest.approx(1e3 * (3 * (12 + 4 * k) / 125e6 + 12 * 1e-4))
    assert 0 < reuse["network_ms"] == reuse["modelled_ms"] < exact["network_ms"] == exact["modelled_ms"]
    monkeypatch.setattr(testbed, "WARM_EXACT", {})
    (first,) = testbed.rows_of(case(P, d, "oktopk_reuse", [0.01], [k] * P, sent), "1gbit", fit)
    assert (first["modelled_ms"], first["network_ms"]) == pytest.approx((exact["modelled_ms"], exact["network_ms"]))


def test_oktopk_exact_row_leaves_the_closed_forms_empty():
    """An exact Ok-Topk call has no alpha-beta time or critical path in (P, k): those cells are empty (None, "-"
    in the table), the link model is still there."""
    d, P, k = 2**20, 2, 1048
    (row,) = testbed.rows_of(case(P, d, "oktopk_allreduce", [0.01, 0.012], [k] * P, [10_000, 9_000]), "1gbit",
                             fit_of(1e-4, 8e-9))
    assert [row[c] for c in ("alphabeta_ms", "alphabeta_error", "floor_ms", "ratio_to_floor", "critical_messages")] \
        == [None] * 5
    assert row["model_error"] == pytest.approx(row["modelled_ms"] / 11.0 - 1) and row["network_ms"] > 0
    (line,) = testbed.table([row])[2:]
    assert line.endswith("| - | - | - |") and "Ok-Topk, exact call" in line


def test_zoo_items_and_bad_item_names(capsys):
    assert testbed.check_items(list(testbed.ZOO_ITEMS)) is None and testbed.check_items(list(testbed.ITEMS)) is None
    assert testbed.parser().parse_args(["--zoo"]).zoo
    assert testbed.main(["--items", "dense_allreduce", "oktopk"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --items oktopk: unknown; choose from dense_allreduce, ")
    assert testbed.main(["--items", "oktopk_reuse", "oktopk_reuse"]) == 2
    assert capsys.readouterr().err == "error: --items oktopk_reuse oktopk_reuse: each collective at most once\n"
    with pytest.raises(SystemExit):
        testbed.parser().parse_args(["--zoo", "--items", "dense_allreduce"])
    stem = lambda items: testbed.results_stem(testbed.comm.RESULTS, "1gbit", items, False).name
    assert (stem(testbed.ITEMS), stem(testbed.ZOO_ITEMS), stem(["oktopk_reuse"])) == \
        ("testbed_1gbit", "testbed_1gbit_zoo", "testbed_1gbit_items")


def test_oktopk_sizes_by_hand():
    """Regions [0, 10), [10, 10) (empty), [10, 20); rank 0 holds 1, 5, 12: 12 lies outside its region."""
    comm = testbed.comm
    bounds, every = [0, 10, 10, 20], [[1, 5, 12], [5, 15, 19], [2]]
    # the union by region: 1 2 5 | - | 12 15 19, at most k = 2 kept from each
    assert comm.oktopk_sizes(0, bounds, every[0], every, [], 2, exact=True) == (1, [2, 0, 2])
    assert comm.oktopk_sizes(2, bounds, every[2], every, [5, 12, 19], 2, exact=False) == (1, [1, 0, 2])


@pytest.mark.parametrize("P", [2, 3, 4])
def test_oktopk_sizes_give_the_counted_bytes_of_exact_and_reuse_calls(P):
    """The worker's modelled bytes (`oktopk_sizes` into `cost.oktopk_sent`) equal the ops' counts, for the exact
    call and the reuse calls after it, on bench/comm.py's own payloads."""
    from ssgd.comm.executors.thread import run_threads
    from ssgd.perf import cost

    comm = testbed.comm
    given = [comm.payloads(50_000, r, comm.DENSITY)["oktopk_reuse"] for r in range(P)]
    coll = comm.zoo_collective("oktopk_reuse")
    every = [g.idx.numpy() for g in given]
    for call in range(3):
        results, logs = run_threads(coll, given)
        bounds = coll.state_dict(0)["bounds"]
        for r, log in enumerate(logs):
            sizes = comm.oktopk_sizes(r, bounds, every[r], every, results[r].total.idx.numpy(), len(given[0]),
                                      exact=call == 0)
            assert (log.stats.messages, log.stats.bytes) == \
                cost.oktopk_sent(r, P, *sizes, exact=call == 0, regions=call == 0)


def test_the_reuse_check_refuses_a_second_exact_call():
    from ssgd.comm.collectives.oktopk import OkTopkAllreduce
    from ssgd.comm.executors.thread import run_threads

    comm = testbed.comm
    given = [comm.payloads(20_000, r, comm.DENSITY)["oktopk_reuse"] for r in range(2)]
    bench = object.__new__(comm.RankBench)
    bench.rank = 0
    for coll, calls, ok in ((comm.zoo_collective("oktopk_reuse"), 3, True), (OkTopkAllreduce(2, 10**9), 3, False),
                            (comm.zoo_collective("oktopk_reuse"), 1, False)):
        for _ in range(calls):
            run_threads(coll, given)
        bench.colls = {"oktopk_reuse": (coll, given[0])}
        if ok:
            bench.check_reuse()
        else:
            with pytest.raises(RuntimeError, match="not one exact call followed by reuse calls"):
                bench.check_reuse()


def test_mismatches_skip_collectives_without_a_closed_form():
    counted = lambda measured, modelled: {"bytes_by_rank_measured": measured, "bytes_by_rank_modelled": modelled,
                                          "messages_by_rank_measured": [1, 1], "messages_by_rank_modelled": [1, 1]}
    c = {"P": 2, "d": 10, "counted": {"topkdsa_allreduce": counted([8, 9], [None, None]),
                                      "oktopk_reuse": counted([8, 9], [8, 8]),
                                      "gtopk_allreduce": counted([8, 8], [8, 8])}}
    assert [name for _, name in testbed.comm.mismatches([c])] == ["oktopk_reuse"]


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
