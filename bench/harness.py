"""The one measurement harness of every benchmark: interleaved rounds, ratios with spread, and the CPU
that other processes used meanwhile.

A benchmark compares a few things A, B, C (implementations, tools, thread counts). `interleaved`
runs them in rounds, A B C, A B C, ... (never all A then all B), so that a slow phase of the machine
hits every compared thing alike, and reports per round one time per thing. A ratio A / B is taken
inside each round and summarised over rounds as the median with its spread (min-max and quartiles).

**Noise.** During each round, `NoiseMeter` measures the CPU that processes *outside this benchmark's
process tree* used, in cores (CPU-seconds per wall second):

    other = (busy CPU time of the whole machine, from /proc/stat)
          - (CPU time of this benchmark's process tree)

* machine busy time: the first `cpu` line of /proc/stat, user + nice + system + irq + softirq +
  steal (steal: time the hypervisor gave to other guests, i.e. CPU this machine's work did not
  get), in USER_HZ ticks (10 ms), summed over all CPUs of the machine the kernel shows;
* the tree: the root process (by default this one) and every process whose parent chain leads to
  it (found by scanning /proc/<pid>/stat), e.g. `mpiexec` and its MPI ranks, or a benchmark's worker
  processes. Per process: its CPU clock (`clock_gettime` of the process CPU-time clock: user +
  system of all its threads, living or exited, in nanoseconds) plus the user + system time of its
  children that it has already reaped (`cutime + cstime` of /proc/<pid>/stat, in ticks).

Limits (each errs towards reporting MORE other CPU, so a quiet verdict can be trusted; a noisy one
may occasionally be a false alarm):
  * tick granularity: /proc/stat and the reaped-children times move in 10 ms ticks (error up to
    about +-2 ticks per CPU per interval), so rounds shorter than ~0.3 s are noisy by arithmetic
    alone; `min_round_s` repeats the calls inside a round until it lasts that long.
  * a tree process that exits and is not yet reaped at the end of a round, or one that is
    re-parented away from the tree (a daemon that double-forks), is counted as "other".
  * kernel work done on the benchmark's behalf in kernel threads (not in its own system time) is
    counted as "other".
  * /proc/stat counts the CPUs the kernel shows; inside a container that shows the host's CPUs,
    other tenants count as "other" even if they run on CPUs the benchmark cannot use.
Where there is no /proc (not Linux) the noise is unmeasured: rows say so ("unmeasured").

**Retries.** When `other` exceeds the benchmark's threshold (cores) during a round, the round is
repeated, at most `retries` times; the last attempt is kept. A comparison with any kept round
still over the threshold is *noisy*: its ratios and times are printed with the mark "noisy" in
every table (`ratio_cell`, `time_cell`, `noise_cell`), never bare.

Standard library only at module level (the DLBench drivers and workers in any environment import
this file); numpy and mpi4py only inside `MPIShare`.
"""
from __future__ import annotations

import math
import os
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_THRESHOLD_CORES = 0.2     # other processes' CPU during a round above which it is repeated / noisy
DEFAULT_RETRIES = 2               # repeats of a noisy round before the row is marked noisy
DEFAULT_MIN_ROUND_S = 0.3         # rounds at least this long: /proc/stat counts 10 ms ticks
NOISY = "noisy"
UNMEASURED = "unmeasured"

try:
    CLK_TCK = os.sysconf("SC_CLK_TCK")
except (AttributeError, ValueError, OSError):
    CLK_TCK = 100


# ----------------------------------------------------------------------------------------------
# CPU accounting from /proc
# ----------------------------------------------------------------------------------------------
def machine_busy_seconds(stat_path: str = "/proc/stat") -> float | None:
    """CPU-seconds the whole machine has been busy since boot (all CPUs), or None without /proc/stat."""
    try:
        with open(stat_path) as f:
            fields = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    if len(fields) < 8:
        fields += [0] * (8 - len(fields))
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (index 0 = state), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()


def process_parents() -> dict[int, int]:
    """{pid: parent pid} of every process visible in /proc."""
    parents = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                parents[int(entry.name)] = int(fields[1])
    return parents


