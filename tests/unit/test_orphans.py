"""No orphans (docs/faults.md, third matrix): a child of a launcher that dies by SIGKILL is gone within
10 s, through PR_SET_PDEATHSIG (mpiexec) or the rank's parent watchdog; SIGHUP stops a threads run with a
checkpoint, like SIGTERM."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from procs import alive

from ssgd.loop.stop import STOP_SIGNALS, exit_status

ROOT = Path(__file__).resolve().parents[2]
SRC = str(ROOT / "src")


def gone_within(pid: int, limit_s: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        if not alive(pid):
            return time.monotonic() - start
        time.sleep(0.1)
    return None


LAUNCHER = """
import subprocess, sys, time
sys.path.insert(0, {src!r})
from ssgd.run.orphans import die_with_parent_preexec
child = {child!r}
kw = {{"preexec_fn": die_with_parent_preexec()}} if {preexec} else {{}}
p = subprocess.Popen([sys.executable, "-c", child], **kw)
print(p.pid, flush=True)
time.sleep(600)
"""
WATCHED = """
import signal, sys, time
sys.path.insert(0, {src!r})
from ssgd.run.orphans import watch_parent
if {ignore_term}:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # a rank stuck in a collective never reaches its handler
watch_parent(poll_s=0.2)
time.sleep(600)
"""


def orphan_after_kill(child: str, preexec: bool) -> float | None:
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER.format(src=SRC, child=child, preexec=preexec)],
                                stdout=subprocess.PIPE, text=True)
    pid = int(launcher.stdout.readline())
    time.sleep(1.0)                                       # the child is up (and watching)
    assert alive(pid)
    launcher.kill()
    launcher.wait()
    took = gone_within(pid, 10.0)
    if took is None:
        os.kill(pid, signal.SIGKILL)
    return took


def test_pdeathsig_stops_a_child_when_its_launcher_is_killed():
    assert orphan_after_kill("import time; time.sleep(600)", preexec=True) is not None


def test_without_the_hook_the_child_is_orphaned():
    """The control: the same launcher without preexec leaves its child running (so the test above can fail)."""
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER.format(src=SRC, child="import time; time.sleep(30)",
                                                                       preexec=False)],
                                stdout=subprocess.PIPE, text=True)
    pid = int(launcher.stdout.readline())
    launcher.kill()
    launcher.wait()
    time.sleep(1.0)
    try:
        assert alive(pid)
    finally:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize("ignore_term", [False, True])
def test_a_watched_rank_stops_within_10_s_of_its_launchers_death(ignore_term):
    took = orphan_after_kill(WATCHED.format(src=SRC, ignore_term=ignore_term), preexec=False)
    assert took is not None and took < 10.0


def test_sighup_is_a_stop_signal_with_status_129():
    assert signal.SIGHUP in STOP_SIGNALS and exit_status(signal.SIGHUP) == 129


@pytest.mark.slow
def test_sighup_checkpoints_a_threads_run(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(ROOT / "src" / "train.py"), "trainer.epochs=1000",
                             "trainer.log_every=1", "wandb.mode=disabled", f"hydra.run.dir={run}"],
                            cwd=ROOT, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        metrics = run / "metrics.jsonl"
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 129, err
    assert "interrupted by SIGHUP at step" in err and (run / "checkpoint.pt").is_file()
    assert not (run / "summary.json").exists()
