"""Teardown of a rank of the backends whose ranks are processes (docs/benchmarks.md, "Start-up of the
backends"): a rank ends with its status, its output flushed and MPI finalised, without the interpreter's
teardown (ssgd.run.worker.leave)."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mpi_jobs import mpiexec

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_leave_flushes_the_output_and_exits_with_the_status(tmp_path):
    log = tmp_path / "rank.log"
    code = textwrap.dedent(f"""
        import logging, sys
        from ssgd.run.worker import leave
        handler = logging.FileHandler({str(log)!r})
        logging.getLogger("x").addHandler(handler)
        logging.getLogger("x").warning("the last line")
        sys.stdout.write("partial line without a newline")
        leave(3)
        print("not reached")
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "partial line without a newline"
    assert log.read_text() == "the last line\n"


def test_leave_finalises_mpi_so_the_job_succeeds():
    code = "from mpi4py import MPI\nfrom ssgd.run.worker import leave\nMPI.COMM_WORLD.Barrier()\nleave(0)\n"
    proc = mpiexec(2, sys.executable, "-c", code, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MPI_Finalize" not in proc.stderr and "finalize" not in proc.stderr.lower(), proc.stderr
