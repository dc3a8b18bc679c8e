"""SLURM for real: the sbatch examples and a Hydra sweep through hydra/launcher=submitit_slurm.

Each job trains FNN-3 for 3 steps on the embedded digits and must leave the run's outputs. Needs the
single-node cluster (`make slurm-up`); skipped with the reason otherwise (see conftest.py).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import ROOT, SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
RUN = ["trainer.max_steps=3", "wandb.mode=disabled", "trainer.progress=false"]


def timeless(summary: dict) -> dict:
    """A summary without the keys measured on this host's clock (docs/metrics.md: clock `here`): what a resumed
    run must share with an uninterrupted one."""
    from ssgd.utils.metric_names import METRICS

    here = {k for k, m in METRICS.items() if m.clock == "here"}
    assert {"wall_s", "throughput/here", "time/step_s"} <= here
    return {k: v for k, v in summary.items() if k not in here}


def check_run(run_dir: Path, compressor: str, world_size: int) -> None:
    """The run finished: summary.json with its scheme, P and 3 steps; metrics.jsonl with training records."""
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["compressor"], summary["world_size"], summary["steps"]) == (compressor, world_size, 3), summary
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows and rows[-1]["step"] == 3 and all("train/loss" in r for r in rows if "val/acc" not in r)


@pytest.mark.parametrize("example", ["mpi_mpirun", "mpi_srun"])
def test_sbatch_example_runs_two_mpi_ranks(example, slurm_cluster: SlurmCluster, tmp_path):
    if example == "mpi_srun" and slurm_cluster.pmix is not None:
        pytest.skip(f"srun --mpi=pmix does not start here: {slurm_cluster.pmix}")
    run_dir = tmp_path / "run"
    job = slurm_cluster.sbatch(["--ntasks=2", str(ROOT / "scripts" / "slurm" / f"{example}.sbatch"),
                                "compressor=gtopk", *RUN],
                               tmp_path / "job.out", env={"SSGD_RUN_DIR": str(run_dir)})
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), job.output[-3000:]
    assert "2 tasks on 1 node(s)" in job.output
    check_run(run_dir, "gtopk", world_size=2)


def test_sbatch_example_refuses_a_world_size_other_than_its_tasks(slurm_cluster: SlurmCluster, tmp_path):
    job = slurm_cluster.sbatch(["--ntasks=1", str(ROOT / "scripts" / "slurm" / "mpi_mpirun.sbatch"),
                                "cluster.world_size=4"], tmp_path / "job.out", timeout=60)
    assert (job.state, job.exit_code) == ("FAILED", "2:0"), job.output
    assert "error: cluster.world_size=4 but this job has 1 tasks: set the ranks with sbatch --ntasks" in job.output


def test_submitit_slurm_sweep_runs_one_job_per_run(slurm_cluster: SlurmCluster, tmp_path):
    """The default hydra.sweep.dir (no override), as a user runs it: each point is its own SLURM job, a new
    process, and every one of them writes into the one sweep folder the submitting process chose."""
    proc = slurm_cluster.run([sys.executable, str(ROOT / "src" / "train.py"), "-m", "hydra/launcher=submitit_slurm",
                              f"hydra.launcher.partition={slurm_cluster.partition}", "hydra.launcher.cpus_per_task=1",
                              "hydra.launcher.timeout_min=5", "compressor=topk,gtopk", *RUN], timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweeps = sorted((tmp_path / "multirun").glob("*/*"))
    assert len(sweeps) == 1, sweeps        # one sweep folder, not one per job
    sweep = sweeps[0]
    runs = {json.loads(p.read_text())["compressor"]: p.parent for p in sweep.glob("*/summary.json")}
    assert sorted(runs) == ["gtopk", "topk"], sorted(sweep.iterdir())
    for compressor, run_dir in runs.items():
        check_run(run_dir, compressor, world_size=4)
    # each run was its own SLURM array task: submitit kept one log folder per task, with the run's report
    logs = sorted((sweep / ".submitit").glob("*_[01]/*_0_log.out"))
    assert len(logs) == 2 and all("final val accuracy" in log.read_text() for log in logs), logs


def test_a_requeued_job_continues_from_its_checkpoint(slurm_cluster: SlurmCluster, tmp_path):
    """`scontrol requeue` of a running mpi_mpirun.sbatch job (what preemption does): the ranks checkpoint at a
    step boundary, SLURM starts the job again with the same id and run directory, prepare_run.sh passes
    trainer.resume=auto, and the run ends with every step logged once and the summary of an uninterrupted
    job (every key but the wall-clock ones)."""
    script = str(ROOT / "scripts" / "slurm" / "mpi_mpirun.sbatch")
    overrides = ["compressor=gtopk", "trainer.max_steps=300", "trainer.log_every=1", "wandb.mode=disabled",
                 "trainer.progress=false"]
    run_dir, out = tmp_path / "run", tmp_path / "job.out"
    job_id = slurm_cluster.submit(["--ntasks=2", "--open-mode=append", script, *overrides], out,
                                  env={"SSGD_RUN_DIR": str(run_dir)})

    def steps() -> list[int]:
        path = run_dir / "metrics.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return [r["step"] for r in rows if "train/loss" in r]

    deadline = time.monotonic() + 150
    while len(steps()) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert 3 <= len(steps()) < 300, "the job never got to training (or finished before the requeue)"
    requeued = slurm_cluster.run(["scontrol", "requeue", job_id], timeout=30)
    assert requeued.returncode == 0, requeued.stderr
    job = slurm_cluster.wait(job_id, out, timeout=420)
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), job.output[-3000:]
    assert "DUE TO JOB REQUEUE" in job.output, job.output[-3000:]          # it was stopped once, mid-run
    assert f"restart 1: continuing from {run_dir / 'checkpoint.pt'}" in job.output
    assert steps() == list(range(1, 301))     # every step once: the second start continued the first's checkpoint
    reference = slurm_cluster.sbatch(["--ntasks=2", script, *overrides], tmp_path / "ref.out",
                                     env={"SSGD_RUN_DIR": str(tmp_path / "ref")}, timeout=300)
    assert (reference.state, reference.exit_code) == ("COMPLETED", "0:0"), reference.output[-3000:]

    assert timeless(json.loads((run_dir / "summary.json").read_text())) == \
        timeless(json.loads((tmp_path / "ref" / "summary.json").read_text()))


def test_a_requeued_submitit_slurm_point_continues_from_its_checkpoint(slurm_cluster: SlurmCluster, tmp_path):
    """`scontrol requeue` of a running sweep point under hydra/launcher=submitit_slurm: SLURM starts the same
    job again (SLURM_RESTART_COUNT=1), the point resumes its own checkpoint without trainer.resume on the
    command line, the sweep ends with exit 0, every step is logged once, and the point's summary equals an
    uninterrupted local run's (every key but the wall-clock ones)."""
    overrides = ["compressor=gtopk", "trainer.max_steps=300", "trainer.log_every=1", "wandb.mode=disabled",
                 "trainer.progress=false"]
    sweep_proc = subprocess.Popen(
        [sys.executable, str(ROOT / "src" / "train.py"), "-m", "hydra/launcher=submitit_slurm",
         f"hydra.launcher.partition={slurm_cluster.partition}", "hydra.launcher.cpus_per_task=1",
         "hydra.launcher.timeout_min=10", *overrides],
        cwd=tmp_path, env=slurm_cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def metrics() -> Path | None:
            return next(iter(tmp_path.glob("multirun/*/*/0-*/metrics.jsonl")), None)

        def steps() -> list[int]:
            path = metrics()
            rows = [json.loads(line) for line in path.read_text().splitlines()] if path else []
            return [r["step"] for r in rows if "train/loss" in r]

        deadline = time.monotonic() + 150
        while len(steps()) < 3 and time.monotonic() < deadline and sweep_proc.poll() is None:
            time.sleep(0.2)
        assert 3 <= len(steps()) < 300, "the point never got to training (or finished before the requeue)"
        jobs = [p.name for p in tmp_path.glob("multirun/*/*/.submitit/*") if p.is_dir()]  # one point: no array
        assert len(jobs) == 1, jobs
        requeued = slurm_cluster.run(["scontrol", "requeue", jobs[0]], timeout=30)
        assert requeued.returncode == 0, requeued.stderr
        output, _ = sweep_proc.communicate(timeout=420)
    finally:
        if sweep_proc.poll() is None:
            sweep_proc.kill()
            slurm_cluster.run(["scancel", "--name", "train"], timeout=30)
    assert sweep_proc.returncode == 0, output[-3000:]
    run_dir = metrics().parent
    assert not (run_dir / "error.txt").exists(), (run_dir / "error.txt").read_text()
    log = next(run_dir.parent.glob(".submitit/*/*_0_log.out")).read_text()
    assert "SLURM restart 1 of this job: trainer.resume=auto" in log, log[-3000:]
    assert steps() == list(range(1, 301))     # every step once: the second start continued the first's checkpoint
    reference = subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), f"hydra.run.dir={tmp_path / 'ref'}",
                                *overrides], cwd=tmp_path, env=slurm_cluster.env, capture_output=True, text=True,
                               timeout=300)
    assert reference.returncode == 0, reference.stderr[-3000:]

    assert timeless(json.loads((run_dir / "summary.json").read_text())) == \
        timeless(json.loads((tmp_path / "ref" / "summary.json").read_text()))
