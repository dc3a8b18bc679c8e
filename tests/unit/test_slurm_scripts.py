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
