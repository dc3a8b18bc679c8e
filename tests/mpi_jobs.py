"""Jobs on real MPI ranks for the integration tests, each under a timeout (a hang fails the test, not CI).

`mpiexec(n, *argv)` runs one job on this host as `src/train.py backend=mpi` would (`ssgd.run.launch_mpi.worker_env`).
`checks(n)` runs every check script of tests/mpi/ that applies to n ranks in ONE job (tests/mpi/run_checks.py)
and returns each script's exit status and lines; it is cached, so the tests of each script at n ranks
share the job (tests/integration/test_mpi.py; under pytest-xdist keep them on one worker: `--dist loadfile`).
"""
from __future__ import annotations

import functools
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ssgd.run.launch_mpi import mpiexec_path, worker_env

ROOT = Path(__file__).resolve().parents[1]
RELEASED_P = (2, 3, 4, 8)      # check_released_gtopk: powers of two, and 3 (the released code refuses it)


def mpiexec(n: int, *argv: str, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run([mpiexec_path(), "-n", str(n), *argv], env=worker_env(local=True), capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


@dataclass(frozen=True)
class Checked:
    status: int | None         # the script's main() return value; None: the job ended before it finished
    lines: str                 # what rank 0 printed for it
    job: str                   # the whole job's stdout + stderr, for failure messages


@functools.lru_cache(maxsize=None)
def checks(n: int) -> dict[str, Checked]:
    names = ["check_collectives", "check_gtopk_strict"] + (["check_released_gtopk"] if n in RELEASED_P else [])
    proc = mpiexec(n, sys.executable, "-m", "mpi4py", str(ROOT / "tests" / "mpi" / "run_checks.py"), *names,
                   timeout=300)
    job = f"exit status {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    out = {}
    for name in names:
        m = re.search(rf"^== {name} ==\n(.*?)^{name}: exit (\d+)$", proc.stdout, re.S | re.M)
        out[name] = Checked(int(m.group(2)), m.group(1), job) if m else Checked(None, "", job)
    return out
