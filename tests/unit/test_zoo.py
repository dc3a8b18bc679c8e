"""`make bench-zoo` (bench/zoo.py) and `make fig-zoo` (paper_figs/fig_zoo.py): the grid, the CSV schema, the bounds'
units, one small race on the shared SimGrid test platform, Ok-Topk in the whole-iteration replay, and the figure on
a tiny CSV."""
from __future__ import annotations

import importlib.util
import math
import sys

import pytest

from ssgd.tools import simgrid_replay as sr
from tests.conftest import ROOT, paper_script, simgrid_test_platform

PLATFORM = simgrid_test_platform()      # the shared platform of the SimGrid tests: one per test process


def _bench():
    spec = importlib.util.spec_from_file_location("bench_zoo", ROOT / "bench" / "zoo.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_zoo"] = mod                    # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


zoo = _bench()
fig = paper_script("fig_zoo")


def _simgrid_missing() -> str | None:
    from ssgd.comm.executors.simgrid_engine import SimGridMissing, load

    try:
        load()
    except SimGridMissing as err:
        return str(err)
    return None


MISSING = _simgrid_missing()
needs_simgrid = pytest.mark.skipif(MISSING is not None, reason=f"SimGrid: {MISSING}")


def test_plan_runs_dense_once_per_d_and_P_up_to_its_cap():
    cases = zoo.plan([8, 2, 4], [1000], ["normal", "heavy"], ["dense", "gtopk"], dense_max_P=4)
    assert [(c.P, c.scheme, c.dist) for c in cases] == [
        (2, "dense", "-"), (2, "gtopk", "normal"), (2, "gtopk", "heavy"),
        (4, "dense", "-"), (4, "gtopk", "normal"), (4, "gtopk", "heavy"),
        (8, "gtopk", "normal"), (8, "gtopk", "heavy")]


@pytest.mark.parametrize("args, message", [
    (([1], [1000], ["normal"]), "P=1: worker counts must be integers >= 2"),
    (([2], [0], ["normal"]), "d=0: must be an integer >= 1"),
    (([2], [1000], ["cauchy"]), "dist='cauchy': allowed: normal, heavy"),
])
def test_plan_refuses_bad_values_naming_them(args, message):
    with pytest.raises(ValueError, match=message):
        zoo.plan(*args, ["topk"])


def test_bounds_are_the_papers_words_of_four_bytes():
    """6k(P-1)/P and 2k(P-1)/P words; a word is 4 bytes, one of our 8-byte entries is 2 words."""
    k, P = 25_000, 32
    assert zoo.paper_bound_bytes(k, P) == pytest.approx(6 * k * (P - 1) / P * 4)
    assert zoo.lower_bound_bytes(k, P) == pytest.approx(2 * k * (P - 1) / P * 4)
    # in entries: the bound is 3 k (P - 1) / P of our entries, the lower bound k (P - 1) / P
    assert zoo.paper_bound_bytes(k, P) / zoo.ENTRY_BYTES == pytest.approx(3 * k * (P - 1) / P)
    assert zoo.lower_bound_bytes(k, P) / zoo.ENTRY_BYTES == pytest.approx(k * (P - 1) / P)
    assert zoo.paper_bound_bytes(k, 1) == 0 == zoo.lower_bound_bytes(k, 1)


def test_registry_names_the_schemes_and_topkdsa_only_where_sparcml_exists():
    names = set(zoo.registry())
    assert {"dense", "topk", "gtopk", "oktopk", "oktopk_reuse"} <= names
    has_sparcml = importlib.util.find_spec("ssgd.comm.collectives.sparcml") is not None
    assert ("topkdsa" in names) == has_sparcml


def test_csv_round_trips_and_a_foreign_header_is_refused(tmp_path):
    row = {c: 1 for c in zoo.COLUMNS} | {"network": "1GbE", "dist": "normal", "scheme": "topk", "t_max_s": 0.5}
    zoo.write_csv(tmp_path / "z.csv", [row])
    back = zoo.read_csv(tmp_path / "z.csv")
    assert list(back[0]) == list(zoo.COLUMNS) and back[0]["t_max_s"] == "0.5"
    (tmp_path / "bad.csv").write_text("network,P\n1GbE,2\n")
    with pytest.raises(ValueError, match="bad.csv: header"):
        zoo.read_csv(tmp_path / "bad.csv")


