"""Processes of this machine by their command line, read from /proc: what the fault tests and `make faults`
(scripts/faults.py) use to check that no launcher or rank of a run is left."""
from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, already dead, counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def processes_with(text: str) -> list[int]:
    """Running processes (zombies excluded) whose command line contains `text`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace") and \
                    alive(int(cmdline.parent.name)):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def children_of(pid: int) -> list[int]:
    """Running processes (zombies excluded) whose parent is `pid`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid and alive(int(stat.parent.name)):
                found.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return found
