"""Faults on a real network (docs/testbed.md, "Faults"): one host's rank killed, or one host's link taken down
(`ip link set eth0 down` inside its namespace) in the middle of a multi-host run. Each must end the job
non-zero within 60 s with a line naming the host, and leave no process in any host.

The run trains until stopped (trainer.max_steps large); the fault comes once metrics.jsonl has a record, on
host 3 (rank 2). Needs the testbed with >= 3 hosts (`make testbed-up P=4`); skipped with the reason otherwise.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import ROOT, TestbedHosts

# serial: a downed link must not meet another test's run on the same hosts (make test runs these alone)
pytestmark = [pytest.mark.testbed, pytest.mark.slow, pytest.mark.serial]
HOST = 3                 # the faulty host: namespace ssgdtb3, hostname tb3, 10.98.0.3, rank 2
LIMIT_S = 60.0


def namespace_pids(i: int) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", f"ssgdtb{i}"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def rank_pid(i: int) -> int:
    """The training rank's pid in host i (the python process that is not Open MPI's daemon)."""
    for pid in namespace_pids(i):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(b"worker_" in part for part in cmd) and not any(b"prted" in part for part in cmd):
            return pid
    raise AssertionError(f"no rank found in host {i}")


def run_with_fault(tmp_path: Path, backend: str, fault: str, *overrides: str) -> tuple[int, str, float]:
    """Start a long run on the testbed, inject `fault` ('kill' or 'link') on HOST once it trains; returns the
    exit status, stderr and the seconds from the fault to the exit."""
    run_dir = tmp_path / f"{backend}-{fault}"
    env = {**os.environ, "WANDB_SILENT": "true"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "src" / "train.py"), f"hydra.run.dir={run_dir}",
                             f"backend={backend}", "cluster=testbed", "cluster.world_size=4", "compressor=gtopk",
                             "trainer.max_steps=1000000", "trainer.progress=false", "wandb.mode=disabled",
                             *overrides], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=ROOT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not (run_dir / "metrics.jsonl").is_file() or not (run_dir / "metrics.jsonl").stat().st_size:
            assert proc.poll() is None, f"the run ended before the fault: {proc.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "the run did not start training within 180 s"
            time.sleep(0.5)
        t0 = time.monotonic()
        if fault == "kill":
            os.kill(rank_pid(HOST), signal.SIGKILL)
        else:
            subprocess.run(["ip", "-n", f"ssgdtb{HOST}", "link", "set", "eth0", "down"], check=True)
        try:
            _, err = proc.communicate(timeout=LIMIT_S + 30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            pytest.fail(f"{backend} {fault}: still running {LIMIT_S + 30:.0f} s after the fault: {err[-2000:]}")
        return proc.returncode, err, time.monotonic() - t0
    finally:
        subprocess.run(["ip", "-n", f"ssgdtb{HOST}", "link", "set", "eth0", "up"], check=False)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def assert_clean_end(status: int, err: str, seconds: float, named: str) -> None:
    assert status != 0, err[-2000:]
    assert seconds < LIMIT_S, f"ended {seconds:.0f} s after the fault (limit {LIMIT_S:.0f} s)"
    lines = [line for line in err.splitlines() if line.startswith("error:") and named in line]
    assert lines, f"no 'error:' line names {named}:\n{err[-3000:]}"
    time.sleep(1.0)
    left = {i: namespace_pids(i) for i in range(1, 5)}
    assert not any(left.values()), f"processes left in the hosts: {left}"


@pytest.fixture
def four_hosts(testbed: TestbedHosts) -> TestbedHosts:
    if testbed.hosts < 4:
        pytest.skip(f"the testbed has {testbed.hosts} hosts; these drills use 4 (make testbed-up P=4)")
    return testbed


def test_mpi_rank_killed_names_its_host(four_hosts, tmp_path):
    status, err, seconds = run_with_fault(tmp_path, "mpi", "kill")
    assert_clean_end(status, err, seconds, f"rank {HOST - 1} (node tb{HOST})")
    assert "***" not in err, err[-2000:]             # the peers' MPI_ERRORS_ARE_FATAL notice is left out


def test_torch_rank_killed_names_its_host(four_hosts, tmp_path):
    status, err, seconds = run_with_fault(tmp_path, "torch", "kill")
    assert_clean_end(status, err, seconds, f"rank {HOST - 1} on host 10.98.0.{HOST} was killed by signal 9")


def test_torch_link_down_names_the_silent_host(four_hosts, tmp_path):
    status, err, seconds = run_with_fault(tmp_path, "torch", "link", "dist.timeout_s=20")
    assert_clean_end(status, err, seconds, f"host 10.98.0.{HOST} (rank {HOST - 1}) does not answer on the network")


def test_mpi_link_down_names_the_silent_host(four_hosts, tmp_path):
    """Every rank stays alive and blocked (Open MPI never times out): the ranks' heartbeats show no step for
    mpi.timeout_s, and the launcher's probe names the host that does not answer."""
    status, err, seconds = run_with_fault(tmp_path, "mpi", "link", "mpi.timeout_s=20")
    assert_clean_end(status, err, seconds, f"host 10.98.0.{HOST} (rank {HOST - 1}) does not answer on the network")
