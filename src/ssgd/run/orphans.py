"""No orphans: every process the lab starts dies soon after the process that started it, however that one
died (SIGKILL, SIGHUP, the OOM killer).

Two mechanisms, one per kind of child:

- `die_with_parent_preexec(signum)`: a `subprocess.Popen(preexec_fn=...)` hook that asks Linux to send the
  child `signum` when its parent dies (`prctl(PR_SET_PDEATHSIG)`, prctl(2)). Used for Open MPI's
  `mpiexec`/`prterun`, which is not our code: on SIGTERM it stops its ranks itself.
- `watch_parent()`: a daemon thread in every rank (MPI and torch.distributed) that polls `os.getppid()`;
  once the parent is gone (the rank was re-parented) it sends the rank SIGTERM, so it stops as a scheduler's
  preemption would, and after `grace_s` more it kills the rank outright. A thread rather than PDEATHSIG
  because PR_SET_PDEATHSIG fires when the parent *thread* that forked exits, and a launcher such as prterun
  may fork from a thread that ends before it does.

Both are no-ops where they do not apply (not Linux; no libc).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
POLL_S = 0.5
GRACE_S = 6.0
"""Seconds between the SIGTERM a watched rank sends itself and its SIGKILL: with POLL_S, a rank whose
launcher died is gone within 10 s whatever it was doing."""


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


def die_with_parent_preexec(signum: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A preexec_fn that makes the child receive `signum` when its parent dies, or None off Linux. The
    libc function is resolved here, before the fork, so the child only makes one system call."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if os.getppid() != parent:            # the parent died before prctl took effect
            os.kill(os.getpid(), int(signum))

    return preexec


def watch_parent(poll_s: float = POLL_S, grace_s: float = GRACE_S) -> threading.Thread | None:
    """Start the daemon thread that stops this process once its parent is gone: SIGTERM at once (the
    run's stop handler checkpoints at the next step boundary), SIGKILL `grace_s` later. Returns the
    thread, or None when this process has no parent to watch (pid 1 already)."""
    parent = os.getppid()
    if parent <= 1:
        return None

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        print(f"error: the launcher (pid {parent}) of this rank (pid {os.getpid()}) died; stopping",
              file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="watch-parent", daemon=True)
    thread.start()
    return thread