@pytest.mark.parametrize("argv, start", [
    (["--schemes", "nope"], "error: --schemes nope: allowed: dense, topk"),
    (["--P", "1", "4"], "error: P=1: worker counts must be integers >= 2"),
    (["--dists", "uniform"], "error: dist='uniform': allowed: normal, heavy"),
])
def test_bad_input_is_a_one_line_error_and_exit_2(argv, start, capsys):
    assert zoo.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(start) and "\n" not in err


def test_selections_are_exact_local_topk_and_heavy_ones_overlap():
    sel = {dist: zoo.selections(dist, 20_000, 3) for dist in zoo.DISTS}
    for dist, ss in sel.items():
        for r, s in enumerate(ss):
            u = zoo.gradient(dist, 20_000, r, zoo.shared_scale(20_000) if dist == "heavy" else None)
            assert len(s) == 20 and set(s.idx.tolist()) == set(u.abs().topk(20).indices.tolist())
    common = {dist: len(set(ss[0].idx.tolist()) & set(ss[1].idx.tolist())) for dist, ss in sel.items()}
    assert common["heavy"] > common["normal"]


@needs_simgrid
def test_measure_counts_what_each_rank_sent():
    """TopkA's ring allgather: every rank sends P - 1 blocks of k entries; Ok-Topk's reuse call moves fewer bytes
    than its exact call on the same selections; the slowest rank bounds the fastest."""
    P, d = 4, 8000
    pl = zoo.selections("heavy", d, P)
    reg = zoo.registry()
    rows = {s: zoo.measure(zoo.Case(d, "heavy", P, s), reg[s], pl, PLATFORM)
            for s in ("topk", "gtopk", "oktopk", "oktopk_reuse")}
    k = zoo.k_of(d)
    assert rows["topk"]["bytes_max"] == rows["topk"]["bytes_mean"] == 8 * k * (P - 1)
    assert rows["oktopk_reuse"]["bytes_mean"] < rows["oktopk"]["bytes_mean"]
    for r in rows.values():
        assert 0 < r["t_min_s"] <= r["t_max_s"] and r["entries_mean"] == k
        assert r["bound_bytes"] == zoo.paper_bound_bytes(k, P)


@needs_simgrid
@pytest.mark.parametrize("P", [3, 8])
def test_volume_only_counts_what_simgrid_counts_without_times(P):
    """--networks volume: the threads executor's bytes and messages per rank are SimGrid's, and no time."""
    d, reg = 8000, zoo.registry()
    pl = zoo.selections("heavy", d, P)
    for s in ("gtopk", "oktopk", "oktopk_reuse", "topkdsa"):
        case = zoo.Case(d, "heavy", P, s)
        sim, vol = zoo.measure(case, reg[s], pl, PLATFORM), zoo.measure(case, reg[s], pl, None)
        keys = ("bytes_max", "bytes_mean", "messages_max", "messages_mean", "entries_mean")
        assert {k: vol[k] for k in keys} == {k: sim[k] for k in keys}, s
        assert math.isnan(vol["t_max_s"]) and math.isnan(vol["t_min_s"]) and sim["t_max_s"] > 0


@needs_simgrid
def test_replay_runs_oktopk_as_compute_selection_and_the_collective():
    from ssgd.comm.collectives.oktopk import OkTopkAllreduce
    from ssgd.comm.executors.simgrid import run_simgrid
    from tests.unit.test_simgrid_replay import TOY

    assert isinstance(sr.collective("oktopk"), OkTopkAllreduce) and "oktopk" not in sr.SCHEMES
    P = 4
    st = sr.simulate_step(TOY, "oktopk", P, PLATFORM, bucket_bytes=10**9, density=0.01)
    payloads = [sr.payload("oktopk", TOY.d, 0.01, sr.seed_of(r, 0)) for r in range(P)]
    _, logs = run_simgrid(sr.collective("oktopk"), payloads, PLATFORM, cpu="none")
    alone = max(log.clock for log in logs)
    assert st.t_iter_s == pytest.approx(TOY.single_worker_seconds() + TOY.select_s + alone, rel=1e-9)


