"""One run, one directory: unique default run directories, and a run never writes into another run's.

The default `hydra.run.dir` (conf/config.yaml) ends in the seed and a random suffix (`${ssgd_unique:}`),
so two runs started in the same second with the same scheme never share a directory; a multirun's job
folders are named after their overrides (`${ssgd_dirname:${hydra.job.override_dirname}}`, made safe for
a file name). `RunDirectory`, a Hydra callback registered in conf/config.yaml, checks the directory
before Hydra writes anything into it: it must be writable, and empty (Hydra's own `.hydra/` aside)
unless the run resumes into it (`trainer.resume=auto`, or a checkpoint inside it).

A sweep lands in one folder whichever launcher runs its points: the default `hydra.sweep.dir` is
`${ssgd_sweep_dir:...}`, and `RunDirectory.on_multirun_start` puts the sweeping process's resolved folder
in the environment (`SWEEP_DIR_ENV`), which every job process inherits (submitit_local's subprocesses,
submitit_slurm's sbatch jobs, which export the submitting environment); a job process that composes the
sweep config again then gets that folder, not one with its own time and suffix.
"""
from __future__ import annotations

import hashlib
import os
import re
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from ssgd.errors import EXIT_BAD_INPUT, ConfigError

_SUFFIX = secrets.token_hex(3)       # one per process, so every node that asks in one run gets the same
HYDRA_SUBDIR = ".hydra"              # Hydra's record of the composed config, rewritten at every start
MAX_NAME = 120
SWEEP_DIR_ENV = "SSGD_SWEEP_DIR"     # the sweep folder, set by the sweeping process for its job processes


def unique() -> str:
    """A random suffix for run directory names (6 hex digits, fixed for this process)."""
    return _SUFFIX


def dirname(overrides: str) -> str:
    """`overrides` (hydra.job.override_dirname) as one safe folder name: characters other than letters,
    digits and `._=,+-` become `_`; a long name is cut and ends in a hash of the whole."""
    safe = re.sub(r"[^A-Za-z0-9._=,+-]", "_", str(overrides)).strip("._") or "defaults"
    if len(safe) > MAX_NAME:
        safe = f"{safe[:MAX_NAME - 9]}-{hashlib.sha1(str(overrides).encode()).hexdigest()[:8]}"
    return safe


def sweep_dir(default: str) -> str:
    """The sweep folder of the sweep this process belongs to (`SWEEP_DIR_ENV`), else `default`."""
    return os.environ.get(SWEEP_DIR_ENV) or str(default)


OmegaConf.register_new_resolver("ssgd_unique", unique, replace=True)
OmegaConf.register_new_resolver("ssgd_sweep_dir", sweep_dir, replace=True)
OmegaConf.register_new_resolver("ssgd_dirname", dirname, replace=True)


def occupied(run_dir: Path) -> list[str]:
    """Names of what `run_dir` holds besides Hydra's `.hydra/` and empty files (such as the log file Hydra
    opens for a run that then wrote nothing), sorted; [] if it does not exist."""
    if not run_dir.is_dir():
        return []
    return sorted(p.name for p in run_dir.iterdir()
                  if p.name != HYDRA_SUBDIR and not (p.is_file() and p.stat().st_size == 0))


def resumes_into(run_dir: Path, resume: str | None, weights_only: bool) -> bool:
    """Whether a run with these trainer.resume settings continues the run in `run_dir`."""
    if weights_only or not resume:
        return False
    if resume == "auto":
        return True
    target, here = Path(resume).resolve(), run_dir.resolve()
    return target == here or target.parent == here


def check_run_dir(run_dir: Path, resume: str | None, weights_only: bool, key: str = "hydra.run.dir") -> None:
    """ConfigError unless `run_dir` can take this run: writable (created if missing), and empty but for
    `.hydra/` unless the run resumes into it. `key` is the setting the message names."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=run_dir):
            pass
    except OSError as err:
        raise ConfigError(f"{key}={run_dir}: cannot write there ({err.strerror}); choose another directory "
                          f"with {key}=...") from None
    taken = occupied(run_dir)
    if taken and not resumes_into(run_dir, resume, weights_only):
        shown = ", ".join(taken[:4]) + (", ..." if len(taken) > 4 else "")
        raise ConfigError(f"{key}={run_dir}: already holds a run ({shown}); a new run needs a new directory (the "
                          "default one is unique), or continue that run with trainer.resume=auto")


def refuse(error: ConfigError) -> None:
    """Print the one line and exit with status 2: Hydra turns a callback's exceptions into warnings."""
    print(f"error: {error}", file=sys.stderr)
    raise SystemExit(EXIT_BAD_INPUT)


class RunDirectory(Callback):
    """Checks the run directory (a run) or the sweep directory (a multirun) before Hydra writes to it."""

    def _check(self, config: DictConfig, key: str) -> None:
        resume = OmegaConf.select(config, "trainer.resume")
        weights_only = bool(OmegaConf.select(config, "trainer.resume_weights_only", default=False))
        try:
            check_run_dir(Path(str(OmegaConf.select(config, key))), resume, weights_only, key)
        except ConfigError as err:
            refuse(err)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config, "hydra.sweep.dir")
        self._set_env = SWEEP_DIR_ENV not in os.environ
        if self._set_env:
            os.environ[SWEEP_DIR_ENV] = str(Path(str(config.hydra.sweep.dir)).resolve())

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if getattr(self, "_set_env", False):
            os.environ.pop(SWEEP_DIR_ENV, None)
