"""What a launcher and the ranks it starts share: the worker config, the rank command, the ended file.

A backend whose ranks are processes (ssgd.run.backends) saves the resolved config once as
`<run dir>/worker_config.yaml` (`prepare`), and every rank runs the generic worker on it
(`worker_command`: `python [flags] -m ssgd.run.worker <backend> <that file>`, ssgd.run.worker). A rank
that ends the job reports how in one line to the file named by ENDED_ENV (`<run dir>/mpi/ended.txt`:
"status<TAB>line", the first rank to write it wins); the launcher reads it back (`read_ended`).
"""
from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ssgd.config import to_plain

WORKER_CONFIG = "worker_config.yaml"
WORKER_MODULE = "ssgd.run.worker"
ENDED_ENV = "SSGD_ENDED_FILE"          # where the ranks report how the job ended (set by the launcher)
ENDED_FILE = Path("mpi") / "ended.txt"


def prepare(cfg: DictConfig, run_dir: Path) -> Path:
    """Save the resolved config the workers read; returns its path."""
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / WORKER_CONFIG
    OmegaConf.save(OmegaConf.create(to_plain(cfg)), config_path)
    return config_path


def worker_command(backend: str, flags: tuple[str, ...], config_path: Path) -> list[str]:
    """One rank's command line: this interpreter, `flags` (e.g. `-m mpi4py`), the generic worker, the
    backend's name and the saved config."""
    return [sys.executable, *flags, "-m", WORKER_MODULE, backend, str(config_path)]


def read_ended(path: Path) -> tuple[int, str] | None:
    """(status, line) a rank reported in `path` ("status<TAB>line"), or None."""
    try:
        status, _, line = path.read_text().strip().partition("\t")
        return int(status), line
    except (OSError, ValueError):
        return None