def _tiny_csv(path):
    """Two networks, one d, P = 2, 4, 8: gTop-k faster than Ok-Topk's reuse call only from P = 8."""
    rows = []
    for net in ("1GbE", "10GbE"):
        for P in (2, 4, 8):
            for scheme, t in (("dense", 1.0), ("topk", 0.1 * P), ("gtopk", 0.05 * math.log2(P) + 0.1),
                              ("oktopk", 0.3), ("oktopk_reuse", 0.04 * P)):
                dist = "-" if scheme == "dense" else "heavy"
                rows.append({"network": net, "dist": dist, "d": 1000, "k": 1, "P": P, "scheme": scheme,
                             "t_max_s": t, "t_min_s": t, "bytes_max": 100.0 * P, "bytes_mean": 90.0 * P,
                             "messages_max": P, "messages_mean": P, "entries_mean": 1,
                             "bound_bytes": zoo.paper_bound_bytes(1, P),
                             "lower_bound_bytes": zoo.lower_bound_bytes(1, P), "wall_s": 0.1})
    zoo.write_csv(path, rows)


@pytest.mark.slow       # a figure script (make test-fast leaves them to make test)
def test_fig_zoo_draws_and_saves_a_tiny_csv(tmp_path):
    _tiny_csv(tmp_path / "zoo.csv")
    assert fig.main(["--csv", str(tmp_path / "zoo.csv"), "--out", str(tmp_path / "out")]) == 0
    import matplotlib.image as mpimg

    for stem in ("fig_zoo_time", "fig_zoo_bytes"):
        for ext in ("png", "pdf", "csv"):
            assert (tmp_path / "out" / f"{stem}.{ext}").stat().st_size > 0
        h, w = mpimg.imread(tmp_path / "out" / f"{stem}.png").shape[:2]
        assert 200 < h < 2000 and 300 < w < 2500
    winners = fig.winners(fig.load(tmp_path / "zoo.csv"))
    assert [w[4] for w in winners if w[0] == "1GbE"] == ["oktopk_reuse", "oktopk_reuse", "gtopk"]
    cross = {(c[0], c[3]): c for c in fig.crossovers(fig.load(tmp_path / "zoo.csv"))}
    assert cross[("1GbE", "oktopk_reuse")][4:] == ["2 4", "8"]
    assert (tmp_path / "out" / "zoo_crossover.csv").read_text().count("\n") == 5


@pytest.mark.slow       # a figure script (make test-fast leaves them to make test)
def test_fig_zoo_reads_several_csvs_together(tmp_path):
    """A larger-P run's CSV adds its rows: the winners cover both files' P."""
    _tiny_csv(tmp_path / "a.csv")
    rows = zoo.read_csv(tmp_path / "a.csv")
    zoo.write_csv(tmp_path / "b.csv", [r | {"P": "16"} for r in rows if r["P"] == "8"])
    assert fig.main(["--csv", str(tmp_path / "a.csv"), str(tmp_path / "b.csv"), "--out", str(tmp_path / "out")]) == 0
    winners = (tmp_path / "out" / "zoo_winners.csv").read_text()
    assert "1GbE,heavy,1000,16,gtopk" in winners and "1GbE,heavy,1000,8,gtopk" in winners


