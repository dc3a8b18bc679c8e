"""ssgd.tools.simgrid_calibrate: the fit recovers known platform parameters from synthetic testbed times, the
written cluster YAML reads back as the same Platform, bad inputs give one-line errors; and the closed forms the
fit assumes are what SimGrid computes (when its bindings are importable)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ssgd.perf.platform import Platform, TcpModel
from ssgd.tools import simgrid_calibrate as sc

RATE = 125e6                    # 1 Gbit/s in bytes/s
TRUE_LATENCY, TRUE_FACTOR = 1.2e-5, 0.93
SIZES = [8 * 4**i for i in range(13)]          # the ping-pong's sizes, 8 B .. 128 MiB


def pingpong_times(latency: float = TRUE_LATENCY, factor: float = TRUE_FACTOR) -> list[float]:
    """The testbed's ping-pong as the fit reads it, with known parameters: messages <= 8 KiB take the latency
    alone (they pass in the burst), those >= 2 MiB what SimGrid charges; those in between a tenth of the line
    rate's time (the burst), which the fit must leave out."""
    truth = sc.Fit(latency, factor, ())
    return [2 * latency if n <= sc.SMALL_MAX else truth.predict(sc.Observation(1, n, 1.0, 1.0), RATE) *
            (0.1 if n < sc.LARGE_MIN else 1.0) for n in SIZES]


def synthetic(latency: float = TRUE_LATENCY, factor: float = TRUE_FACTOR) -> tuple[list, list]:
    """(latency observations, rate observations) of the synthetic ping-pong and 2-host dense allreduce."""
    truth = sc.Fit(latency, factor, ())
    small, large = sc.pingpong_observations(SIZES, pingpong_times(latency, factor))
    ar = sc.allreduce_observation(2, sc.CALIBRATION_D, 1.0)
    return small, large + [sc.allreduce_observation(2, sc.CALIBRATION_D, truth.predict(ar, RATE))]


def test_the_fit_recovers_known_latency_and_bandwidth_factor():
    result = sc.fit(*synthetic(), RATE)
    assert result.latency_s == pytest.approx(TRUE_LATENCY, rel=1e-9)
    assert result.bandwidth_factor == pytest.approx(TRUE_FACTOR, rel=1e-9)
    assert (len(result.residuals), result.latency_points) == (6 + 4 + 1, 6)
    assert max(abs(r) for r in result.residuals) < 1e-9


def test_the_burst_regime_of_the_pingpong_is_left_out_and_small_messages_carry_no_bytes():
    small, large = sc.pingpong_observations(SIZES, [1.0] * len(SIZES))
    assert [o.source for o in small] == [f"ping-pong {n} B" for n in SIZES if n <= 8192]
    assert {o.nbytes for o in small} == {0}
    assert [o.nbytes for o in large] == [n for n in SIZES if n >= 2 * 2**20]


def test_the_allreduce_is_two_ring_steps_each_way_at_once():
    obs = sc.allreduce_observation(2, 1000, 0.01)
    assert (obs.messages, obs.nbytes, obs.share) == (2, 2 * 4 * 500, sc.CROSS_TRAFFIC)
    assert sc.allreduce_observation(4, 10, 0.01).nbytes == 6 * 4 * 3          # torch.tensor_split: 3, 3, 2, 2


def test_one_slow_small_message_moves_nothing_and_noise_keeps_the_factor_near():
    """A loaded machine's 20x slow 8-byte round trip (seen on the testbed) leaves the median latency alone; +-3 %
    on every rate observation moves the factor by at most 3 %."""
    small, large = synthetic()
    small[0] = sc.Observation(1, 0, 1.0, 20 * small[0].seconds)
    noisy = [sc.Observation(o.messages, o.nbytes, o.share, o.seconds * (1.03 if i % 2 else 0.97), o.source)
             for i, o in enumerate(large)]
    result = sc.fit(small, noisy, RATE)
    assert result.latency_s == pytest.approx(TRUE_LATENCY, rel=1e-9)
    assert result.bandwidth_factor == pytest.approx(TRUE_FACTOR, rel=0.03)


@pytest.mark.parametrize("small, large, message", [
    ([], [sc.Observation(1, 1e6, 1.0, 1e-2)], "0 latency observations"),
    ([sc.Observation(2, 0, 1.0, 1e-5)], [sc.Observation(1, 1e6, 1.0, 1e-2)], "each one message"),
    ([sc.Observation(1, 0, 1.0, 1e-5)], [sc.Observation(1, 0, 1.0, 1e-2)], "no rate observation"),
    ([sc.Observation(1, 0, 1.0, 1.0)], [sc.Observation(1, 1e6, 1.0, 1e-2)], "no positive bandwidth factor"),
])
def test_unusable_inputs_are_refused_with_one_line(small, large, message):
    with pytest.raises(sc.CalibrationError, match=message):
        sc.fit(small, large, RATE)


def test_the_written_yaml_reads_back_as_the_fitted_platform(tmp_path):
    result = sc.fit(*synthetic(), RATE)
    path = tmp_path / "simgrid.yaml"
    path.write_text(sc.cluster_yaml("testbed-simgrid", 4, 1.0, result, (2.4e-5, 8.4e-9), "synthetic points"))
    got = sc.load_platform(path)
    assert got == Platform(hosts=4, bandwidth=RATE, latency=got.latency,
                           tcp=TcpModel("LV08", 1.0, got.tcp.bandwidth_factor, sc.TCP_GAMMA))
    assert (got.latency, got.tcp.bandwidth_factor) == (pytest.approx(TRUE_LATENCY, rel=1e-5),
                                                       pytest.approx(TRUE_FACTOR, rel=1e-5))
    assert sc.load_platform(path, hosts=2).hosts == 2


