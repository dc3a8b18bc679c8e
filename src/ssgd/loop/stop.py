"""Stop a run at the next step boundary on SIGTERM or SIGINT, as a cluster's scheduler asks.

SLURM preempts a job with SIGTERM (and SIGKILL after its grace time); Ctrl-C sends SIGINT. The first such
signal only records the request: the trainer sees it at its next step boundary, writes a checkpoint and
ends with status 143 (SIGTERM) or 130 (SIGINT). A second signal stops at once, without a checkpoint.
SIGUSR1 and SIGUSR2 count as SIGTERM and SIGINT: `mpiexec` forwards those two to every rank, so the MPI
launcher sends them in place of the signal it received (SLURM's `--signal=USR1@60` works the same way).
SIGHUP (the terminal or ssh session is gone) stops like SIGTERM, with status 129.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ssgd.errors import Interrupted

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_MEANS = {signal.SIGTERM: signal.SIGTERM, signal.SIGINT: signal.SIGINT, signal.SIGHUP: signal.SIGHUP,
          signal.SIGUSR1: signal.SIGTERM, signal.SIGUSR2: signal.SIGINT}


def meaning(signum: int) -> signal.Signals:
    """SIGTERM or SIGINT: what a stop signal stands for (SIGUSR1 -> SIGTERM, SIGUSR2 -> SIGINT)."""
    return _MEANS.get(signal.Signals(signum), signal.Signals(signum))


def exit_status(signum: int) -> int:
    """128 + the signal number it stands for: 143 for SIGTERM, 130 for SIGINT (the shell's convention)."""
    return 128 + int(meaning(signum))


class StopRequest:
    """Whether a stop signal arrived; `installed()` makes this object the handler of the stop signals."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def request(self, signum: int = signal.SIGTERM) -> None:
        """Ask for a stop at the next step boundary (what the first signal does)."""
        if self.signum is None:
            self.signum = int(signum)

    def handle(self, signum: int, frame: object = None) -> None:
        if self.signum is not None:
            name = meaning(signum).name
            raise Interrupted(f"interrupted by {name} twice: stopped at once, without writing a checkpoint",
                              exit_status(signum), step=-1, checkpoint=None)
        self.request(signum)

    @contextmanager
    def installed(self, signals: tuple[int, ...] = STOP_SIGNALS) -> Iterator[StopRequest]:
        """Handle `signals` with this object inside the block (main thread only; elsewhere a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.signal(s, self.handle) for s in signals}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
