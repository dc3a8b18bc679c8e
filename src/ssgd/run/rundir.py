"""One run, one directory: unique default run directories, and a run never writes into another run's.

The default `hydra.run.dir` (conf/config.yaml) ends in the seed and a random suffix (`${ssgd_unique:}`),
so two runs started in the same second with the same scheme never share a directory; a multirun's job
folders are named after their overrides (`${ssgd_dirname:${hydra.job.override_dirname}}`, made safe for
a file name). `RunDirectory`, a Hydra callback registered in conf/config.yaml, checks the directory
before Hydra writes anything into it: it must be writable, and empty (Hydra's own `.hydra/` aside)
unless the run resumes into it (`trainer.resume=auto`, or a checkpoint inside it).

A single run also takes the directory before Hydra writes anything (`take_run_dir`): an exclusive
`flock` on the directory itself (nothing is written for it; the kernel drops it when the process ends,
however it ends), so a second run started into the same folder at the same time is refused before it
writes a byte, and a note of what the folder held (`Taken`). A run that is then refused (exit status 2:
bad input found after Hydra wrote `.hydra/` and the log) or that has nothing to do (a finished run)
calls `give_back`, which (unless the run had begun training or written a result: `Taken.progressed`)
puts the folder back as it was: Hydra's `.hydra/` files as they were, the
log cut back to its old length, every file and folder the run created removed (the folder itself too
when the run created it).

A sweep lands in one folder whichever launcher runs its points: the default `hydra.sweep.dir` is
`${ssgd_sweep_dir:...}`, and `RunDirectory.on_multirun_start` puts the sweeping process's resolved folder
in the environment (`SWEEP_DIR_ENV`), which every job process inherits (submitit_local's subprocesses,
submitit_slurm's sbatch jobs, which export the submitting environment); a job process that composes the
sweep config again then gets that folder, not one with its own time and suffix.

A requeued or preempted SLURM job (`SLURM_RESTART_COUNT` > 0) that left `trainer.resume` unset resumes:
`restart_resume` makes it `auto`, here for the folder check and in the app for the run itself, so a
`submitit_slurm` sweep point that SLURM (or submitit, on preemption) starts again continues its own
checkpoint instead of being refused for the folder it wrote the first time.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import re
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from ssgd.errors import EXIT_BAD_INPUT, ConfigError
from ssgd.utils.atomic import write_bytes_atomic

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


RESTART_ENV = "SLURM_RESTART_COUNT"  # how many times SLURM has started this job again (requeue, preemption)


def restart_count(env: dict[str, str] | os._Environ = os.environ) -> int:
    """SLURM_RESTART_COUNT as a number (0 when unset or not a number)."""
    value = env.get(RESTART_ENV, "0")
    return int(value) if value.isdigit() else 0


def restart_resume(resume: str | None, env: dict[str, str] | os._Environ = os.environ) -> str | None:
    """`trainer.resume` for this process: `auto` in a restarted SLURM job that left it unset, else `resume`."""
    return "auto" if resume is None and restart_count(env) > 0 else resume


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


def check_run_dir(run_dir: Path, resume: str | None, weights_only: bool, key: str = "hydra.run.dir",
                  check_empty: bool = True) -> None:
    """ConfigError unless `run_dir` can take this run: writable (created if missing), and (`check_empty`)
    empty but for `.hydra/` unless the run resumes into it. `key` is the setting the message names."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=run_dir):
            pass
    except OSError as err:
        raise ConfigError(f"{key}={run_dir}: cannot write there ({err.strerror}); choose another directory "
                          f"with {key}=...") from None
    if not check_empty:
        return
    taken = occupied(run_dir)
    if taken and not resumes_into(run_dir, resume, weights_only):
        shown = ", ".join(taken[:4]) + (", ..." if len(taken) > 4 else "")
        raise ConfigError(f"{key}={run_dir}: already holds a run ({shown}); a new run needs a new directory (the "
                          "default one is unique), or continue that run with trainer.resume=auto")


