"""Progress of a training loop: a tqdm bar on a terminal, a periodic status line everywhere else.

On a TTY the bar is drawn on stderr and the run's log lines are written above it (through the console
handlers of the root logger). Off a TTY (a SLURM log, a pipe, `nohup`), a bar would be either invisible
or a wall of carriage returns; instead one line goes through `logging` every `every_s` seconds:

    step 1200/3100 (38.7%)  loss 0.4312  acc 0.8750  21.3 steps/s  ETA 1m29s

so it also lands in the run's log file (`<run dir>/train.log`). Only the caller that owns the run's
output (rank 0) creates an enabled `Progress`.
"""
from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from tqdm import tqdm

log = logging.getLogger(__name__)


def duration(seconds: float) -> str:
    """`42s`, `3m07s`, `2h05m`."""
    s = max(int(round(seconds)), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def status_line(step: int, total: int, rate: float, metrics: dict[str, str]) -> str:
    """One status line: step, percent, the latest metrics, steps/s and the estimated time left."""
    pct = 100.0 * step / total if total else 100.0
    parts = [f"step {step}/{total} ({pct:.1f}%)", *(f"{k} {v}" for k, v in metrics.items())]
    if rate > 0:
        parts += [f"{rate:.3g} steps/s", f"ETA {duration((total - step) / rate)}"]
    return "  ".join(parts)


class _AboveBar:
    """A console stream whose writes go through `tqdm.write`, so log lines print above the bar."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        tqdm.write(text, file=self.stream, end="")

    def flush(self) -> None:
        self.stream.flush()


class Progress:
    """The bar's interface (`update`, `set_postfix`, `write`, `close`) with a status line off a TTY.

    enabled: False draws nothing and logs no status (`write` still logs). every_s: seconds between status
    lines off a TTY (0: none). stream: where the bar goes, and whose `isatty()` chooses bar or status."""

    def __init__(self, total: int, initial: int = 0, desc: str = "", enabled: bool = True, every_s: float = 30.0,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        stream = stream if stream is not None else sys.stderr
        tty = bool(getattr(stream, "isatty", lambda: False)())
        self.total, self.n, self.clock, self.every_s = total, initial, clock, every_s
        self.start_n, self.start = initial, clock()
        self.last = self.start
        self.metrics: dict[str, str] = {}
        self.status = enabled and not tty and every_s > 0
        self.bar = tqdm(total=total, initial=initial, file=stream, dynamic_ncols=True, mininterval=0.5,
                        desc=desc) if enabled and tty else None
        self._redirected: list[tuple[logging.StreamHandler, Any]] = []
        if self.bar is not None:
            for handler in logging.getLogger().handlers:   # console handlers write above the bar
                if isinstance(handler, logging.StreamHandler) and handler.stream in (sys.stdout, sys.stderr):
                    self._redirected.append((handler, handler.setStream(_AboveBar(handler.stream))))

    def set_postfix(self, **metrics: Any) -> None:
        self.metrics = {k: str(v) for k, v in metrics.items()}
        if self.bar is not None:
            self.bar.set_postfix(**metrics)

    def rate(self) -> float:
        """Steps per second since this object was created (a resumed run counts its own steps only)."""
        elapsed = self.clock() - self.start
        return (self.n - self.start_n) / elapsed if elapsed > 0 else 0.0

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.status and self.clock() - self.last >= self.every_s:
            self.last = self.clock()
            log.info(status_line(self.n, self.total, self.rate(), self.metrics))

    def write(self, line: str) -> None:
        """A line of the run's output (evaluation results): logged, above the bar when there is one."""
        log.info(line)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        for handler, stream in self._redirected:
            handler.setStream(stream)
        self._redirected = []
