"""Multi-host runs on the testbed: one rank per host (network namespace) over rate-limited TCP links.

The same run (tests/equivalence.py's EQUIV: 5 steps on 3 ranks) on threads here, on `backend=mpi cluster=testbed`
(btl tcp through the agent) and on `backend=torch cluster=testbed` (gloo, rendezvous at host 1) must end the same:
sparse schemes with bitwise equal weights and residuals, dense within the all-reduce's summation order (1e-5).
The ranks must really be on the hosts: each one's hostname is its namespace's (tb1, tb2, ...). Needs the testbed
(`make testbed-up P=4`); skipped with the reason otherwise (conftest.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from equivalence import EQUIV, RANKS, assert_same_runs

from .conftest import ROOT, TestbedHosts

pytestmark = [pytest.mark.testbed, pytest.mark.slow]
COMPRESSORS = ["gtopk", "topk", "dense"]


def train(run_dir: Path, *overrides: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_SILENT": "true"}
    return subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), f"hydra.run.dir={run_dir}",
                           "trainer.progress=false", "wandb.mode=disabled", *overrides],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def runs(testbed: TestbedHosts, tmp_path_factory) -> Path:
    """<root>/<compressor>/{thread,mpi,torch}: the same run on threads and on 3 testbed hosts per backend."""
    if testbed.hosts < RANKS:
        pytest.skip(f"the testbed has {testbed.hosts} hosts; these runs need {RANKS} (make testbed-up P=4)")
    root = tmp_path_factory.mktemp("testbed")
    for compressor in COMPRESSORS:
        for backend in ("thread", "mpi", "torch"):
            proc = train(root / compressor / backend, f"compressor={compressor}", "cluster=testbed",
                         f"backend={backend}", *EQUIV)
            assert proc.returncode == 0, f"{compressor} {backend}: {proc.stderr[-3000:]}"
    return root


@pytest.mark.parametrize("compressor", COMPRESSORS)
@pytest.mark.parametrize("backend", ["mpi", "torch"])
def test_multihost_run_ends_as_threads(backend, compressor, runs):
    assert_same_runs(runs / compressor / "thread", runs / compressor / backend, compressor)
    summary = json.loads((runs / compressor / backend / "summary.json").read_text())
    assert summary["world_size"] == RANKS


def test_mpi_ranks_run_one_per_host(testbed: TestbedHosts):
    """mpiexec with the testbed's arguments puts rank r on host r+1: its own hostname and its own address."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(ROOT / "conf" / "cluster" / "testbed.yaml")
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    P = testbed.hosts
    proc = subprocess.run([str(Path(sys.executable).parent / "mpiexec"), "-n", str(P), "--hostfile", cfg.hostfile,
                           *cfg.mpiexec_args, sys.executable, "-c",
                           "import os, socket; print(os.environ['OMPI_COMM_WORLD_RANK'], socket.gethostname())"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = sorted(tuple(line.split()) for line in proc.stdout.splitlines() if line.strip())
    assert seen == sorted((str(r), f"tb{r + 1}") for r in range(P)), proc.stdout
