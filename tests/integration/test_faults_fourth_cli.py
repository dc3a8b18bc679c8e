"""The fourth fault matrix through `python src/train.py` (docs/faults.md, "Fourth matrix"): a real full disk
(a small tmpfs; root only, else skipped with the reason) at a checkpoint, in metrics.jsonl and in a sweep; a
run directory with letters outside ASCII; SIGINT to a `backend=torch` launcher that inherited SIGINT ignored;
SIGINT in a sweep. In-process cases are in tests/unit/test_faults_fourth.py."""
from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from disks import disk  # noqa: F401  (a fixture)
from test_faults import QUIET, TRAIN, env, one_line, run, train_steps

pytestmark = pytest.mark.slow


def no_leftovers(folder: Path) -> None:
    assert not list(folder.rglob("*.tmp")), list(folder.rglob("*.tmp"))


def test_a_full_disk_at_the_first_checkpoint_is_one_line_and_exit_2(disk, tmp_path):
    """The issue's row 1: a 2 MiB tmpfs, a checkpoint of 4.8 MB (was: exit 1, 58 lines, a 2 MB .tmp left)."""
    run_dir = disk("2m") / "run"
    proc = run(tmp_path, f"hydra.run.dir={run_dir}", "trainer.max_steps=40", "trainer.checkpoint_every_steps=10")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert one_line(proc.stderr).startswith(f"error: {run_dir / 'checkpoint.pt'}: cannot write the checkpoint (No "
                                            "space left on device): it needs about ")
    assert not (run_dir / "checkpoint.pt").exists() and not (run_dir / "summary.json").exists()
    no_leftovers(run_dir)


def test_a_full_disk_in_metrics_is_one_line_and_no_half_record(disk, tmp_path):
    """Row 2: 100 KiB, a record every step (was: exit 1, a traceback at close(), a record cut mid-line)."""
    run_dir = disk("100k") / "run"
    proc = run(tmp_path, f"hydra.run.dir={run_dir}", "trainer.max_steps=300", "trainer.log_every=1")
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = one_line(proc.stderr)
    assert line.startswith(f"error: {run_dir / 'metrics.jsonl'}: cannot write record ") and "No space left" in line
    text = (run_dir / "metrics.jsonl").read_text()
    assert text.endswith("\n") and all(json.loads(r) for r in text.splitlines())
    no_leftovers(run_dir)


def test_a_full_disk_in_a_sweep_fails_each_point_in_one_line_and_the_sweep_goes_on(disk, tmp_path):
    """Row 4: every point runs (or fails in one line: Hydra's own `.hydra/` files included), the table, exit 2
    (was: exit 1, "--- Logging error ---" and chained tracebacks, the last point never ran)."""
    sweep = disk("100k") / "sweep"
    proc = subprocess.run([*TRAIN, "-m", "seed=1,2,3", "trainer.max_steps=120", "trainer.log_every=1", *QUIET,
                           f"hydra.sweep.dir={sweep}"], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=env())
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Logging error" not in proc.stderr, proc.stderr[-3000:]
    assert len([p for p in sweep.iterdir() if p.is_dir()]) == 3              # every point started
    failed = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert failed and all("(No space left on device)" in line for line in failed)
    assert f"sweep: {len(failed)} of 3 points failed" in proc.stderr
    assert "could not be written, a full disk: their lines are below" in proc.stderr    # no error.txt fits
    no_leftovers(sweep)


@pytest.mark.parametrize("backend", ["torch", "mpi"])
def test_a_full_disk_in_a_rank_is_its_one_line_and_exit_2(disk, tmp_path, backend):
    """Row 14: rank 0's checkpoint does not fit; the launcher passes the rank's line and status 2 through (was:
    exit 1, `rank 0 failed: DiskFull: ...`)."""
    run_dir = disk("2m") / "run"
    proc = run(tmp_path, f"hydra.run.dir={run_dir}", f"backend={backend}", "cluster.world_size=2",
               "trainer.max_steps=40", "trainer.checkpoint_every_steps=10", timeout=240)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert one_line(proc.stderr).startswith(f"error: {run_dir / 'checkpoint.pt'}: cannot write the checkpoint (No "
                                            "space left on device): it needs about ")
    assert not (run_dir / "checkpoint.pt").exists()
    no_leftovers(run_dir)


