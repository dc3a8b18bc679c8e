"""scripts/slurm/ without a cluster: shell syntax, and bad input stops with one line and exit 2 before any job
work. (The scripts' real runs are in tests/slurm/, against a single-node SLURM.)"""
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SLURM = ROOT / "scripts" / "slurm"
SBATCH = sorted(SLURM.glob("*.sbatch"))


def bash(*argv: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return subprocess.run(["bash", *argv], env={**clean, **env}, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("script", [*SBATCH, SLURM / "prepare_run.sh", SLURM / "cluster.sh"], ids=lambda p: p.name)
def test_shell_syntax(script):
    proc = bash("-n", str(script))
    assert proc.returncode == 0, proc.stderr


def test_the_examples_exist_for_mpirun_and_srun():
    assert {p.name for p in SBATCH} >= {"mpi_mpirun.sbatch", "mpi_srun.sbatch"}


@pytest.mark.parametrize("script", SBATCH, ids=lambda p: p.name)
def test_outside_a_job_the_examples_refuse_to_start(script):
    proc = bash(str(script), SSGD_ROOT=str(ROOT))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert proc.stderr.startswith("error: run this through sbatch")


JOB = {"SLURM_JOB_ID": "1", "SLURM_NTASKS": "2", "SLURM_SUBMIT_DIR": str(ROOT)}


@pytest.mark.parametrize("override, message", [
    ("cluster.world_size=3", "error: cluster.world_size=3 but this job has 2 tasks: set the ranks with sbatch --ntasks"),
    ("backend=thread", "error: backend=thread: set by this script"),
    ("hydra.run.dir=x", "error: hydra.run.dir=x: set by this script"),
])
@pytest.mark.parametrize("script", SBATCH, ids=lambda p: p.name)
def test_overrides_that_contradict_the_job_are_refused(script, override, message):
    proc = bash(str(script), "compressor=topk", override, **JOB)
    assert proc.returncode == 2 and proc.stderr.startswith(message), proc.stderr
    assert proc.stdout == ""        # refused before src/train.py ran


def test_a_missing_interpreter_is_named(tmp_path):
    proc = bash(str(SBATCH[0]), **JOB, SSGD_PYTHON=str(tmp_path / "python"))
    assert proc.returncode == 2 and f"SSGD_PYTHON={tmp_path / 'python'}: not an executable" in proc.stderr


def test_cluster_script_usage_and_status_when_down(tmp_path):
    usage = bash(str(SLURM / "cluster.sh"), "start")
    assert usage.returncode == 2 and "usage:" in usage.stderr
    env = bash(str(SLURM / "cluster.sh"), "env", SSGD_SLURM_DIR=str(tmp_path))
    assert env.stdout.strip() == f"export SLURM_CONF={tmp_path}/slurm.conf"
    status = bash(str(SLURM / "cluster.sh"), "status", SSGD_SLURM_DIR=str(tmp_path / "none"))
    assert status.returncode == 1 and "not up" in status.stdout
    assert "error" not in status.stderr, status.stderr     # "not up" is the answer, not a failure of the script
    down = bash(str(SLURM / "cluster.sh"), "down", SSGD_SLURM_DIR=str(tmp_path / "none"))   # nothing to stop
    assert down.returncode == 0 and "stopped" not in down.stdout


FAKE_PY = """#!/usr/bin/env bash
# records its arguments and writes the worker config where hydra.run.dir says, like src/train.py mpi.launch=false
printf '%s\\n' "$@" > "$SSGD_ARGS"
for a in "$@"; do case $a in hydra.run.dir=*) mkdir -p "${a#*=}"; touch "${a#*=}/worker_config.yaml" ;; esac; done
"""


@pytest.mark.parametrize("overrides, resume", [((), "trainer.resume=auto"),
                                               (("trainer.resume=/x/checkpoint.pt",), "trainer.resume=/x/checkpoint.pt")])
def test_a_job_resumes_its_own_checkpoint_unless_told_otherwise(tmp_path, overrides, resume):
    """A requeued job (same id, same run directory) must continue: prepare_run.sh passes trainer.resume=auto."""
    py = tmp_path / "python"
    py.write_text(FAKE_PY)
    py.chmod(0o755)
    proc = bash("-c", f'source {SLURM / "prepare_run.sh"} "$@"', "prepare", *overrides, **JOB, SLURM_JOB_NODELIST="n1",
                SSGD_PYTHON=str(py), SSGD_RUN_DIR=str(tmp_path / "run"), SSGD_ARGS=str(tmp_path / "args"),
                SLURM_RESTART_COUNT="1")
    assert proc.returncode == 0, proc.stderr
    args = (tmp_path / "args").read_text().splitlines()
    assert [a for a in args if a.startswith("trainer.resume=")] == [resume]
    assert "restart 1: continuing from" in proc.stdout


@pytest.mark.slow
def test_a_requeued_job_is_accepted_into_its_own_run_directory(tmp_path):
    """The real src/train.py: a run directory that holds a checkpoint (the first attempt's) takes the requeued
    job's worker config (was: exit 2, "already holds a run")."""
    run = tmp_path / "run"
    first = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "src" / "train.py"),
                            "trainer.max_steps=2", "trainer.checkpoint_every_steps=2", "wandb.mode=disabled",
                            "cluster.world_size=2", f"hydra.run.dir={run}"], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
    assert first.returncode == 0 and (run / "checkpoint.pt").is_file(), first.stderr
    proc = bash("-c", f'source {SLURM / "prepare_run.sh"} wandb.mode=disabled', **JOB, SLURM_JOB_NODELIST="n1",
                SSGD_RUN_DIR=str(run))
    assert proc.returncode == 0, proc.stderr
    assert (run / "worker_config.yaml").is_file()


def train(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return subprocess.run([str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "src" / "train.py"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=180, env={**clean, **env})


@pytest.mark.slow
@pytest.mark.parametrize("multirun", [False, True], ids=["run", "multirun"])
def test_a_restarted_slurm_job_resumes_without_being_told(tmp_path, multirun):
    """SLURM_RESTART_COUNT > 0 and trainer.resume unset (a submitit_slurm point, or a user's own sbatch script,
    started again by a requeue): the job continues the checkpoint in its folder; here the first start
    finished, so the second says so and changes nothing. Without the restart count the folder is refused."""
    where = [f"hydra.sweep.dir={tmp_path / 'sweep'}", "-m"] if multirun else [f"hydra.run.dir={tmp_path / 'run'}"]
    args = ["trainer.max_steps=2", "trainer.checkpoint_every_steps=2", "wandb.mode=disabled", "cluster.world_size=2",
            "trainer.progress=false", *where]
    first = train(*args)
    assert first.returncode == 0, first.stderr[-2000:]
    summary = next(tmp_path.rglob("summary.json"))
    before = summary.read_bytes()
    refused = train(*args)
    assert refused.returncode == 2 and "trainer.resume=auto" in refused.stderr, refused.stderr[-2000:]
    again = train(*args, SLURM_RESTART_COUNT="1")
    assert again.returncode == 0, again.stderr[-2000:]
    out = again.stdout + again.stderr
    assert "SLURM restart 1 of this job: trainer.resume=auto" in out and "already finished at step 2" in out, out
    assert summary.read_bytes() == before


@pytest.mark.parametrize("script", SBATCH, ids=lambda p: p.name)
def test_the_examples_ask_for_a_signal_before_the_kill_and_a_requeue(script):
    text = script.read_text()
    assert "#SBATCH --signal=" in text and "USR1@" in text and "#SBATCH --requeue" in text