def tree_pids(root: int) -> list[int]:
    """`root` and all its descendants (by parent chain), as /proc shows them now."""
    children: dict[int, list[int]] = {}
    for pid, ppid in process_parents().items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def process_cpu_seconds(pid: int) -> float:
    """CPU time of process `pid` (all its threads, exited ones included) plus that of its reaped
    children; 0 if the process is gone."""
    try:
        own = time.clock_gettime(((~pid) << 3) | 2)       # the process CPU-time clock of `pid` (CPUCLOCK_SCHED)
    except OSError:
        return 0.0
    fields = _stat_fields(pid)
    reaped = (int(fields[13]) + int(fields[14])) / CLK_TCK if fields is not None else 0.0   # cutime + cstime
    return own + reaped


def tree_cpu_seconds(root: int) -> float:
    """CPU-seconds used so far by `root`'s process tree (see the module docstring)."""
    return sum(process_cpu_seconds(pid) for pid in tree_pids(root))


@dataclass(frozen=True)
class Interval:
    """One measured interval: wall seconds and CPU use in cores (CPU-seconds per wall second)."""

    wall_s: float
    busy_cores: float          # the whole machine
    own_cores: float           # the benchmark's process tree
    other_cores: float         # busy - own, clamped at 0


class NoiseMeter:
    """Measures, between `start()` and `stop()`, the CPU other processes used (module docstring).

    root: the process whose tree is "ours" (default: this process). `stop()` returns None where
    /proc/stat is missing.
    """

    def __init__(self, root: int | None = None) -> None:
        self.root = os.getpid() if root is None else root
        self._start: tuple[float, float | None, float] | None = None

    def start(self) -> None:
        own = tree_cpu_seconds(self.root)
        self._start = (own, machine_busy_seconds(), time.perf_counter())

    def stop(self) -> Interval | None:
        if self._start is None:
            raise RuntimeError("NoiseMeter.stop() before start()")
        wall = time.perf_counter()
        busy = machine_busy_seconds()
        own = tree_cpu_seconds(self.root)
        own0, busy0, wall0 = self._start
        self._start = None
        if busy is None or busy0 is None:
            return None
        span = max(wall - wall0, 1e-9)
        busy_c, own_c = (busy - busy0) / span, (own - own0) / span
        return Interval(span, busy_c, own_c, max(busy_c - own_c, 0.0))


class NullMeter:
    """A meter that measures nothing (MPI ranks other than the one that measures)."""

    def start(self) -> None:
        pass

    def stop(self) -> Interval | None:
        return None


# ----------------------------------------------------------------------------------------------
# statistics
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Spread:
    """Median of some values with their min, max and quartiles (inclusive method), n values."""

    median: float
    lo: float
    hi: float
    q1: float
    q3: float
    n: int

    @staticmethod
    def of(values: Sequence[float]) -> Spread:
        v = sorted(float(x) for x in values)
        if not v:
            nan = float("nan")
            return Spread(nan, nan, nan, nan, nan, 0)
        q = statistics.quantiles(v, n=4, method="inclusive") if len(v) > 1 else [v[0]] * 3
        return Spread(statistics.median(v), v[0], v[-1], q[0], q[2], len(v))

    def to_json(self) -> dict[str, float]:
        return {"median": self.median, "lo": self.lo, "hi": self.hi, "q1": self.q1, "q3": self.q3, "n": self.n}

    @staticmethod
    def from_json(d: dict[str, float]) -> Spread:
        return Spread(d["median"], d["lo"], d["hi"], d["q1"], d["q3"], int(d["n"]))


@dataclass(frozen=True)
class Round:
    """One kept round: the time of each compared thing (median of its `inner` calls in the round),
    the other processes' CPU (cores; None = unmeasured), how many attempts it took, and the other
    CPU of every attempt."""

    index: int
    times: dict[str, float]
    other_cores: float | None
    noisy: bool
    attempts: int
    wall_s: float
    attempts_other_cores: list[float | None] = field(default_factory=list)