def test_a_full_disk_with_wandb_offline_is_one_line(disk, tmp_path):
    """Row 13: the default wandb.mode=offline; metrics.jsonl meets the full disk first, then closing the wandb run
    must not replace that line (was: exit 1, an OSError traceback from wandb's readable files)."""
    run_dir = disk("400k") / "run"
    proc = subprocess.run([*TRAIN, "trainer.progress=false", f"hydra.run.dir={run_dir}", "trainer.max_steps=300",
                           "trainer.log_every=1"], capture_output=True, text=True, timeout=240, cwd=tmp_path,
                          env=env())
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = one_line(proc.stderr)
    assert line.startswith(f"error: {run_dir / 'metrics.jsonl'}: cannot write record ") and "No space left" in line
    no_leftovers(run_dir)


def test_a_run_directory_with_letters_outside_ascii_works_and_stdout_stays_clean(tmp_path):
    """Row 9 (was: "the override grammar refused a character"), and matplotlib's first-run font cache line
    (was: "generated new fontManager" on stdout): a fresh MPLCONFIGDIR builds the cache."""
    proc = subprocess.run([*TRAIN, *QUIET, "hydra.run.dir=out/r52_ünï日本", "trainer.max_steps=1"],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path,
                          env={**env(), "MPLCONFIGDIR": str(tmp_path / "mpl")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "out" / "r52_ünï日本" / "summary.json").is_file()
    assert (tmp_path / "out" / "r52_ünï日本" / "report.png").is_file()
    assert "fontManager" not in proc.stdout + proc.stderr and (tmp_path / "mpl").is_dir()


def finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[str, str]:
    """The output of `proc` once it ends; one still running after `timeout` s gets SIGTERM (then the test fails)."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        proc.communicate(timeout=60)
        pytest.fail(f"still running {timeout} s after the signal")


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # as a script without job control starts its jobs


@pytest.mark.serial                     # a signal and its deadline: alone on the machine
def test_sigint_to_a_torch_launcher_that_inherited_it_ignored_checkpoints_and_exits_130(tmp_path):
    """Row 12 (was: ignored, the job trained on until SIGKILL)."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([*TRAIN, *QUIET, f"hydra.run.dir={run_dir}", "trainer.epochs=1000", "trainer.log_every=1",
                             "backend=torch", "cluster.world_size=2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path, env=env(), preexec_fn=_ignore_sigint)
    deadline = time.monotonic() + 240
    while len(train_steps(run_dir)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = finish(proc)
    assert proc.returncode == 130, err[-3000:]
    line = one_line(err)
    assert line.startswith("error: interrupted by SIGINT at step "), line
    step = torch.load(run_dir / "checkpoint.pt", weights_only=True)["shared"]["step"]
    assert f"at step {step}:" in line and train_steps(run_dir) == list(range(1, step + 1))


@pytest.mark.serial
def test_sigint_in_a_sweep_says_the_points_after_it_were_not_run(tmp_path):
    """Also seen: a sweep interrupted in a point stopped (130) without saying that the rest were skipped."""
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen([*TRAIN, "-m", "seed=1,2,3", "trainer.epochs=1000", "trainer.log_every=1", *QUIET,
                             f"hydra.sweep.dir={sweep}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env=env())
    deadline = time.monotonic() + 240
    while not any(len(train_steps(p)) >= 2 for p in sweep.glob("0-*")) and proc.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = finish(proc)
    assert proc.returncode == 130, err[-3000:]
    line = one_line(err)
    assert line.startswith("error: interrupted by SIGINT at step ")
    assert line.endswith("(the sweep stopped in its point 0; the points after it were not run)"), line
    assert [p.name[0] for p in sweep.iterdir() if p.is_dir()] == ["0"]


def test_make_faults_replays_rows_and_prints_the_table(tmp_path):
    """`make faults` (scripts/faults.py): two quick rows replayed ok; an unknown row is one line, exit 2."""
    script = [TRAIN[0], str(Path(TRAIN[1]).parents[1] / "scripts" / "faults.py")]
    proc = subprocess.run([*script, "--rows", "m1-1,10"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=env())
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    rows = [line.split()[:2] for line in proc.stdout.splitlines()[1:-1]]
    assert rows == [["m1-1", "ok"], ["10", "ok"]] and "faults: 2 ok, 0 short, 0 skipped" in proc.stdout
    bad = subprocess.run([*script, "--rows", "nope"], capture_output=True, text=True, timeout=60, env=env())
    assert bad.returncode == 2 and one_line(bad.stderr).startswith("error: --rows=nope: no such row of faults.md; allowed: m1-1, ")
