"""A sweep survives one bad point: every point runs, a failed point leaves its one line in
`<job folder>/error.txt`, and at the end `SweepReport` (a Hydra callback registered in conf/config.yaml)
writes the sweep's summary table and overlay figure (ssgd.utils.summarize), prints a table of the failed
points and exits with the first failed point's status.

An interrupted point (SIGINT, SIGTERM) stops the whole sweep at once instead: that is what the signal asks.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

ERROR_FILE = "error.txt"


@dataclass(frozen=True)
class PointFailed:
    """What a failed sweep point returns to Hydra in place of its result."""

    status: int
    message: str


def record_failure(job_dir: Path, status: int, message: str, details: str = "") -> PointFailed:
    """Write the point's one line (and any details, e.g. a traceback) to job_dir/error.txt."""
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / ERROR_FILE).write_text(f"exit status {status}: {message}\n" + (f"\n{details}" if details else ""))
    return PointFailed(status, message)


def write_sweep_report(sweep_dir: Path) -> None:
    """Write the sweep's table and overlay figure (ssgd.utils.summarize.sweep_table) and name them in the
    sweep's last lines; one that cannot be drawn costs one warning line, never the points' results."""
    from ssgd.utils.summarize import sweep_table

    try:
        written = sweep_table(sweep_dir)
    except Exception as err:  # noqa: BLE001 -- every point's results are written; the table is an extra
        print(f"sweep report: not written ({type(err).__name__}: {err})", file=sys.stderr)
        return
    if written:
        print("sweep report: " + " ".join(str(p) for p in written))


class SweepReport(Callback):
    """Collects the failed points of a multirun; at its end prints them and exits non-zero if any failed."""

    def __init__(self) -> None:
        self.points = 0
        self.failed: list[tuple[int, str, PointFailed]] = []

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        self.points += 1
        value = job_return._return_value     # (src/train.py returns PointFailed instead of raising)
        if job_return.status is JobStatus.COMPLETED and isinstance(value, PointFailed):
            overrides = " ".join(job_return.overrides or []) or "(no overrides)"
            self.failed.append((int(config.hydra.job.num), overrides, value))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        write_sweep_report(Path(str(config.hydra.sweep.dir)))
        if not self.failed:
            return
        lines = [f"sweep: {len(self.failed)} of {self.points} points failed (each folder under "
                 f"{config.hydra.sweep.dir} holds its {ERROR_FILE}):",
                 "  job  status  overrides  error"]
        lines += [f"  {num:<4} {p.status:<7} {overrides}  {p.message}" for num, overrides, p in self.failed]
        print("\n".join(lines), file=sys.stderr)
        raise SystemExit(self.failed[0][2].status)
