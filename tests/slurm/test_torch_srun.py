"""backend=torch under a real (single-node) SLURM: `srun -n 2` ranks, and srun + torchrun (scripts/slurm/torch_srun.sbatch).

Each job trains FNN-3 for 3 steps on the embedded digits on 2 gloo ranks and must leave the run's outputs. Needs the
single-node cluster (`make slurm-up`); skipped with the reason otherwise (see conftest.py).
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import ROOT, SlurmCluster
from .test_slurm_launch import RUN, check_run

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.mark.parametrize("torchrun", [False, True], ids=["srun", "srun+torchrun"])
def test_torch_srun_example_runs_two_ranks(torchrun, slurm_cluster: SlurmCluster, tmp_path):
    run_dir = tmp_path / "run"
    job = slurm_cluster.sbatch(["--ntasks=2", str(ROOT / "scripts" / "slurm" / "torch_srun.sbatch"),
                                "compressor=gtopk", *RUN], tmp_path / "job.out",
                               env={"SSGD_RUN_DIR": str(run_dir), "SSGD_TORCHRUN": "1" if torchrun else "0"})
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), job.output[-3000:]
    assert "2 tasks on 1 node(s)" in job.output
    assert ("torch.distributed.run --nnodes=1 --nproc-per-node=2" in job.output) == torchrun
    check_run(run_dir, "gtopk", world_size=2)
    assert json.loads((run_dir / "summary.json").read_text())["backend"] == "torch"


def test_a_bare_srun_of_the_worker_without_a_step_is_refused(slurm_cluster: SlurmCluster, tmp_path):
    """The batch script itself has SLURM_PROCID but is no task: the worker says so instead of waiting for peers."""
    job = slurm_cluster.sbatch(["--ntasks=1", "--wrap", f"{ROOT / '.venv' / 'bin' / 'python'} -m ssgd.run.worker torch "
                                f"{tmp_path / 'worker_config.yaml'}"], tmp_path / "job.out", timeout=60)
    assert (job.state, job.exit_code) == ("FAILED", "2:0"), job.output
    assert "error: backend=torch: SLURM_PROCID is set but SLURM_STEP_ID is not" in job.output


def test_an_emitted_sbatch_script_runs_its_ranks_and_refuses_another_size(slurm_cluster: SlurmCluster, tmp_path):
    """`dist.emit=sbatch` (docs/slurm.md): the printed script, submitted from another directory, trains the run;
    submitted with a different --ntasks it stops with its one line and exit 2."""
    run_dir = tmp_path / "run"
    emitted = subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), "backend=torch", "dist.emit=sbatch",
                              "cluster.world_size=2", "compressor=gtopk", *RUN, f"hydra.run.dir={run_dir}"],
                             env=slurm_cluster.env, capture_output=True, text=True, timeout=300)
    assert emitted.returncode == 0, emitted.stderr
    script = tmp_path / "job.sbatch"
    script.write_text(emitted.stdout)
    job = slurm_cluster.sbatch([str(script)], tmp_path / "job.out", cwd=tmp_path)
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), job.output[-3000:]
    check_run(run_dir, "gtopk", world_size=2)
    assert json.loads((run_dir / "summary.json").read_text())["backend"] == "torch"
    wrong = slurm_cluster.sbatch(["--ntasks=1", str(script)], tmp_path / "wrong.out", cwd=tmp_path, timeout=60)
    assert (wrong.state, wrong.exit_code) == ("FAILED", "2:0"), wrong.output
    assert "error: this job has 1 tasks; the run has cluster.world_size=2 (sbatch --ntasks=2)" in wrong.output