@dataclass
class Series:
    """The result of `interleaved`: kept rounds plus the settings they were measured with."""

    names: list[str]
    rounds: list[Round]
    threshold_cores: float
    retries: int
    inner: int

    def values(self, name: str) -> list[float]:
        return [r.times[name] for r in self.rounds]

    def spread(self, name: str) -> Spread:
        return Spread.of(self.values(name))

    def median(self, name: str) -> float:
        return self.spread(name).median

    def ratio(self, a: str, b: str) -> Spread:
        """Per-round time(a) / time(b), summarised over rounds."""
        return Spread.of([r.times[a] / r.times[b] for r in self.rounds])

    @property
    def noisy(self) -> bool | None:
        """True if any kept round stayed over the threshold; None if the noise was not measured."""
        if any(r.other_cores is None for r in self.rounds):
            return None
        return any(r.noisy for r in self.rounds)

    def to_json(self) -> dict[str, Any]:
        others = [r.other_cores for r in self.rounds if r.other_cores is not None]
        return {
            "names": self.names, "threshold_cores": self.threshold_cores, "retries": self.retries,
            "inner": self.inner, "noisy": self.noisy,
            "other_cores_max": max(others) if others else None,
            "other_cores_median": statistics.median(others) if others else None,
            "repeated_rounds": sum(r.attempts - 1 for r in self.rounds),
            "noisy_rounds": sum(1 for r in self.rounds if r.noisy),
            "rounds": [{"times": r.times, "other_cores": r.other_cores, "noisy": r.noisy, "attempts": r.attempts,
                        "wall_s": r.wall_s, "attempts_other_cores": r.attempts_other_cores} for r in self.rounds],
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> Series:
        rounds = [Round(i, r["times"], r["other_cores"], r["noisy"], r["attempts"], r["wall_s"],
                        r.get("attempts_other_cores", [])) for i, r in enumerate(d["rounds"])]
        return Series(d["names"], rounds, d["threshold_cores"], d["retries"], d["inner"])


# ----------------------------------------------------------------------------------------------
# interleaved rounds
# ----------------------------------------------------------------------------------------------
class Share:
    """How the processes that measure one comparison agree (identity in one process).

    times(rows) -> rows: combine every process's per-call times (list of `inner` rows, one value
    per compared thing) into the times that count (MPI: the max over ranks, i.e. the slowest rank).
    other(x) -> x: the other-CPU value every process uses (MPI: the measuring rank's, broadcast).
    """

    def times(self, rows: list[list[float]]) -> list[list[float]]:
        return rows

    def other(self, value: float | None) -> float | None:
        return value


class MPIShare(Share):
    """Agreement across the ranks of `comm`: per-call max over ranks; rank `root` measures the noise."""

    def __init__(self, comm: Any, root: int = 0) -> None:
        self.comm, self.root = comm, root

    def times(self, rows: list[list[float]]) -> list[list[float]]:
        import numpy as np
        from mpi4py import MPI

        mine = np.asarray(rows, dtype=np.float64)
        out = np.empty_like(mine)
        self.comm.Allreduce(mine, out, op=MPI.MAX)
        return out.tolist()

    def other(self, value: float | None) -> float | None:
        return self.comm.bcast(value, root=self.root)


class ClockShare(MPIShare):
    """`MPIShare` for ranks that read one clock: processes on one machine (the testbed's namespaces too) share
    CLOCK_MONOTONIC, which `time.perf_counter` reads on Linux. A call's time then counts from the moment the
    LAST rank entered it to the moment the last rank left it: the collective's own time once every rank is in,
    which is what a model that starts every rank at once (`ssgd.perf.cost`) describes. The slowest rank's
    duration (`MPIShare`) also holds the spread of the ranks' exits from the barrier before the call (its
    `skew`), up to a message latency.

    Time each call with `timed(fn)` (every call of every item, in the order the harness makes them); after
    each kept round call `keep()`: `kept` then holds, per kept call, each item's slowest-rank duration and
    entry skew (a repeated round's attempts are dropped, as the harness drops them).
    """

    def __init__(self, comm: Any, root: int = 0) -> None:
        super().__init__(comm, root)
        self.entries: list[float] = []
        self.latest: dict[str, list[list[float]]] = {}
        self.kept: dict[str, list[list[float]]] = {"slowest": [], "skew": []}

    def timed(self, fn: Callable[[], Any]) -> float:
        start = time.perf_counter()
        fn()
        end = time.perf_counter()
        self.entries.append(start)
        return end - start

    def times(self, rows: list[list[float]]) -> list[list[float]]:
        import numpy as np

        took = np.asarray(rows, dtype=np.float64)
        if len(self.entries) != took.size:
            raise RuntimeError(f"ClockShare: {len(self.entries)} timed calls for {took.size} times")
        entered = np.asarray(self.entries, dtype=np.float64).reshape(took.shape)
        self.entries.clear()
        size = self.comm.Get_size()
        every_entry, every_took = np.empty((size, *took.shape)), np.empty((size, *took.shape))
        self.comm.Allgather(entered, every_entry)
        self.comm.Allgather(took, every_took)
        last_in = every_entry.max(axis=0)
        self.latest = {"slowest": every_took.max(axis=0).tolist(),
                       "skew": (last_in - every_entry.min(axis=0)).tolist()}
        return ((every_entry + every_took).max(axis=0) - last_in).tolist()

    def keep(self) -> None:
        for key in self.kept:
            self.kept[key] += self.latest.get(key, [])

    def take(self) -> dict[str, list[list[float]]]:
        """What `keep` collected since the last `take`, and start anew (one comparison's calls)."""
        kept, self.kept = self.kept, {key: [] for key in self.kept}
        return kept


def mpi_meter(comm: Any, tree_root: int | None, root: int = 0) -> NoiseMeter | NullMeter:
    """The meter of an MPI job: on rank `root`, the tree of `tree_root` (the benchmark driver that
    started mpiexec, so mpiexec and every rank are "ours"); a NullMeter on the other ranks."""
    if comm.Get_rank() != root:
        return NullMeter()
    return NoiseMeter(tree_root if tree_root is not None else os.getppid())


def wait_ranks(procs: Sequence[Any], timeout: float, t0: float, hint: str = "") -> str:
    """Wait for every rank process (`subprocess.Popen`) until `timeout` seconds after `t0` (perf_counter);
    "ok", or one line: the time-out (`hint` appended) or the first non-zero exit status. Ranks still running
    at the end are killed and reaped."""
    status = "ok"
    for p in procs:
        try:
            p.wait(timeout=max(timeout - (time.perf_counter() - t0), 1.0))
        except subprocess.TimeoutExpired:
            status = f"timed out after {timeout:.0f} s{hint}"
            break
        if p.returncode != 0 and status == "ok":
            status = f"a rank ended with exit status {p.returncode}"
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    return status


def timed(fn: Callable[[], Any]) -> Callable[[], float]:
    """fn -> a callable that runs fn once and returns its wall seconds."""
    def run() -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    return run


def interleaved(items: Sequence[tuple[str, Callable[[], float]]], rounds: int, *,
                threshold: float = DEFAULT_THRESHOLD_CORES, retries: int = DEFAULT_RETRIES, warmup: int = 1,
                min_round_s: float = 0.0, max_inner: int = 1000, meter: Any = None, share: Share | None = None,
                on_round: Callable[[Round], None] | None = None) -> Series:
    """Run `items` (name, fn) in `rounds` interleaved rounds; fn() does one call and returns its seconds.

    1. `warmup` untimed rounds, each item once, in order. The last one calibrates `inner`: the calls
       per item per round, ceil(min_round_s / warm-up round time), in [1, max_inner].
    2. Each round: `inner` times the items in order (A B C A B C ...), under `meter`
       (default: a NoiseMeter of this process's tree). Per item, the round's time is the median of
       its `inner` calls. If the other processes' CPU exceeds `threshold` cores, the round is run
       again, at most `retries` times; the last attempt is kept (noisy if still over).
    `share` makes several processes (MPI ranks) agree on times and noise; `on_round` sees each
    kept round (progress lines).
    """
    if rounds < 1 or retries < 0 or warmup < 0:
        raise ValueError("rounds must be >= 1, retries and warmup >= 0")
    meter = NoiseMeter() if meter is None else meter
    share = share or Share()
    names = [name for name, _ in items]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate item names in {names}")
    inner = 1
    for _ in range(warmup):
        (warm,) = share.times([[fn() for _, fn in items]])
        if min_round_s > 0:
            inner = max(1, min(max_inner, math.ceil(min_round_s / max(sum(warm), 1e-9))))
    kept: list[Round] = []
    for index in range(rounds):
        tried: list[float | None] = []
        for attempt in range(retries + 1):
            meter.start()
            t0 = time.perf_counter()
            rows = [[fn() for _, fn in items] for _ in range(inner)]
            rows = share.times(rows)
            wall = time.perf_counter() - t0
            interval = meter.stop()
            other = share.other(None if interval is None else interval.other_cores)
            tried.append(other)
            noisy = other is not None and other > threshold
            if not noisy or attempt == retries:
                break
        times = {name: statistics.median(row[j] for row in rows) for j, name in enumerate(names)}
        kept.append(Round(index, times, other, noisy, attempt + 1, wall, tried))
        if on_round is not None:
            on_round(kept[-1])
    return Series(names, kept, threshold, retries, inner)


# ----------------------------------------------------------------------------------------------
# command-line flags shared by every benchmark
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Noise:
    """How a benchmark handles noise: threshold (cores of other processes' CPU), retries per round,
    minimum round length (seconds)."""

    threshold: float = DEFAULT_THRESHOLD_CORES
    retries: int = DEFAULT_RETRIES
    min_round_s: float = DEFAULT_MIN_ROUND_S


def add_noise_arguments(ap: Any) -> None:
    """--noise-threshold, --retries, --min-round-s on an argparse parser."""
    ap.add_argument("--noise-threshold", type=float, default=DEFAULT_THRESHOLD_CORES,
                    help="cores of other processes' CPU during a round above which it is repeated, then marked "
                         "noisy (default %(default)s)")
    ap.add_argument("--retries", type=int, default=None,
                    help=f"repeats of a noisy round (default {DEFAULT_RETRIES}; 1 with --quick)")
    ap.add_argument("--min-round-s", type=float, default=DEFAULT_MIN_ROUND_S,
                    help="calls are repeated inside a round until it lasts this long (default %(default)s)")


def noise_problem(args: Any) -> str | None:
    """The first problem with the noise flags as one line, or None."""
    if args.noise_threshold <= 0:
        return f"--noise-threshold {args.noise_threshold}: must be > 0"
    if args.retries is not None and args.retries < 0:
        return f"--retries {args.retries}: must be >= 0"
    if args.min_round_s < 0:
        return f"--min-round-s {args.min_round_s}: must be >= 0"
    return None


def noise_from_args(args: Any, quick: bool = False) -> Noise:
    """The Noise of parsed flags (`--retries` defaults to 1 in quick modes)."""
    retries = args.retries if args.retries is not None else (1 if quick else DEFAULT_RETRIES)
    return Noise(args.noise_threshold, retries, args.min_round_s)


# ----------------------------------------------------------------------------------------------
# rendering: a number from a noisy measurement is never printed without its mark
# ----------------------------------------------------------------------------------------------
def mark(noisy: bool | None) -> str:
    """'' when quiet, ' (noisy)' when noisy, ' (unmeasured)' when the noise could not be measured."""
    if noisy is None:
        return f" ({UNMEASURED})"
    return f" ({NOISY})" if noisy else ""


def fmt_num(x: float, digits: int = 3) -> str:
    if x != x:        # nan
        return "nan"
    return f"{x:.{digits}g}" if abs(x) < 10 ** digits else f"{x:.0f}"


def ratio_cell(s: Spread | dict, noisy: bool | None, digits: int = 3) -> str:
    """'0.93 [0.88-1.02]' (median [min-max] over rounds), with the noise mark."""
    s = Spread.from_json(s) if isinstance(s, dict) else s
    return f"{fmt_num(s.median, digits)} [{fmt_num(s.lo, digits)}-{fmt_num(s.hi, digits)}]" + mark(noisy)


def time_cell(seconds: float, noisy: bool | None, unit: str = "ms") -> str:
    """A median time in ms (or s), with the noise mark."""
    scale = 1e3 if unit == "ms" else 1.0
    return fmt_num(scale * seconds) + mark(noisy)


def noise_cell(series: Series | dict) -> str:
    """'0.05' (max over kept rounds of the other processes' CPU, cores), plus how many rounds were
    repeated and, when noisy, how many rounds stayed over the threshold."""
    d = series.to_json() if isinstance(series, Series) else series
    if d["other_cores_max"] is None:
        return UNMEASURED
    text = f"{d['other_cores_max']:.2f}"
    extra = []
    if d["repeated_rounds"]:
        extra.append(f"{d['repeated_rounds']} repeated")
    if d["noisy"]:
        extra.append(f"{NOISY}: {d['noisy_rounds']}/{len(d['rounds'])} rounds > {d['threshold_cores']:g}")
    return text + (f" ({', '.join(extra)})" if extra else "")


def settings_line(series: Series | dict, rounds_label: str = "rounds") -> str:
    """'7 rounds x 3 calls, noise threshold 0.2 cores, <= 2 repeats per round' for table captions."""
    d = series.to_json() if isinstance(series, Series) else series
    return (f"{len(d['rounds'])} {rounds_label} x {d['inner']} call(s) per item, noise threshold "
            f"{d['threshold_cores']:g} cores of other processes, <= {d['retries']} repeats per round")


NOISE_COLUMN = "other CPU, cores (max over rounds)"


def describe_method(threshold: float, retries: int) -> str:
    """One sentence for a benchmark's output saying how noise was handled."""
    return (f"Noise: CPU used by processes outside this benchmark during each round (/proc/stat minus this "
            f"benchmark's process tree); a round above {threshold:g} cores is repeated (<= {retries} times), "
            f"and a comparison with a round still above it is marked '{NOISY}'.")
