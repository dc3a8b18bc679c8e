"""The shared SLURM fixture: `slurm_cluster`, the single-node cluster of scripts/slurm/cluster.sh.

Any test under tests/slurm/ (mark it `pytest.mark.slurm`) asks for it by name:

    pytestmark = pytest.mark.slurm

    def test_something(slurm_cluster, tmp_path):
        job = slurm_cluster.sbatch(["--ntasks=2", "--wrap", "srun hostname"], tmp_path / "out.txt")
        assert job.state == "COMPLETED", job.output

It is session-scoped and never starts or stops daemons: bring the cluster up first (`make slurm-up`, or
`scripts/slurm/cluster.sh up`; .ci/run does it when it can install the packages). It skips, with the reason,
when SSGD_NO_SLURM=1, when `sinfo` is not installed, or when the cluster is not up.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SH = ROOT / "scripts" / "slurm" / "cluster.sh"
# States after which a job never runs again (squeue/scontrol JobState).
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                "BOOT_FAIL", "DEADLINE"}


@dataclass(frozen=True)
class Job:
    job_id: str
    state: str          # final JobState, e.g. COMPLETED
    exit_code: str      # "<status>:<signal>", e.g. "0:0"
    output: str         # the job's --output file (empty when it wrote none)


@dataclass(frozen=True)
class SlurmCluster:
    """A running single-node cluster: `env` reaches it (SLURM_CONF) and puts this checkout's src/ first on
    PYTHONPATH, so the jobs run the code under test with the project's interpreter."""
    conf: Path
    partition: str
    cpus: int
    env: dict[str, str] = field(repr=False)

    def run(self, argv: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=kwargs.pop("env", self.env), capture_output=True, text=True,
                              timeout=timeout, **kwargs)

    def submit(self, sbatch_args: list[str], output: Path, env: dict[str, str] | None = None,
               cwd: Path = ROOT) -> str:
        """`sbatch --parsable --output=<output> <sbatch_args>` from `cwd`; returns the job id."""
        proc = self.run(["sbatch", "--parsable", f"--output={output}", *sbatch_args], timeout=60,
                        env={**self.env, **(env or {})}, cwd=cwd)
        assert proc.returncode == 0, f"sbatch failed: {proc.stderr}"
        return proc.stdout.strip().split(";")[0]

    def wait(self, job_id: str, output: Path, timeout: float) -> Job:
        """Poll until the job reaches a final state (scancel it and fail the test after `timeout` s)."""
        deadline = time.monotonic() + timeout
        while True:
            fields = self.job_fields(job_id)
            if fields.get("JobState") in FINAL_STATES:
                text = output.read_text(errors="replace") if output.exists() else ""
                return Job(job_id, fields["JobState"], fields.get("ExitCode", "?"), text)
            if time.monotonic() > deadline:
                self.run(["scancel", job_id], timeout=30)
                tail = output.read_text(errors="replace")[-3000:] if output.exists() else "(no output)"
                pytest.fail(f"SLURM job {job_id} not done after {timeout:.0f} s (state {fields.get('JobState')}):\n{tail}")
            time.sleep(0.5)

    def sbatch(self, sbatch_args: list[str], output: Path, timeout: float = 150,
               env: dict[str, str] | None = None, cwd: Path = ROOT) -> Job:
        """Submit and wait: the job's final state, exit code and output."""
        return self.wait(self.submit(sbatch_args, output, env, cwd), output, timeout)

    def job_fields(self, job_id: str) -> dict[str, str]:
        proc = self.run(["scontrol", "show", "job", "-o", job_id], timeout=30)
        return dict(tok.split("=", 1) for tok in proc.stdout.split() if "=" in tok)

    @cached_property
    def pmix(self) -> str | None:
        """None when `srun --mpi=pmix` starts a task here, else why not (SLURM's mpi/pmix plugin needs
        libpmix.so, Debian's libpmix-dev, when slurmd starts)."""
        try:
            proc = self.run(["srun", "--mpi=pmix", "-n", "1", "true"], timeout=120)
        except subprocess.TimeoutExpired:
            return "`srun --mpi=pmix -n 1 true` did not finish within 120 s"
        if proc.returncode == 0:
            return None
        return " ".join(proc.stderr.split())[:300] or f"exit status {proc.returncode}"


def _find_cluster() -> SlurmCluster | str:
    """The running cluster, or the reason there is none."""
    if os.environ.get("SSGD_NO_SLURM") == "1":
        return "SSGD_NO_SLURM=1"
    if shutil.which("sinfo") is None:
        return "no SLURM client (`sinfo`) installed: `make slurm-up` installs and starts a single-node cluster"
    conf = Path(os.environ.get("SSGD_SLURM_DIR", "/tmp/ssgd-slurm")) / "slurm.conf"
    env = {**os.environ, "SLURM_CONF": str(conf), "WANDB_SILENT": "true",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    status = subprocess.run(["bash", str(CLUSTER_SH), "status"], env=env, capture_output=True, text=True, timeout=60)
    if status.returncode != 0:
        said = "; ".join(line.removeprefix("cluster.sh: ") for line in status.stdout.split("\n") if line.strip())
        return f"the single-node SLURM cluster is not up (`make slurm-up` starts it): {said[-300:]}"
    info = subprocess.run(["sinfo", "-h", "-o", "%P %c"], env=env, capture_output=True, text=True, timeout=30)
    partition, cpus = info.stdout.split()[:2]
    return SlurmCluster(conf=conf, partition=partition.rstrip("*"), cpus=int(cpus.rstrip("+")), env=env)


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    found = _find_cluster()
    if isinstance(found, str):
        pytest.skip(f"SLURM tests skipped: {found}")
    return found
