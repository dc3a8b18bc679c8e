"""What a launcher and the ranks it starts share: the worker config, the rank command, the ended file.

A backend whose ranks are processes (ssgd.run.backends) saves the resolved config once as
`<run dir>/worker_config.yaml` (`prepare`), and every rank runs the generic worker on it
(`worker_command`: `python [flags] -m ssgd.run.worker <backend> <that file>`, ssgd.run.worker). A rank
that ends the job reports how in one line to the file named by ENDED_ENV (`<run dir>/mpi/ended.txt`:
"status<TAB>line", the first rank to write it wins); the launcher reads it back (`read_ended`).

The launcher reserves the ended file's bytes before any rank starts (`reserve`): a rank that ends the job
because the disk is full can still say so there (`write_reserved` writes inside the reserved bytes and needs
no new block), so its one line and its exit status 2 reach the user through the launcher.
"""
from __future__ import annotations

import errno
import fcntl
import os
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ssgd.config import to_plain
from ssgd.utils.atomic import check_space, disk_full, no_space_reason, write_text_atomic

WORKER_CONFIG = "worker_config.yaml"
WORKER_MODULE = "ssgd.run.worker"
ENDED_ENV = "SSGD_ENDED_FILE"          # where the ranks report how the job ended (set by the launcher)
ENDED_FILE = Path("mpi") / "ended.txt"
RESERVED_BYTES = 4096                  # a reserved file's room (`reserve`): a one-line report and its status


def prepare(cfg: DictConfig, run_dir: Path) -> Path:
    """Save the resolved config the workers read (atomically, space-checked: DiskFull on a full disk); returns
    its path."""
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / WORKER_CONFIG
    write_text_atomic(config_path, OmegaConf.to_yaml(OmegaConf.create(to_plain(cfg))), "the ranks' config")
    return config_path


def reserve(path: Path, what: str) -> None:
    """Create `path` holding RESERVED_BYTES zero bytes, allocated now (`posix_fallocate` where the file system has
    it), so that `write_reserved` can later fill it on a full disk. DiskFull when they do not fit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    check_space(path, what, RESERVED_BYTES, "nothing was written")
    try:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            try:
                os.posix_fallocate(fd, 0, RESERVED_BYTES)
            except OSError as err:
                if err.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise
                os.write(fd, bytes(RESERVED_BYTES))          # no fallocate here (EOPNOTSUPP): real zeros
        finally:
            os.close(fd)
    except OSError as err:
        path.unlink(missing_ok=True)
        reason = no_space_reason(err)
        if reason is None:
            raise
        raise disk_full(path, what, RESERVED_BYTES, reason, "nothing was written") from err


def write_reserved(path: Path, text: str) -> bool:
    """Write `text` at the start of `path` unless another process wrote there first (a lock, then a look at the
    first byte: the first writer wins); within a `reserve`d file's bytes (`text` is cut to them) this needs no
    space. Creates `path` when it is missing (no reservation: it may then fail on a full disk). True when `text`
    or an earlier writer's text is there, False when it could not be written (the caller says it elsewhere)."""
    data = text.encode()
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    except OSError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)
        if os.pread(fd, 1, 0) not in (b"", b"\0"):
            return True
        room = os.fstat(fd).st_size
        if room >= len(b"0\t\n") and len(data) > room:
            data = data[:room - 1] + b"\n"
        try:
            os.pwrite(fd, data, 0)
        except OSError:
            if room == 0:
                os.ftruncate(fd, 0)
            return False
        return True
    finally:
        os.close(fd)                   # (closing releases the lock)


def release(path: Path) -> None:
    """Remove a `reserve`d file that nobody wrote to (a job that ended well leaves no empty report behind)."""
    if read_reserved(path) is None:
        path.unlink(missing_ok=True)


def read_reserved(path: Path) -> str | None:
    """The text `write_reserved` put in `path` (the reserved zeros after it dropped), or None when none is there."""
    try:
        text = path.read_bytes().rstrip(b"\0").decode(errors="replace").strip()
    except OSError:
        return None
    return text or None


def worker_command(backend: str, flags: tuple[str, ...], config_path: Path) -> list[str]:
    """One rank's command line: this interpreter, `flags` (e.g. `-m mpi4py`), the generic worker, the
    backend's name and the saved config."""
    return [sys.executable, *flags, "-m", WORKER_MODULE, backend, str(config_path)]


def read_ended(path: Path) -> tuple[int, str] | None:
    """(status, line) a rank reported in `path` ("status<TAB>line"), or None."""
    status, _, line = (read_reserved(path) or "").partition("\t")
    try:
        return int(status), line
    except ValueError:
        return None
