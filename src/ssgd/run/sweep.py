"""A sweep survives one bad point: every point runs, a failed point leaves its one line in
`<job folder>/error.txt`, and at the end `SweepReport` (a Hydra callback registered in conf/config.yaml)
writes the sweep's summary table and overlay figure (ssgd.utils.result_files), prints a table of the failed
points and exits with the first failed point's status.

An interrupted point (SIGINT, SIGTERM) stops the whole sweep at once instead: that is what the signal asks.

Hydra calls `on_job_end` in the process that ran the point. With the basic launcher (and the Optuna
sweeper, which uses it) that is the sweep's own process; with submitit_local and submitit_slurm each point
is a job process of its own, so the sweep's process learns of its failed points from the `error.txt` files
its job folders gained while it ran (`failures_in`).
"""
from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from ssgd.errors import DiskFull
from ssgd.utils.atomic import write_text_atomic

ERROR_FILE = "error.txt"


@dataclass(frozen=True)
class PointFailed:
    """What a failed sweep point returns to Hydra in place of its result."""

    status: int
    message: str


def record_failure(job_dir: Path, status: int, message: str, details: str = "") -> PointFailed:
    """Write the point's one line (and any details, e.g. a traceback) to job_dir/error.txt, atomically; a
    disk too full to take it leaves no error.txt (the line is on stderr and in the sweep's table)."""
    try:
        job_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(job_dir / ERROR_FILE, f"exit status {status}: {message}\n" + (f"\n{details}" if details
                                                                                          else ""), "the error")
    except (OSError, DiskFull):
        pass
    return PointFailed(status, message)


def skipped_note(job_num: int) -> str:
    """What an interrupt in point `job_num` of a sweep left undone, for the end of its one line."""
    return f"the sweep stopped in its point {job_num}; the points after it were not run"


HYDRA_WRITE_FAILED: dict[str, DiskFull] = {}
"""Run directory -> the DiskFull that kept Hydra from writing its `.hydra/` files there (`save_hydra_config`)."""


def save_hydra_config(cfg: Any, filename: str, output_dir: Path) -> None:
    """Hydra's `_save_config` (`.hydra/config.yaml`, `hydra.yaml`, `overrides.yaml`), atomic and space-checked.
    A full disk raises nothing here, where it would end the whole sweep from inside Hydra's launcher: the
    DiskFull is kept for the job (`hydra_write_failure`), which then fails with its one line as any point does."""
    output_dir.mkdir(parents=True, exist_ok=True)
    try:
        write_text_atomic(output_dir / filename, OmegaConf.to_yaml(cfg), "Hydra's record of the run")
    except DiskFull as err:
        HYDRA_WRITE_FAILED.setdefault(str(output_dir.parent.resolve()), err)


def hydra_write_failure(run_dir: Path) -> None:
    """Raise the DiskFull that kept Hydra from writing run_dir/.hydra/ (`save_hydra_config`), if one did."""
    failed = HYDRA_WRITE_FAILED.pop(str(Path(run_dir).resolve()), None)
    if failed is not None:
        raise failed


def install_hydra_config_writer() -> None:
    """Make Hydra write its `.hydra/` files through `save_hydra_config` (Hydra 1.3's `run_job` calls
    `hydra.core.utils._save_config` by name)."""
    import hydra.core.utils

    hydra.core.utils._save_config = save_hydra_config


def _written_since(path: Path, since: float) -> bool:
    return path.is_file() and path.stat().st_mtime >= since


def points_in(sweep_dir: Path, since: float) -> int:
    """The number of job folders of `sweep_dir` that Hydra started at or after `since` (a time.time()):
    those whose `.hydra/overrides.yaml` was written since."""
    return sum(_written_since(job / ".hydra" / "overrides.yaml", since) for job in sweep_dir.iterdir())


def failures_in(sweep_dir: Path, since: float) -> list[tuple[int, str, PointFailed]]:
    """(job number, overrides, failure) of every job folder of `sweep_dir` whose error.txt was written at or
    after `since` (a time.time()), by job number; an error.txt of an earlier attempt (a resumed sweep) is
    not this sweep's."""
    failed = []
    for path in sweep_dir.glob(f"*/{ERROR_FILE}"):
        if not _written_since(path, since):
            continue
        first = path.read_text(errors="replace").splitlines()[0] if path.stat().st_size else ""
        match = re.match(r"exit status (\d+): (.*)", first)
        status, message = (int(match[1]), match[2]) if match else (1, first or "(empty error.txt)")
        num = re.match(r"(\d+)", path.parent.name)
        overrides_file = path.parent / ".hydra" / "overrides.yaml"
        overrides = (" ".join(map(str, OmegaConf.load(overrides_file))) if overrides_file.is_file()
                     else path.parent.name)
        failed.append((int(num[1]) if num else -1, overrides or "(no overrides)", PointFailed(status, message)))
    return sorted(failed, key=lambda item: item[0])


def write_sweep_report(sweep_dir: Path) -> None:
    """Write the sweep's table and overlay figure (ssgd.utils.result_files.sweep_table) and name them in the
    sweep's last lines; one that cannot be drawn costs one warning line, never the points' results."""
    from ssgd.utils.result_files import sweep_table

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
        self.started = time.time()
        self.failed: list[tuple[int, str, PointFailed]] = []

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.started = time.time() - 1.0       # (file times can trail the clock by a tick)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        self.points += 1
        value = job_return._return_value     # (src/train.py returns PointFailed instead of raising)
        if job_return.status is JobStatus.COMPLETED and isinstance(value, PointFailed):
            overrides = " ".join(job_return.overrides or []) or "(no overrides)"
            self.failed.append((int(config.hydra.job.num), overrides, value))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        write_sweep_report(sweep_dir)
        if self.points == 0:                   # the points ran in job processes of their own (submitit)
            self.points = points_in(sweep_dir, self.started)
            self.failed = failures_in(sweep_dir, self.started)
        if not self.failed:
            return
        written = {path.parent.name.split("-", 1)[0] for path in sweep_dir.glob(f"*/{ERROR_FILE}")}
        missing = sum(str(num) not in written for num, _, _ in self.failed)
        unwritten = f"; {missing} could not be written, a full disk: their lines are below" if missing else ""
        lines = [f"sweep: {len(self.failed)} of {self.points} points failed (each folder under "
                 f"{config.hydra.sweep.dir} holds its {ERROR_FILE}{unwritten}):",
                 "  job  status  overrides  error"]
        lines += [f"  {num:<4} {p.status:<7} {overrides}  {p.message}" for num, overrides, p in self.failed]
        print("\n".join(lines), file=sys.stderr)
        raise SystemExit(self.failed[0][2].status)
