"""No orphans under real MPI and torch.distributed (docs/faults.md, third matrix): `kill -9` of the
launcher takes mpiexec/prterun and every rank with it within 10 s."""
from __future__ import annotations

import os
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
