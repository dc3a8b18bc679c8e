"""`make simgrid-calibrate`'s two commands on the testbed: the dense allreduce at P = 2, d = 4M measured by
bench/testbed_comm.py (which runs the ping-pong first when its points are missing or stale), then the fit, whose
platform must load and be physically possible: a positive latency, and at most the link's rate (a bandwidth
factor <= 1; above 0.5 at <= 1 Gbit/s, where the hosts are much faster than the link). Needs the testbed
(`make testbed-up P=2` or more); skipped with the reason otherwise (conftest.py). About 1.5 minutes."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ssgd.tools.simgrid_calibrate import load_platform, tc_rate

from .conftest import DIR, ROOT, TestbedHosts

pytestmark = [pytest.mark.testbed, pytest.mark.slow]


def test_the_calibration_fits_a_possible_platform(testbed: TestbedHosts, tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    measure = [sys.executable, str(ROOT / "bench" / "testbed_comm.py"), "--P", "2", "--sizes", "4M", "--rounds", "1",
               "--out-dir", str(tmp_path)]
    assert subprocess.run(measure, cwd=ROOT, env=env, timeout=600).returncode == 0
    out = tmp_path / "simgrid.yaml"
    fit = [sys.executable, "-m", "ssgd.tools.simgrid_calibrate", "--pingpong", str(DIR / "pingpong.json"),
           "--allreduce", str(tmp_path / f"testbed_{testbed.rate}.json"), "--bw", testbed.rate, "--out", str(out)]
    assert subprocess.run(fit, cwd=ROOT, env=env, timeout=120).returncode == 0
    platform = load_platform(out, hosts=2)
    assert platform.bandwidth == pytest.approx(tc_rate(testbed.rate))
    assert platform.latency > 0 and 0 < platform.tcp.bandwidth_factor <= 1.0
    if tc_rate(testbed.rate) <= 125e6:
        assert platform.tcp.bandwidth_factor > 0.5
