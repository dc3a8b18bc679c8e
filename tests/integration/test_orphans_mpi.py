"""No orphans under real MPI and torch.distributed (docs/faults.md, third matrix): `kill -9` of the
launcher takes mpiexec/prterun and every rank with it within 10 s."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ssgd.errors import ConfigError
from ssgd.run.launch_mpi import descendants, mpiexec_path

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("backend", ["mpi", "torch"])
def test_kill_9_of_the_launcher_leaves_no_rank(backend, tmp_path):
    if backend == "mpi":
        try:
            mpiexec_path()
        except ConfigError as err:
            pytest.skip(f"no mpiexec: {err}")
    run = tmp_path / "run"
    launcher = subprocess.Popen([sys.executable, str(ROOT / "src" / "train.py"), f"backend={backend}",
                                 "cluster.world_size=2", "trainer.epochs=1000", "trainer.log_every=1",
                                 "wandb.mode=disabled", f"hydra.run.dir={run}"], cwd=ROOT,
                                stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        metrics = run / "metrics.jsonl"
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
            break
        time.sleep(0.2)
    below = descendants(launcher.pid)
    assert len(below) >= 2, "the ranks never started"
    launcher.kill()
    launcher.wait()
    start = time.monotonic()
    while any(_alive(p) for p in below) and time.monotonic() - start < 10.0:
        time.sleep(0.1)
    left = [p for p in below if _alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left, f"{len(left)} of {len(below)} processes outlived their launcher by 10 s"
    print(f"{backend}: all {len(below)} gone {time.monotonic() - start:.1f} s after kill -9")


def test_a_stopped_rank_ends_the_mpi_job_within_its_timeout(tmp_path):
    """SIGSTOP of one rank (a frozen process): its heartbeat goes stale while the other rank waits in a
    collective, and the launcher ends the job after mpi.timeout_s with one line naming the rank and host."""
    import json
    import socket

    try:
        mpiexec_path()
    except ConfigError as err:
        pytest.skip(f"no mpiexec: {err}")
    run, timeout_s = tmp_path / "run", 3
    launcher = subprocess.Popen([sys.executable, str(ROOT / "src" / "train.py"), "backend=mpi",
                                 "cluster.world_size=2", "trainer.epochs=1000", "trainer.log_every=1",
                                 f"mpi.timeout_s={timeout_s}", "wandb.mode=disabled", f"hydra.run.dir={run}"],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    beat = run / "mpi" / "heartbeat" / "rank1.json"
    deadline = time.monotonic() + 180
    record: dict = {}
    while time.monotonic() < deadline and launcher.poll() is None:
        try:
            record = json.loads(beat.read_text())
        except (OSError, ValueError):
            record = {}
        if record.get("step", 0) >= 2:                  # training: the rank beats its steps
            break
        time.sleep(0.2)
    below = descendants(launcher.pid)
    assert record["rank"] == 1 and record["host"] == socket.gethostname() and record["pid"] in below, record
    assert record["phase"] == "compute" or record["phase"].startswith("collective:"), record
    os.kill(record["pid"], signal.SIGSTOP)
    start = time.monotonic()
    try:
        _, stderr = launcher.communicate(timeout=timeout_s + 20)
        took = time.monotonic() - start
    finally:
        for p in below:
            if _alive(p):
                os.kill(p, signal.SIGCONT)
                os.kill(p, signal.SIGKILL)
        if launcher.poll() is None:
            launcher.kill()
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert launcher.returncode not in (0, None), stderr
    assert len(lines) == 1 and lines == [line for line in stderr.splitlines() if line.strip()], stderr
    assert lines[0].startswith(f"error: backend=mpi: rank 1 on host {socket.gethostname()} made no progress for "
                               f"{timeout_s} s (mpi.timeout_s={timeout_s}): its last heartbeat (pid {record['pid']})")
    last = re.search(r"was at step (\d+), phase (compute|collective:\w+);", lines[0])
    assert last and int(last.group(1)) >= record["step"], lines[0]
    assert took < timeout_s + 8, f"the job ended {took:.1f} s after the SIGSTOP"
    time.sleep(0.5)
    assert not [p for p in below if _alive(p)], "a rank outlived the job"
    print(f"stopped rank: job ended {took:.1f} s after SIGSTOP (mpi.timeout_s={timeout_s}): {lines[0]}")