def test_load_platform_names_the_file_and_the_missing_key(tmp_path):
    with pytest.raises(sc.CalibrationError, match="no such file"):
        sc.load_platform(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nworld_size: 2\nnetwork: {alpha: 1e-5, beta: 1e-9}\n")
    with pytest.raises(sc.CalibrationError, match="bad.yaml: cluster.network.simgrid lacks"):
        sc.load_platform(bad)


def test_the_command_line_refuses_a_bad_rate_and_a_missing_calibration_row(tmp_path, capsys):
    pp = tmp_path / "pingpong.json"
    pp.write_text(json.dumps({"nbytes": SIZES, "seconds": [1e-3] * len(SIZES), "alpha": 2e-5, "beta": 8e-9}))
    measured = tmp_path / "measured.json"
    measured.write_text(json.dumps({"rows": [{"collective": "dense_allreduce", "P": 4, "d": sc.CALIBRATION_D,
                                              "measured_ms": 100.0}]}))
    common = ["--pingpong", str(pp), "--allreduce", str(measured), "--out", str(tmp_path / "o.yaml")]
    assert sc.main([*common, "--bw", "fast"]) == 2
    assert "--bw 'fast': not a tc rate" in capsys.readouterr().err
    assert sc.main([*common, "--bw", "1gbit"]) == 2
    assert "no dense_allreduce row at P=2" in capsys.readouterr().err


def test_the_command_line_writes_the_fitted_platform(tmp_path):
    _, large = synthetic()
    pp = tmp_path / "pingpong.json"
    pp.write_text(json.dumps({"nbytes": SIZES, "seconds": pingpong_times()}))
    measured = tmp_path / "measured.json"
    measured.write_text(json.dumps({"rows": [{"collective": "dense_allreduce", "P": 2, "d": sc.CALIBRATION_D,
                                              "measured_ms": large[-1].seconds * 1e3}]}))
    out = tmp_path / "sub" / "simgrid.yaml"
    assert sc.main(["--pingpong", str(pp), "--allreduce", str(measured), "--bw", "1gbit", "--out", str(out)]) == 0
    got = sc.load_platform(out)
    assert (got.latency, got.tcp.bandwidth_factor) == (pytest.approx(TRUE_LATENCY, rel=1e-5),
                                                       pytest.approx(TRUE_FACTOR, rel=1e-5))


SIMGRID_CHECK = """
import json, sys, torch
from ssgd.comm.collectives.dense import DenseAllreduce
from ssgd.comm.collectives.gtopk import GTopKAllreduce
from ssgd.comm.executors.simgrid import run_simgrid
from ssgd.comm.executors.simgrid_engine import SimGridMissing
from ssgd.payload import Dense
from ssgd.perf.platform import Platform, TcpModel
try:
    import ssgd.comm.executors.simgrid_engine as e; e.load()
except SimGridMissing:
    print("missing"); sys.exit(0)
p = Platform(hosts=2, bandwidth=125e6, latency=1.2e-5, tcp=TcpModel("LV08", 1.0, 0.93, 4194304.0))
_, logs = run_simgrid(DenseAllreduce(), [Dense(torch.ones(2**20)) for _ in range(2)], p, cpu="none")
print(json.dumps(max(l.clock for l in logs)))
"""


@pytest.mark.slow
def test_the_fits_closed_form_is_what_simgrid_computes():
    """A P = 2 ring allreduce on SimGrid (its own process: one platform per process) takes what the fit's
    `allreduce_observation` charges: CROSS_TRAFFIC and the two latencies per route are SimGrid's."""
    src = str(Path(sc.__file__).resolve().parents[2])
    got = subprocess.run([sys.executable, "-c", SIMGRID_CHECK], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"}).stdout.strip()
    if got == "missing":
        pytest.skip("SimGrid's bindings are not importable (make simgrid)")
    truth = sc.Fit(1.2e-5, 0.93, ())
    assert float(got) == pytest.approx(truth.predict(sc.allreduce_observation(2, 2**20, 1.0), 125e6), rel=1e-6)


def test_the_yaml_reports_the_rate_observations_residual_apart_from_the_latencys():
    small, large = synthetic()
    large[0] = sc.Observation(1, large[0].nbytes, 1.0, large[0].seconds * 0.9)
    text = sc.cluster_yaml("x", 4, 1.0, sc.fit(small, large, RATE), (2e-5, 8e-9), "synthetic points")
    assert "6 ping-pong messages <= 8 KiB" in text and "5 observations, largest relative residual" in text


def test_a_pingpong_file_without_its_points_is_named(tmp_path, capsys):
    pp = tmp_path / "pingpong.json"
    pp.write_text("{}")
    assert sc.main(["--pingpong", str(pp), "--allreduce", str(pp), "--bw", "1gbit", "--out", str(tmp_path / "o")]) == 2
    assert f"{pp}: lacks 'nbytes'" in capsys.readouterr().err
