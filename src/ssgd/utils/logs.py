"""Where a run's log lines go: INFO on stdout, WARNING and above on stderr, everything in `train.log`.

`src/train.py` gets this layout from Hydra (`conf/hydra/job_logging/ssgd.yaml`, which names `BelowLevel`);
an MPI rank, which Hydra does not start, sets the same up with `setup_rank`. Console lines are the bare
messages (the report reads as before, an error stays one `error: ...` line on stderr); the file lines
carry time, logger and level.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

RUN_LOG = "train.log"           # <run dir>/train.log: Hydra's job log of src/train.py (job name "train")
FILE_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


class BelowLevel(logging.Filter):
    """Passes records below `level` (the stdout handler's filter: warnings and errors go to stderr)."""

    def __init__(self, level: str | int = logging.WARNING) -> None:
        super().__init__()
        self.level = logging.getLevelName(level) if isinstance(level, str) else level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < self.level


def setup_rank(run_dir: Path | None, root_rank: bool) -> None:
    """Logging of one MPI rank (call after any replacement of sys.stdout / sys.stderr).

    Rank 0: INFO to stdout, WARNING+ to stderr, and everything appended to `<run_dir>/train.log` (the file
    the launching `src/train.py` writes to), so the run's lines are in one place. Other ranks: WARNING+ on
    their (prefixed) stderr only."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.INFO if root_rank else logging.WARNING)
    plain = logging.Formatter("%(message)s")
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(logging.WARNING)
    err.setFormatter(plain)
    root.addHandler(err)
    if root_rank:
        out = logging.StreamHandler(sys.stdout)
        out.addFilter(BelowLevel(logging.WARNING))
        out.setFormatter(plain)
        root.addHandler(out)
        if run_dir is not None and run_dir.is_dir():
            file = logging.FileHandler(run_dir / RUN_LOG, mode="a")
            file.setFormatter(logging.Formatter(FILE_FORMAT))
            root.addHandler(file)
    logging.captureWarnings(True)
