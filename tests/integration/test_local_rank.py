"""One GPU per MPI rank without a GPU: the local rank from Open MPI's environment and from a shared-memory split
(MPI.COMM_TYPE_SHARED) agree on real ranks, and `device=cuda` maps rank r of a host to cuda:r (a pretended
GPU count; tests/gpu/ runs the same script with the real one)."""
import subprocess
import sys
from pathlib import Path

import pytest

from ssgd.run.launch_mpi import mpiexec_path, worker_env

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_mpi_local_rank_and_its_device():
    proc = subprocess.run([mpiexec_path(), "-n", "2", sys.executable, "-m", "mpi4py",
                           str(ROOT / "tests" / "mpi" / "check_local_rank.py"), "4"],
                          env=worker_env(local=True), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["rank 0: env 0 split 0/2 device cuda:0", "rank 1: env 1 split 1/2 device cuda:1"]
