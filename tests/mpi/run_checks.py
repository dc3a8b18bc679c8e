"""Several check scripts of tests/mpi/ in one MPI job, so that the ranks start (MPI, torch import) once:

    mpiexec -n P python -m mpi4py tests/mpi/run_checks.py check_collectives check_gtopk_strict ...

Every rank runs each named module's `main()` in turn (their verdicts are collective, so all ranks agree);
rank 0 prints `== <name> ==` before a module's own lines and `<name>: exit <status>` after them
(tests/mpi_jobs.py reads these). The job's exit status is the largest module status.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(names: list[str]) -> int:
    root = MPI.COMM_WORLD.Get_rank() == 0
    statuses = []
    for name in names:
        if root:
            print(f"== {name} ==", flush=True)
        statuses.append(importlib.import_module(name).main())
        if root:
            print(f"{name}: exit {statuses[-1]}", flush=True)
    return max(statuses, default=0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
