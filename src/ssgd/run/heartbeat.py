"""Per-rank heartbeats of a `backend=mpi` job, and the launcher's watch over them (`mpi.timeout_s`).

A rank that stops making progress (SIGSTOP, a frozen host, a process swapped out for minutes) hangs an
MPI job forever: its peers wait in a collective, and MPI itself never times out. So every rank that
`ssgd.run.launch_mpi.launch` starts runs a daemon thread (`Heartbeat`) that rewrites one small file a
second, `<run dir>/mpi/heartbeat/rank<r>.json` (atomically: a temporary file, then a rename):

    {"rank": 1, "host": "vm", "pid": 4242, "beat": 17, "time": 1764763200.5, "step": 12, "phase": "compute"}

`beat` counts the writes (1, 2, ...), `time` is the rank's wall clock (seconds since the epoch), `step`
the optimizer steps the rank has finished, `phase` what its main thread is doing: `start` (before the
trainer exists), `compute` (between collectives), `collective:<name>` (inside one: `collective`,
`allgather`, `gather_root`, `barrier`) or `done` (the rank has finished and is about to exit).

A stopped process stops all its threads, so its file goes stale, while a rank blocked in a collective
but alive keeps beating. The launcher (`Watch`) reads the files every half second and judges
staleness by its own monotonic clock (when it last saw `beat` change), so clocks of other hosts never
matter: a rank whose beat has not changed for `mpi.timeout_s` seconds (or that never beat within
`mpi.timeout_s` + STARTUP_S of the job's start) ends the job with one line naming the rank and its host.
A rank whose last record says `done` is never judged. Ranks that all beat but of which none finishes a
step for `mpi.timeout_s` (`Watch.stuck`: alive and blocked, as when a host's link is down) end the job
too; the line then names the hosts that do not answer on the network (`ssgd.run.reach`).
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ssgd.run import reach

HEARTBEAT_ENV = "SSGD_HEARTBEAT_DIR"     # set by the launcher for its ranks: where they beat
HEARTBEAT_DIR = Path("mpi") / "heartbeat"
PERIOD_S = 1.0                           # a rank's beat period
STARTUP_S = 30.0                         # extra time for a rank's first beat (interpreter and MPI start-up)
COLLECTIVES = ("collective", "allgather", "gather_root", "barrier")
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")   # Open MPI, PMIx, MPICH


def rank_from_env(environ: dict[str, str] | os._Environ) -> int | None:
    """This process's MPI rank from its launcher's environment (before MPI is asked), or None."""
    for name in RANK_VARIABLES:
        value = environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def record_path(folder: Path, rank: int) -> Path:
    return folder / f"rank{rank}.json"


class Heartbeat:
    """One rank's beat: a daemon thread that rewrites `record_path(folder, rank)` every `period` seconds.

    `progress` (set by `track`) returns the finished steps; `phase` is set by the rank's main thread
    (`wrap_world` marks every collective)."""

    def __init__(self, folder: Path, rank: int, period: float = PERIOD_S) -> None:
        self.folder, self.rank, self.period = Path(folder), rank, period
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.beat, self.phase = 0, "start"
        self.progress: Callable[[], int] = lambda: 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ssgd-heartbeat", daemon=True)

    def record(self) -> dict[str, Any]:
        return {"rank": self.rank, "host": self.host, "pid": self.pid, "beat": self.beat, "time": time.time(),
                "step": int(self.progress()), "phase": self.phase}

    def write(self) -> None:
        """One beat (never raises: a rank must not fail because its heartbeat cannot be written)."""
        self.beat += 1
        path = record_path(self.folder, self.rank)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(self.record()))
            os.replace(tmp, path)
        except (OSError, ValueError, TypeError, AttributeError):
            try:
                tmp.unlink(missing_ok=True)   # a full disk: no partial temporary file left behind
            except OSError:
                pass

    def _run(self) -> None:
        while not self._stop.is_set():
            self.write()
            self._stop.wait(self.period)

    def start(self) -> "Heartbeat":
        self.write()
        self._thread.start()
        return self

    def track(self, trainer: Any) -> None:
        """Report `trainer.step_count` as the step from now on."""
        self.progress = lambda: getattr(trainer, "step_count", 0)

    def done(self) -> None:
        """The last beat: `done`, then the thread stops (the launcher never judges a finished rank)."""
        self._stop.set()
        self.phase = "done"
        self.write()


def wrap_world(world: Any, beat: Heartbeat) -> None:
    """Mark `beat.phase` as `collective:<name>` while `world` is inside each of its COLLECTIVES."""
    for name in COLLECTIVES:
        method = getattr(world, name, None)
        if method is None:
            continue

        def inside(*args: Any, _method: Callable = method, _name: str = name, **kwargs: Any) -> Any:
            before, beat.phase = beat.phase, f"collective:{_name}"
            try:
                return _method(*args, **kwargs)
            finally:
                beat.phase = before

        setattr(world, name, inside)


def start_from_env(environ: dict[str, str] | os._Environ | None = None) -> Heartbeat | None:
    """The rank's Heartbeat, started, when its launcher asked for one (HEARTBEAT_ENV); else None."""
    environ = os.environ if environ is None else environ
    folder, rank = environ.get(HEARTBEAT_ENV), rank_from_env(environ)
    if not folder or rank is None:
        return None
    return Heartbeat(Path(folder), rank).start()


