"""ssgd.tools.simgrid_replay (`make simgrid-scaling`): the buckets and selection charge by hand, and simulated
steps against independent oracles: the dense ring's closed form on an idle CM02 star with wait-free backprop
(`ssgd.perf.wfbp`), and compute + selection + the same collective simulated alone (`run_simgrid`)."""
from __future__ import annotations

import csv
import math
import subprocess
import sys

import pytest

from ssgd.perf import profiles
from ssgd.perf.iteration import Profile
from ssgd.perf.platform import gbps
from ssgd.perf.wfbp import wfbp_seconds
from ssgd.tools import simgrid_replay as sr
from tests.conftest import ROOT

from tests.conftest import simgrid_test_platform

PLATFORM = simgrid_test_platform()      # the shared platform of the SimGrid tests: one per test process


def _simgrid_missing() -> str | None:
    from ssgd.comm.executors.simgrid_engine import SimGridMissing, load

    try:
        load()
    except SimGridMissing as err:
        return str(err)
    return None


MISSING = _simgrid_missing()
needs_simgrid = pytest.mark.skipif(MISSING is not None, reason=f"SimGrid: {MISSING}")

# three layers in backward order; each of its sizes divisible by 2 and 4 (the ring's chunks are equal)
TOY = Profile("toy", batch_size=8, layers=("c", "b", "a"), params=(4000, 8000, 1200),
              forward_s=(0.002, 0.003, 0.001), backward_s=(0.001, 0.002, 0.05), io_s=0.001, h2d_s=0.0005,
              update_s=0.004, select_s=0.01)


# SimGrid's network/crosstraffic (on by default, off on the shared platform): a flow's TCP acknowledgements take 5 %
# of its reverse route's bandwidth; on a ring every host's uplink carries one flow's data and its left neighbour's
# flow's ACKs, so max-min sharing gives each data flow bandwidth / 1.05.
CROSSTRAFFIC = 1.05 if PLATFORM.tcp.crosstraffic else 1.0


def ring_seconds(n: int, P: int) -> float:
    """Ring allreduce of n float32 on an idle CM02 star: 2(P - 1) steps of (2 latencies + chunk / bandwidth x
    CROSSTRAFFIC)."""
    return 2 * (P - 1) * (2 * PLATFORM.latency + CROSSTRAFFIC * 4 * n / P / PLATFORM.bandwidth)


def test_buckets_close_at_the_cap_in_backward_order():
    assert [b.layers for b in sr.buckets(TOY, 4 * 10_000)] == [(0, 1), (2,)]     # 12,000 >= 10,000: closes
    assert [b.layers for b in sr.buckets(TOY, 4)] == [(0,), (1,), (2,)]          # every layer its own bucket
    one = sr.buckets(TOY, 10**9)
    assert [b.layers for b in one] == [(0, 1, 2)] and one[0].numel == TOY.d
    assert one[0].ready_s == pytest.approx(TOY.t_b) and one[0].select_s == pytest.approx(TOY.select_s)
    split = sr.buckets(TOY, 4 * 10_000)
    assert [b.ready_s for b in split] == pytest.approx([0.003, 0.053])
    n = 12_000
    assert split[0].select_s == pytest.approx(TOY.select_s * n * math.log2(n) / (TOY.d * math.log2(TOY.d)))
    with pytest.raises(ValueError, match="bucket_bytes=0"):
        sr.buckets(TOY, 0)


def test_ddp_buckets_of_the_shipped_profiles_cover_every_layer_once():
    for name in sr.MODELS:
        prof = profiles.load(name)
        plan = sr.buckets(prof)
        assert [i for b in plan for i in b.layers] == list(range(len(prof.layers)))
        assert sum(b.numel for b in plan) == prof.d
        assert all(4 * b.numel >= sr.BUCKET_BYTES for b in plan[:-1])


def test_efficiency_is_from_the_slowest_rank():
    prof = profiles.load("resnet20")
    st = sr.StepTime(t_iter_s=0.2, t_iter_min_s=0.05, comm_s=0.1, buckets=1, k_per_step=269)
    r = sr.row("1GbE", prof, "gtopk", 4, st, 0.0)
    assert r["efficiency"] == pytest.approx(prof.single_worker_seconds() / 0.2)
    assert r["samples_per_s"] == pytest.approx(4 * prof.batch_size / 0.2)


def test_sparse_payloads_have_k_distinct_increasing_indices():
    p = sr.payload("gtopk", 10_000, 0.001, seed=3)
    assert p.count == 10 and bool((p.idx.diff() > 0).all()) and int(p.idx.max()) < 10_000
    assert sr.payload("dense", 7, 0.001, seed=0).values.device.type == "meta"


@needs_simgrid
@pytest.mark.parametrize("P", [2, 4])
def test_dense_step_is_the_ring_closed_form_under_wait_free_backprop(P):
    plan = sr.buckets(TOY, 4)                               # one bucket per layer: overlap matters
    st = sr.simulate_step(TOY, "dense", P, PLATFORM, bucket_bytes=4)
    backward = wfbp_seconds(TOY.backward_s, [ring_seconds(b.numel, P) for b in plan])
    expected = TOY.io_s + TOY.h2d_s + TOY.t_f + backward + TOY.update_s
    assert st.t_iter_s == pytest.approx(expected, rel=1e-6) and st.t_iter_min_s == pytest.approx(expected, rel=1e-6)
    assert st.buckets == 3 and st.k_per_step == TOY.d


