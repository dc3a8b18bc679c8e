"""The released gTop-k baseline of `make bench-comm` equals the package's collective on real MPI ranks.

bench/released_gtopk.py re-implements hclhkbu/gtopkssgd's `gtopk_sparse_allreduce` (allreducer.py);
tests/mpi/check_released_gtopk.py compares index sets exactly and values to float32 rounding on
every rank (see its docstring). The released code works only for a power-of-two number of ranks.
"""
import subprocess
import sys
from pathlib import Path

import pytest

from ssgd.launch import mpiexec_path, worker_env

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("n", [2, 4, 8])
def test_released_baseline_equals_ours(n):
    proc = subprocess.run([mpiexec_path(), "-n", str(n), sys.executable, "-m", "mpi4py",
                           str(ROOT / "tests" / "mpi" / "check_released_gtopk.py")],
                          env=worker_env(local=True), capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"P={n}: 4 cases, released gTop-k == ours: yes (0 failures)" in proc.stdout


def test_released_baseline_refuses_a_non_power_of_two():
    proc = subprocess.run([mpiexec_path(), "-n", "3", sys.executable, "-m", "mpi4py",
                           str(ROOT / "tests" / "mpi" / "check_released_gtopk.py")],
                          env=worker_env(local=True), capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 1
    assert "power-of-two number of ranks, got 3" in proc.stdout