class Taken:
    """A run directory this process holds (`take_run_dir`): its lock and a note of what it held before.

    `created` is the highest folder this run created (None when `path` existed); `hydra` the bytes of
    each file Hydra's `.hydra/` held; `sizes` the length of every other file directly in `path`;
    `entries` every path under `path` (relative) that existed."""

    def __init__(self, path: Path, fd: int | None, created: Path | None) -> None:
        self.path, self.fd, self.created = path, fd, created
        hydra = path / HYDRA_SUBDIR
        self.hydra = {p.name: p.read_bytes() for p in hydra.iterdir() if p.is_file()} if hydra.is_dir() else {}
        self.sizes = {p.name: p.stat().st_size for p in path.iterdir() if p.is_file()}
        self.entries = {p.relative_to(path) for p in path.rglob("*")}
        self.started = False              # set by `started()`: the run trains, the folder is its own now
        self.results = self._results()

    def _results(self) -> dict[str, tuple[int, int]]:
        found = {}
        for name in RESULTS:
            try:
                st = (self.path / name).stat()
            except OSError:
                continue
            if st.st_size:
                found[name] = (st.st_size, st.st_mtime_ns)
        return found

    def progressed(self) -> bool:
        """Whether the run got past its refusals: `started`, or one of RESULTS written since it was taken."""
        return self.started or self._results() != self.results

    def give_back(self) -> None:
        """Put the directory back as it was when it was taken (see the module docstring); the lock stays.
        Nothing at all once the run `progressed` (an error after training began keeps every byte written)."""
        if self.progressed():
            return
        hydra = self.path / HYDRA_SUBDIR
        for name, data in self.hydra.items():
            try:           # a temporary file, then a rename: a full disk leaves Hydra's file, never half of one
                write_bytes_atomic(hydra / name, data, "Hydra's record of the run")
            except (OSError, ConfigError):     # DiskFull: the run's own refusal stays its one line
                pass
        for name, size in self.sizes.items():
            target = self.path / name
            if target.is_file() and not target.is_symlink() and target.stat().st_size > size:
                os.truncate(target, size)
        new = sorted((p for p in self.path.rglob("*") if p.relative_to(self.path) not in self.entries),
                     key=lambda p: len(p.parts), reverse=True)
        for p in new:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        if self.created is not None:
            folder = self.path
            while True:
                try:
                    folder.rmdir()
                except OSError:
                    break
                if folder == self.created:
                    break
                folder = folder.parent


RESULTS = ("metrics.jsonl", "checkpoint.pt", "summary.json", "resumes.jsonl")   # a run's own records
TAKEN: list[Taken] = []       # the run directory this process holds (at most one: a single run)


def _first_missing(path: Path) -> Path | None:
    """The highest folder of `path` that does not exist yet (None when `path` exists)."""
    if path.exists():
        return None
    top = path
    while not top.parent.exists() and top.parent != top:
        top = top.parent
    return top


def _lock(run_dir: Path, key: str) -> int | None:
    """An exclusive, non-blocking flock on the directory itself; ConfigError when another process holds it.
    None where the file system has no locks (the run then goes on unlocked)."""
    try:
        fd = os.open(run_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise ConfigError(f"{key}={run_dir}: another run is using this directory right now (it holds its "
                              "lock); wait for it to end, or choose another directory with "
                              f"{key}=...") from None
        return None
    return fd


def take_run_dir(run_dir: Path, resume: str | None, weights_only: bool, key: str = "hydra.run.dir") -> Taken:
    """`check_run_dir`, with the directory locked between the write test and the emptiness test, so two
    runs started at once into one folder never both pass; returns the `Taken` note (ConfigError otherwise).
    A refusal here leaves nothing behind (a folder this call created is removed)."""
    created = _first_missing(run_dir)
    check_run_dir(run_dir, None, False, key, check_empty=False)
    fd = _lock(run_dir, key)          # refused: another run holds it (and so what this call created, if any)
    try:
        check_run_dir(run_dir, resume, weights_only, key)
    except ConfigError:
        if created is not None:
            Taken(run_dir, None, created).give_back()
        if fd is not None:
            os.close(fd)
        raise
    return Taken(run_dir, fd, created)


def started() -> None:
    """This process's run trains now: `give_back` leaves its directory alone from here on."""
    for taken in TAKEN:
        taken.started = True


def give_back() -> None:
    """Put this process's run directory back as it was taken (`Taken.give_back`); nothing when none is held."""
    for taken in TAKEN:
        taken.give_back()


def refuse(error: ConfigError) -> None:
    """Print the one line and exit with status 2: Hydra turns a callback's exceptions into warnings."""
    print(f"error: {error}", file=sys.stderr)
    raise SystemExit(EXIT_BAD_INPUT)


class RunDirectory(Callback):
    """Checks the run directory (a run) or the sweep directory (a multirun) before Hydra writes to it."""

    def _check(self, config: DictConfig, key: str, take: bool = False) -> None:
        resume = restart_resume(OmegaConf.select(config, "trainer.resume"))
        weights_only = bool(OmegaConf.select(config, "trainer.resume_weights_only", default=False))
        path = Path(str(OmegaConf.select(config, key)))
        try:
            if take:
                TAKEN[:] = [take_run_dir(path, resume, weights_only, key)]
            else:
                check_run_dir(path, resume, weights_only, key)
        except ConfigError as err:
            refuse(err)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config, "hydra.run.dir", take=True)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config, "hydra.sweep.dir")
        self._set_env = SWEEP_DIR_ENV not in os.environ
        if self._set_env:
            os.environ[SWEEP_DIR_ENV] = str(Path(str(config.hydra.sweep.dir)).resolve())

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if getattr(self, "_set_env", False):
            os.environ.pop(SWEEP_DIR_ENV, None)
