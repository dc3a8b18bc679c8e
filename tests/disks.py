"""Real small file systems for the full-disk tests of the fourth fault matrix (docs/faults.md): a tmpfs of a
given size, mounted for the test and unmounted after it. Mounting needs root; elsewhere the test is skipped
with that reason. `/dev/full` is no stand-in: its writes fail at once with a plain OSError, while a file
system that fills up mid-write makes torch raise `RuntimeError: ... unexpected pos` and leaves partial files."""
from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest


def why_no_tmpfs() -> str | None:
    """Why a tmpfs cannot be mounted here (None when it can be tried)."""
    if os.geteuid() != 0:
        return "mounting a small tmpfs for a real full disk needs root"
    if not Path("/proc/filesystems").read_text().count("tmpfs"):
        return "no tmpfs in this kernel"
    return None


@contextmanager
def small_disk(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (mount's syntax: 2m, 300k) mounted at `where` (created), unmounted on leaving."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise OSError(f"mount -t tmpfs at {where}: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill `disk` with one file until `leave` bytes (or fewer: the page size rounds) are free."""
    filler = disk / "filler"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(filler, "wb") as f:
        try:
            f.write(b"\0" * max(0, free - leave))
        except OSError:
            pass
    return filler


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """A factory of small tmpfs mounts under tmp_path (`disk("2m")`), each unmounted after the test; the test is
    skipped with the reason where none can be mounted (not root, no tmpfs, mount refused)."""
    reason = why_no_tmpfs()
    if reason:
        pytest.skip(reason)
    mounts = []

    def make(size: str) -> Path:
        ctx = small_disk(tmp_path / f"disk{len(mounts)}", size)
        try:
            where = ctx.__enter__()
        except OSError as err:
            pytest.skip(str(err))
        mounts.append(ctx)
        return where
    yield make
    for ctx in reversed(mounts):
        ctx.__exit__(None, None, None)