@needs_simgrid
@pytest.mark.parametrize("scheme", ["topk", "gtopk", "oktopk", "topkdsa"])
@pytest.mark.parametrize("P", [2, 4])
def test_one_bucket_step_is_compute_selection_and_the_collective_alone(scheme, P):
    from ssgd.comm.executors.simgrid import run_simgrid

    st = sr.simulate_step(TOY, scheme, P, PLATFORM, bucket_bytes=10**9, density=0.01)
    payloads = [sr.payload(scheme, TOY.d, 0.01, sr.seed_of(r, 0)) for r in range(P)]
    _, logs = run_simgrid(sr.collective(scheme), payloads, PLATFORM, cpu="none")
    alone = max(log.clock for log in logs)
    expected = TOY.single_worker_seconds() + TOY.select_s + alone
    assert st.t_iter_s == pytest.approx(expected, rel=1e-9)
    assert st.comm_s == pytest.approx(alone, rel=1e-9) and st.k_per_step == int(0.01 * TOY.d)
    assert st.t_iter_min_s <= st.t_iter_s


@needs_simgrid
@pytest.mark.parametrize("P", [2, 3, 7, 12])                # 3, 7, 12: chunks of unequal length
@pytest.mark.parametrize("bucket_bytes", [4, 10**9])
def test_dense_by_one_ring_step_equals_the_whole_ring_program(P, bucket_bytes):
    whole = sr.simulate_step(TOY, "dense", P, PLATFORM, bucket_bytes=bucket_bytes, method="program")
    stepped = sr.simulate_step(TOY, "dense", P, PLATFORM, bucket_bytes=bucket_bytes, method="ring-step")
    assert (whole.method, stepped.method) == ("program", "ring-step")
    assert stepped.t_iter_s == pytest.approx(whole.t_iter_s, rel=1e-12, abs=0)
    assert stepped.comm_s == pytest.approx(whole.comm_s, rel=1e-9, abs=0)
    assert stepped.t_iter_min_s == stepped.t_iter_s


@needs_simgrid
def test_dense_by_one_ring_step_is_the_ring_closed_form():
    st = sr.simulate_step(TOY, "dense", 4, PLATFORM, bucket_bytes=10**9, method="ring-step")
    assert st.comm_s == pytest.approx(ring_seconds(TOY.d, 4), rel=1e-9)


def test_the_ring_step_is_for_dense_past_the_program_limit_or_on_request():
    assert not sr.uses_ring_step("dense", sr.PROGRAM_RING_MAX, "auto")
    assert sr.uses_ring_step("dense", sr.PROGRAM_RING_MAX + 1, "auto")
    assert sr.uses_ring_step("dense", 2, "ring-step") and not sr.uses_ring_step("dense", 1024, "program")
    assert not sr.uses_ring_step("gtopk", 1024, "auto")
    with pytest.raises(ValueError, match="method='ring-step': dense only, not scheme='gtopk'"):
        sr.uses_ring_step("gtopk", 4, "ring-step")
    with pytest.raises(ValueError, match="method='x': allowed: auto, program, ring-step"):
        sr.uses_ring_step("dense", 4, "x")


@needs_simgrid
def test_more_ranks_than_hosts_is_refused():
    with pytest.raises(ValueError, match="P=13: must be an int in 1..12"):
        sr.simulate_step(TOY, "dense", 13, PLATFORM)


def test_bad_worker_count_is_a_one_line_error(capsys):
    assert sr.main(["--network", "1GbE", "--out", "x.csv", "--P", "0"]) == 2
    assert capsys.readouterr().err.strip() == "error: --P 0: worker counts must be >= 1"


def test_platform_of_reads_the_cluster_yaml():
    p = sr.platform_of("1GbE", 64)
    assert (p.hosts, p.bandwidth, p.latency, p.switch, p.tcp.model) == (64, gbps(1), 0.000218, "star", "LV08")
    assert sr.platform_of("10GbE", 2).bandwidth == gbps(10)


def test_default_plan_covers_the_issue_grid():
    small = {(m, s, P) for m in sr.MODELS for s in sr.SCHEMES for P in sr.P_SMALL}
    assert set(sr.default_plan("10GbE")) == small
    big = set(sr.default_plan("1GbE")) - small
    assert {s for _, s, _ in big} == {"dense", "gtopk"}
    assert {P for _, s, P in big if s == "dense"} == {P for _, s, P in big if s == "gtopk"} == set(sr.P_LARGE)


@pytest.mark.slow
@needs_simgrid
def test_cli_writes_a_row_per_point(tmp_path):
    out = tmp_path / "s.csv"
    done = subprocess.run([sys.executable, "-m", "ssgd.tools.simgrid_replay", "--all", "--models", "resnet20",
                           "--schemes", "gtopk", "--P", "2", "4", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["network"], r["P"]) for r in rows] == [("1GbE", "2"), ("1GbE", "4"), ("10GbE", "2"), ("10GbE", "4")]
    assert list(rows[0]) == list(sr.COLUMNS)
    assert all(0 < float(r["efficiency"]) < 1 for r in rows)