class Watch:
    """The launcher's view of its P ranks' heartbeats in `folder`: `stale()` names a rank that made no
    progress for `timeout_s` seconds (see the module docstring). `clock` is the launcher's monotonic clock."""

    def __init__(self, folder: Path, P: int, timeout_s: float, clock: Callable[[], float] = time.monotonic,
                 hosts: list[str] | None = None) -> None:
        self.folder, self.P, self.timeout_s, self.clock = Path(folder), P, float(timeout_s), clock
        self.hosts = hosts                   # rank -> address of its host (the hostfile), to probe in `stuck`
        self.started = clock()
        self.seen: dict[int, tuple[int, float, dict[str, Any]]] = {}   # rank -> (beat, when it changed, record)
        self.progress: tuple[int, float] | None = None                   # (most steps of any rank, since when)

    def read(self) -> None:
        now = self.clock()
        for rank in range(self.P):
            try:
                record = json.loads(record_path(self.folder, rank).read_text())
                beat = int(record["beat"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            last = self.seen.get(rank)
            if last is None or last[0] != beat:
                self.seen[rank] = (beat, now, record)

    def stale(self) -> tuple[int, dict[str, Any] | None, float] | None:
        """(rank, its last record or None, seconds since its beat last changed) of the first rank judged
        stopped, or None."""
        self.read()
        now = self.clock()
        for rank in range(self.P):
            last = self.seen.get(rank)
            if last is None:
                if now - self.started > self.timeout_s + STARTUP_S:
                    return rank, None, now - self.started
                continue
            beat, when, record = last
            if record.get("phase") != "done" and now - when > self.timeout_s:
                return rank, record, now - when
        return None

    def stuck(self) -> tuple[int, float] | None:
        """(steps, seconds) when every rank beats but none has finished a step for `timeout_s` seconds
        (STARTUP_S more before the first step): all alive and blocked, as when a host's link is down. Call
        after `stale()` (which reads the files); None otherwise."""
        now = self.clock()
        if len(self.seen) < self.P or any(rec.get("phase") == "done" for _, _, rec in self.seen.values()):
            return None
        steps = max(int(rec.get("step", 0)) for _, _, rec in self.seen.values())
        if self.progress is None or self.progress[0] != steps:
            self.progress = (steps, now)
            return None
        waited = now - self.progress[1]
        return (steps, waited) if waited > self.timeout_s + (STARTUP_S if steps == 0 else 0.0) else None

    def stuck_line(self, steps: int, seconds: float) -> str:
        """The one line for `stuck`, naming the hosts that do not answer on the network (`ssgd.run.reach`)."""
        phases = sorted({rec.get("phase", "?") for _, _, rec in self.seen.values()})
        where = reach.silent_hosts_note(self.hosts)
        return (f"backend=mpi: no rank finished a step for {seconds:.0f} s (mpi.timeout_s={self.timeout_s:g}) "
                f"although every rank is alive (heartbeats; at step {steps}, {', '.join(phases)}){where}; "
                "stopped the MPI job")

    def line(self, rank: int, record: dict[str, Any] | None, seconds: float) -> str:
        """The one line for a stale rank."""
        key = f"mpi.timeout_s={self.timeout_s:g}"
        if record is None:
            return (f"backend=mpi: rank {rank} made no progress for {seconds:.0f} s ({key}): it never wrote a "
                    f"heartbeat ({self.folder}); stopped the MPI job")
        return (f"backend=mpi: rank {rank} on host {record.get('host', '?')} made no progress for {seconds:.0f} s "
                f"({key}): its last heartbeat (pid {record.get('pid', '?')}) was at step {record.get('step', '?')}, "
                f"phase {record.get('phase', '?')}; stopped the MPI job (a stopped or frozen process: raise "
                f"mpi.timeout_s if its steps are that slow)")
