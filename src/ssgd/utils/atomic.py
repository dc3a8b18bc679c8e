"""Atomic, space-checked writes of a run's files: checkpoints, summaries, reports, sweep tables.

Every file is written to `<name>.tmp` beside it, then renamed over the old one, so a reader sees the old
file or the new one, never half of one. Before writing, the free space of the file system is compared with
the bytes the file needs; a write refused for want of space (checked up front, or ENOSPC / EDQUOT in any of
its disguises: an OSError, or torch's `RuntimeError: ... unexpected pos` / `iostream error` from its zip
writer) removes the temporary file and raises `DiskFull`: one line naming the file, the bytes needed and
those free (exit status 2). What was there before stays as it was.
"""
from __future__ import annotations

import errno
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
import functools
import sys
from typing import BinaryIO, Callable, Iterator, TypeVar

from ssgd.errors import DiskFull

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
TORCH_WRITE_FAILED = ("unexpected pos", "iostream error", "file write failed")
"""Pieces of the messages torch's zip writer (inline_container.cc) raises when the disk is full."""


def free_bytes(path: Path) -> int | None:
    """Bytes free to this user on the file system of `path` (or of its nearest existing parent); None if unknown."""
    here = Path(path)
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        return shutil.disk_usage(here).free
    except OSError:
        return None


def no_space_reason(err: BaseException) -> str | None:
    """Why a write failed for want of space ("No space left on device", "Disk quota exceeded"), looking through
    the chain of `err` (torch raises a RuntimeError whose context is the OSError, or no OSError at all);
    None when `err` is another failure."""
    seen = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in NO_SPACE:
            return os.strerror(seen.errno)
        if isinstance(seen, RuntimeError) and any(piece in str(seen) for piece in TORCH_WRITE_FAILED):
            return os.strerror(errno.ENOSPC)
        seen = seen.__cause__ or seen.__context__
    return None


def disk_full(path: Path, what: str, needed: int, reason: str, kept: str) -> DiskFull:
    """The one-line error of a write of `what` to `path` that needed about `needed` bytes (0: not known ahead,
    a figure); `kept` says what was kept (e.g. "the previous checkpoint is kept")."""
    free = free_bytes(Path(path).parent)
    shown = "free space unknown" if free is None else f"{free:,} bytes free"
    size = f"it needs about {needed:,} bytes" if needed > 0 else "its size is not known before it is written"
    if free is not None and 0 < needed <= free:       # the bytes were there: the file system ran out of inodes
        shown += " (but no free inodes, or a quota)"
    return DiskFull(f"{path}: cannot write {what} ({reason}): {size}, {shown}; {kept} "
                    "(free space, or set hydra.run.dir elsewhere and resume from it)", str(path), needed, free)


def check_space(path: Path, what: str, needed: int, kept: str) -> None:
    """DiskFull before anything is written when the file system of `path` has fewer than `needed` bytes free."""
    free = free_bytes(Path(path).parent)
    if free is not None and needed > free:
        raise disk_full(path, what, needed, os.strerror(errno.ENOSPC), kept)


def _kept(path: Path, what: str) -> str:
    return f"the previous {what.removeprefix('the ')} is kept" if Path(path).exists() else "nothing was written"


@contextmanager
def replacing(path: Path, what: str, needed: int) -> Iterator[Path]:
    """Yield the temporary path to write `path` through; on leaving, rename it over `path`. A failure removes
    the temporary file; one for want of space (or `needed` bytes more than are free, checked first) is
    DiskFull, any other is raised as it is."""
    path = Path(path)
    check_space(path, what, needed, _kept(path, what))
    tmp = path.with_name(path.name + ".tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        reason = no_space_reason(err)
        if reason is not None:
            raise disk_full(path, what, needed, reason, _kept(path, what)) from err
        raise


def write_bytes_atomic(path: Path, data: bytes, what: str) -> None:
    """Write `data` to `path` atomically and space-checked (see `replacing`)."""
    with replacing(path, what, len(data)) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)


def write_text_atomic(path: Path, text: str, what: str = "the file") -> None:
    """Write `text` (UTF-8) to `path` atomically and space-checked (see `replacing`)."""
    write_bytes_atomic(path, text.encode(), what)


def open_appending(path: Path, what: str) -> BinaryIO:
    """`path` opened for appending whole records (`append_whole`): binary, unbuffered, created when missing (its
    folder too). DiskFull when the file system has no room (or no inode) for it."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, "ab", buffering=0)
    except OSError as err:
        reason = no_space_reason(err)
        if reason is None:
            raise
        raise disk_full(path, what, 0, reason, "nothing was written") from err


def append_whole(file: BinaryIO, data: bytes, path: Path, what: str, kept: str) -> None:
    """Append `data` to `file` (from `open_appending`, which names `path`) as one whole record, or nothing: a
    write the disk cannot take (ENOSPC, a quota) is cut back to the file's length before it and raises DiskFull
    naming `path`, `what` and the bytes needed and free; `kept` says what stays ("its 113 records before it are
    kept"). Any other failure is cut back the same way and raised as it is."""
    start = file.seek(0, os.SEEK_END)
    try:
        done = 0
        while done < len(data):
            done += file.write(data[done:]) or 0
    except OSError as err:
        os.ftruncate(file.fileno(), start)
        reason = no_space_reason(err)
        if reason is None:
            raise
        raise disk_full(path, what, len(data), reason, kept) from err


Main = TypeVar("Main", bound=Callable[..., int])


def full_disk_is_one_line(main: Main) -> Main:
    """A command's `main` whose DiskFull (a file it writes that the disk cannot take) is its one line on stderr
    and exit status 2 instead of a traceback (the lab's tools: calibrations, profiles, replays)."""
    @functools.wraps(main)
    def wrapped(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except DiskFull as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    return wrapped  # type: ignore[return-value]