@pytest.mark.slow       # a figure script (make test-fast leaves them to make test)
def test_fig_zoo_takes_counted_volume_rows_into_the_bytes_only(tmp_path):
    """`--networks volume` rows (bytes counted, times NaN) add the P no simulation reached to fig_zoo_bytes; a P the
    simulation has keeps the simulated network's row; the times, winners and crossovers never see them."""
    _tiny_csv(tmp_path / "a.csv")
    rows = zoo.read_csv(tmp_path / "a.csv")
    volume = [r | {"network": "volume", "t_max_s": "nan", "t_min_s": "nan", "bytes_max": "1"} for r in rows
              if r["network"] == "1GbE" and r["P"] == "8" and r["dist"] != "-"]
    zoo.write_csv(tmp_path / "b.csv", volume + [r | {"P": "1024"} for r in volume])
    assert fig.main(["--csv", str(tmp_path / "a.csv"), str(tmp_path / "b.csv"), "--out", str(tmp_path / "out")]) == 0
    drawn = [line.split(",") for line in (tmp_path / "out" / "fig_zoo_bytes.csv").read_text().splitlines()[1:]]
    at_1024 = [float(c[4]) for c in drawn if c[3] == "1024" and c[0] != "bound"]
    at_8 = [float(c[4]) for c in drawn if c[3] == "8" and c[2] == "gtopk"]
    assert len(at_1024) == 4 and set(at_1024) == {1.0}
    assert at_8 == [800.0]                       # the simulated network's row, not the volume one
    for name in ("fig_zoo_time.csv", "zoo_winners.csv", "zoo_crossover.csv"):
        text = (tmp_path / "out" / name).read_text()
        assert "volume" not in text and ",1024," not in text
    assert fig.main(["--csv", str(tmp_path / "b.csv"), "--out", str(tmp_path / "out2")]) == 2


def test_every_committed_zoo_csv_is_one_fig_zoo_reads():
    """make fig-zoo reads paper_figs/measured/zoo.csv and every zoo_*.csv beside it: each must have its columns (other
    measurements, such as the testbed's, are named otherwise)."""
    files = [fig.CSV, *sorted(fig.CSV.parent.glob(fig.EXTRA))]
    assert len(files) > 1
    for path in files:
        assert fig.load(path), path


def test_fig_zoo_without_its_csv_is_a_one_line_error(tmp_path, capsys):
    assert fig.main(["--csv", str(tmp_path / "none.csv"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "none.csv: no such file" in err and "\n" not in err


@needs_simgrid
@pytest.mark.slow
def test_cli_writes_one_row_per_case_and_network_and_its_copy(tmp_path):
    """The whole bench at a toy size: selections once, one subprocess per network, the CSVs merged and copied."""
    import os
    import subprocess

    out, copy = tmp_path / "zoo.csv", tmp_path / "copy" / "zoo.csv"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "zoo.py"), "--P", "2", "3", "--d", "4000",
                           "--out", str(out), "--copy", str(copy)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = zoo.read_csv(out)
    cases = zoo.plan([2, 3], [4000], list(zoo.DISTS), list(zoo.registry()))
    assert len(rows) == 2 * len(cases) and {r["network"] for r in rows} == set(zoo.NETWORKS)
    assert copy.read_text() == out.read_text() and "[bench-zoo] done in" in proc.stderr


@pytest.mark.slow
def test_a_stopped_driver_leaves_no_worker(tmp_path):
    """SIGTERM to `bench/zoo.py` (the driver) stops its per-network worker too, and the driver exits 143."""
    import os
    import signal
    import subprocess
    import time

    from tests.procs import alive, children_of

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    driver = subprocess.Popen([sys.executable, str(ROOT / "bench" / "zoo.py"), "--networks", "volume", "--P", "1024",
                               "--d", "100000", "--dists", "heavy", "--schemes", "oktopk",
                               "--out", str(tmp_path / "out.csv")], env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (workers := children_of(driver.pid)):        # a 1,024-rank Ok-Topk call: minutes of work
        assert driver.poll() is None and time.monotonic() < deadline, "the worker never started"
        time.sleep(0.2)
    driver.send_signal(signal.SIGTERM)
    try:
        assert driver.wait(timeout=60) == 143
        deadline = time.monotonic() + 10
        while any(alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(p) for p in workers)
    finally:                                            # a failing case leaves nothing running either
        for p in workers:
            if alive(p):
                os.kill(p, signal.SIGKILL)
