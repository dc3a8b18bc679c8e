"""`dist.emit=sbatch` (issue 25, item 3): a backend=torch run prints a SLURM batch script for its ranks instead of
starting them. The script is valid bash, asks SLURM for one task per rank (and a GPU per task with
device=cuda), runs exactly the worker command of the saved config under srun, refuses a job of another size,
and writing it touches no device (docs/slurm.md, "An sbatch script from the config")."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ssgd.errors import ConfigError
from ssgd.run import build, launch_torch
from tests.conftest import make_cfg

ROOT = Path(__file__).resolve().parents[2]
HOUSE = ROOT / "scripts" / "slurm" / "torch_srun.sbatch"


def sbatch_options(text: str) -> dict[str, str]:
    """The #SBATCH options SLURM reads: those before the first line that is neither a comment nor blank."""
    options = {}
    for line in text.splitlines()[1:]:
        if line.strip() and not line.startswith("#"):
            break
        found = re.match(r"#SBATCH\s+--([\w-]+)(?:=(\S+))?", line)
        if found:
            options[found.group(1)] = found.group(2) or ""
    return options


def no_device(monkeypatch):
    """Make any look at a CUDA device fail the test, so passing proves the path never asks."""
    def touched(name: str):
        def fail(*args, **kwargs):
            raise AssertionError(f"dist.emit=sbatch called torch.cuda.{name}")
        return fail
    for name in ("is_available", "device_count", "current_device", "set_device", "init"):
        monkeypatch.setattr(torch.cuda, name, touched(name))


def emit(tmp_path: Path, capsys, *overrides: str) -> tuple[str, Path]:
    cfg = make_cfg("backend=torch", "dist.emit=sbatch", *overrides)
    spec = build.spec(cfg)
    build.preflight(spec)
    assert launch_torch.run(cfg, tmp_path) == 0
    printed = capsys.readouterr().out
    return printed, tmp_path / launch_torch.SBATCH_FILE


@pytest.mark.parametrize("P, device", [(1, "cpu"), (6, "cpu"), (8, "cuda")])
def test_the_script_is_bash_with_one_task_per_rank_and_needs_no_device(tmp_path, capsys, monkeypatch, P, device):
    no_device(monkeypatch)
    printed, saved = emit(tmp_path, capsys, f"cluster.world_size={P}", f"device={device}")
    assert printed == saved.read_text()                   # stdout is the script and nothing else
    check = subprocess.run(["bash", "-n", str(saved)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    options = sbatch_options(printed)
    assert options["ntasks"] == str(P)
    assert ("gpus-per-task" in options) == (device == "cuda")
    if device == "cuda":
        assert options["gpus-per-task"] == "1"
    assert (tmp_path / "worker_config.yaml").is_file()
    assert not (tmp_path / "summary.json").exists()        # nothing trained


def test_the_script_keeps_the_house_sbatch_lines():
    """The oracle for the fixed lines is scripts/slurm/torch_srun.sbatch (the tested example script)."""
    house = sbatch_options(HOUSE.read_text())
    emitted = sbatch_options(launch_torch.sbatch_script(make_cfg("backend=torch", "cluster.world_size=3"),
                                                        Path("w.yaml")))
    for key in ("job-name", "cpus-per-task", "time", "output", "signal"):
        assert emitted[key] == house[key], key


@pytest.mark.parametrize("resume, requeue", [("trainer.resume=auto", True), ("trainer.resume=null", False)])
def test_requeue_only_when_a_requeued_job_resumes(resume, requeue):
    text = launch_torch.sbatch_script(make_cfg("backend=torch", resume), Path("w.yaml"))
    assert ("requeue" in sbatch_options(text)) == requeue


def fake_job(tmp_path: Path, ntasks: str) -> dict[str, str]:
    """A SLURM job's environment with a fake `srun` that records its arguments instead of starting tasks."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    srun = bin_dir / "srun"
    srun.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > {tmp_path / "srun.args"}\n'
                    f'printf "%s\\n" "$PYTHONPATH" > {tmp_path / "srun.pythonpath"}\n')
    srun.chmod(0o755)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return {**clean, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_ID": "7",
            "SLURM_NTASKS": ntasks}


def test_inside_a_job_it_runs_the_saved_worker_command_under_srun(tmp_path, capsys):
    printed, saved = emit(tmp_path, capsys, "cluster.world_size=3")
    proc = subprocess.run(["bash", str(saved)], env=fake_job(tmp_path, "3"), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    argv = (tmp_path / "srun.args").read_text().splitlines()
    config = (tmp_path / "worker_config.yaml").resolve()
    assert argv == ["--kill-on-bad-exit=1", *launch_torch.worker_command(config)]
    assert (tmp_path / "srun.pythonpath").read_text().strip().split(os.pathsep)[0] == str(ROOT / "src")


def test_a_job_of_another_size_stops_with_one_line_and_exit_2(tmp_path, capsys):
    printed, saved = emit(tmp_path, capsys, "cluster.world_size=3")
    proc = subprocess.run(["bash", str(saved)], env=fake_job(tmp_path, "4"), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == ("error: this job has 4 tasks; the run has cluster.world_size=3 "
                           "(sbatch --ntasks=3)\n")
    assert not (tmp_path / "srun.args").exists()


def test_emit_sbatch_prints_only_and_command_still_launches():
    assert build.prints_only(build.spec(make_cfg("backend=torch", "dist.emit=sbatch")).config)
    assert not build.prints_only(build.spec(make_cfg("backend=torch", "dist.emit=command")).config)


@pytest.mark.parametrize("backend", ["thread", "mpi"])
def test_emit_sbatch_is_refused_outside_backend_torch(backend):
    with pytest.raises(ConfigError, match=f"dist.emit=sbatch needs backend=torch \\(got backend={backend}\\)"):
        build.spec(make_cfg(f"backend={backend}", "dist.emit=sbatch"))


@pytest.mark.slow
def test_from_the_command_line_stdout_is_exactly_the_saved_script(tmp_path):
    """End to end, as a user redirects it (`... dist.emit=sbatch > job.sbatch`), with no GPU visible."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), "backend=torch", "dist.emit=sbatch",
                           "device=cuda", "cluster.world_size=2", "wandb.mode=disabled", f"hydra.run.dir={run_dir}"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (run_dir / launch_torch.SBATCH_FILE).read_text()
    assert sbatch_options(proc.stdout)["ntasks"] == "2"
