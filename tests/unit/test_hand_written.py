"""Issue 25, item 4: each hand-written piece against the library that could replace it (docs/data-loading.md,
"Hand-written or library"). Where the library replaced it, the test compares the new code with the old
algorithm (kept here as the oracle); where the hand-written piece stays, it is checked against the library on a
small real-format file, so both the decision and the equivalence are pinned."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ssgd.run.launch_mpi import descendants


# -- launch_mpi.descendants: psutil replaced the /proc walk -----------------------------------------------
def proc_walk_descendants(pid: int) -> list[int]:
    """The replaced algorithm (ssgd before issue 25): parent links of every /proc/<pid>/stat, then a walk down."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


TREE = """
import subprocess, sys, time
depth = int(sys.argv[1])
kids = [subprocess.Popen([sys.executable, "-c", sys.argv[2], str(depth - 1), sys.argv[2]]) for _ in range(2 if depth else 0)]
print(*[k.pid for k in kids], flush=True)
time.sleep(60)
"""


@pytest.fixture
def process_tree():
    """(root, the pids below it): a root with 2 children, each with 2 children. Every process prints its own
    children's pids on the shared pipe (a leaf prints an empty line), so the 7 lines name all 6 and say that
    the tree is complete."""
    root = subprocess.Popen([sys.executable, "-c", TREE, "2", TREE], stdout=subprocess.PIPE, text=True)
    try:
        known = {int(pid) for _ in range(7) for pid in root.stdout.readline().split()}
        yield root, known
    finally:
        for pid in proc_walk_descendants(root.pid) if Path("/proc").is_dir() else []:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        root.kill()
        root.wait()


def test_descendants_are_the_known_tree(process_tree):
    root, known = process_tree
    assert len(known) == 6
    assert sorted(descendants(root.pid)) == sorted(known)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="the replaced /proc walk needs /proc")
def test_descendants_equal_the_replaced_proc_walk(process_tree):
    root, known = process_tree
    assert sorted(descendants(root.pid)) == sorted(proc_walk_descendants(root.pid)) == sorted(known)


def test_descendants_of_a_finished_process_are_none():
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    assert descendants(done.pid) == []
