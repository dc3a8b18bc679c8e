"""Selection under contention (issue 23 item 4): every selector quiet and beside a busy core, at 1 and 2 threads.

A training run keeps the cores busy (ranks, data loading, communication), and a selector that is fast
on a quiet machine may not stay so: the Top-k paper's cost argument (Shi, Chu, Cheung, See,
arXiv:1911.08772, Section 4: an exact Top-k is too slow, Gaussian-k's threshold is a few passes) holds
only where the passes get their cores. For d (default 25M, --quick 1M) and each of the 4 cases

    (quiet | busy) x (1 | 2 torch threads)

this times `compress(u, density)` of Top-k (`topk`: torch.topk over all d, the papers' baseline;
`topk_blocks`: the lab's, through block peaks), Gaussian-k, Random-k and DGC sampling on the same
u ~ N(0, 1), interleaved in rounds by bench/harness.py (`bench/selection.py`'s `time_selectors`: one
warm-up round, calls repeated until a round lasts >= --min-round-s, other processes' CPU measured per
round, a round over --noise-threshold cores repeated, then marked noisy). "busy": a spinning child
process (`while True: pass`) pinned to the last CPU this process may use, started before the case's
warm-up and stopped after it; being our child, its CPU counts as ours, not as noise.

Then, per selector, `choose_threads` picks the thread count for a busy machine (module rule below)
and reports the kept speed, quiet one-thread time / busy time at the chosen count (goal: >= 0.8).

    .venv/bin/python bench/selection_contention.py --quick     # d = 1e6, 3 rounds
    .venv/bin/python bench/selection_contention.py             # d = 2.5e7, 7 rounds (~5-12 min, estimated)

Writes <--results-dir>/selection_contention.csv (default bench/results) and prints the markdown table.
"""
from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))
import harness  # noqa: E402
import selection  # noqa: E402

METHODS = ("topk", "topk_blocks", "gaussiank", "randomk", "dgcsampling")
LOADS = ("quiet", "busy")
THREADS = (1, 2)
FULL_D, QUICK_D = 25_000_000, 1_000_000
FULL_ROUNDS, QUICK_ROUNDS = 7, 3
KEEP = 0.8          # the goal: a selector keeps >= 0.8 of its quiet one-thread speed under contention
TIE = 0.05          # thread counts within 5 % of the fastest count as equal: the fewer threads win
CSV_NAME = "selection_contention.csv"


@dataclass(frozen=True)
class Cell:
    """One (load, threads, method) cell: ms per call (median [min-max] over rounds), the other
    processes' CPU during the case (cores, max over rounds; None: unmeasured) and its noise mark."""

    load: str
    threads: int
    method: str
    d: int
    rounds: int
    median_ms: float
    min_ms: float
    max_ms: float
    other_cores_max: float | None
    noisy: bool | None


def choose_threads(busy_ms: dict[int, float], tie: float = TIE) -> int:
    """The thread count to run a selection pass with on a busy machine, from its busy times
    {threads: ms}: the fewest threads whose time is within `tie` (relative) of the fastest. A
    memory-bound pass (a threshold's mean/std or a count over u) gains nothing from a second thread
    that must share the busy core, so it gets 1; a pass that does gain more than `tie` keeps it.
    ValueError for no times or a time that is not positive."""
    if not busy_ms or any(not t > 0 for t in busy_ms.values()):
        raise ValueError(f"choose_threads: needs positive times per thread count, got {busy_ms}")
    best = min(busy_ms.values())
    return min(n for n, t in busy_ms.items() if t <= best * (1 + tie))


def kept_speed(cells: list[Cell], method: str, threads: int) -> float:
    """Quiet one-thread time / busy time at `threads` for `method` (1.0: contention costs nothing)."""
    t = {(c.load, c.threads): c.median_ms for c in cells if c.method == method}
    return t[("quiet", 1)] / t[("busy", threads)]


def spinner() -> subprocess.Popen:
    """A child process that spins on the last CPU this process may use (the busy core)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(proc.pid, {cpus[-1]})
    return proc


def measure(d: int, rounds: int, density: float, noise: harness.Noise, methods: tuple[str, ...] = METHODS,
            seed: int = 0, progress=print) -> list[Cell]:
    """Every (load, threads) case of `methods` on one u ~ N(0, 1) of d entries (module docstring)."""
    u = selection.make_vector("normal", d, seed, "cpu")
    cells: list[Cell] = []
    before = torch.get_num_threads()
    try:
        for load in LOADS:
            for threads in THREADS:
                torch.set_num_threads(threads)
                selectors = {m: selection.METHODS[m](seed) for m in methods}
                spin = spinner() if load == "busy" else None
                try:
                    series, _ = selection.time_selectors(selectors, u, density, rounds, noise)
                finally:
                    if spin is not None:
                        spin.kill()
                        spin.wait()
                info = series.to_json()
                for m in methods:
                    sp = series.spread(m)
                    cells.append(Cell(load, threads, m, d, len(series.rounds), 1e3 * sp.median, 1e3 * sp.lo,
                                      1e3 * sp.hi, info["other_cores_max"], series.noisy))
                progress(f"{load}, {threads} thread(s): " + ", ".join(
                    f"{c.method} {c.median_ms:.3g} ms" for c in cells[-len(methods):])
                    + f" (other CPU {harness.noise_cell(info)})")
    finally:
        torch.set_num_threads(before)
    return cells


def markdown(cells: list[Cell]) -> str:
    """The table of docs/selection-cost.md#selection-under-contention: ms per call per case, the thread
    count `choose_threads` picks when busy, and the speed kept there."""
    methods = list(dict.fromkeys(c.method for c in cells))
    at = {(c.method, c.load, c.threads): c for c in cells}
    head = ["selector", *(f"{load}, {t} thr (ms)" for load in LOADS for t in THREADS), "busy: threads chosen",
            f"kept speed (goal >= {KEEP})"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in methods:
        row = [m]
        for load in LOADS:
            for t in THREADS:
                c = at[(m, load, t)]
                row.append(f"{c.median_ms:.3g} [{c.min_ms:.3g}-{c.max_ms:.3g}]" + harness.mark(c.noisy))
        n = choose_threads({t: at[(m, "busy", t)].median_ms for t in THREADS})
        keep = kept_speed(cells, m, n)
        row += [str(n), f"{keep:.2f}" + ("" if keep >= KEEP else " (below)")]
        lines.append("| " + " | ".join(row) + " |")
    d = cells[0].d if cells else 0
    return f"Selection under contention, d = {d:,}, u ~ N(0, 1):\n\n" + "\n".join(lines)


def write_csv(cells: list[Cell], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(Cell.__dataclass_fields__))
        w.writeheader()
        for c in cells:
            w.writerow(asdict(c))


def read_csv(path: Path) -> list[Cell]:
    """The cells `write_csv` wrote (for paper_figs and the docs table)."""
    def opt(x: str, kind):
        return None if x in ("", "None") else kind(x)
    with path.open() as f:
        return [Cell(r["load"], int(r["threads"]), r["method"], int(r["d"]), int(r["rounds"]), float(r["median_ms"]),
                     float(r["min_ms"]), float(r["max_ms"]), opt(r["other_cores_max"], float),
                     opt(r["noisy"], lambda s: s == "True")) for r in csv.DictReader(f)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/selection_contention.py", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"d = {QUICK_D:,}, {QUICK_ROUNDS} rounds")
    ap.add_argument("--d", type=float, default=None, help=f"vector length (default {FULL_D:,}; --quick {QUICK_D:,})")
    ap.add_argument("--rounds", type=int, default=None, help=f"rounds per case (default {FULL_ROUNDS})")
    ap.add_argument("--density", type=float, default=0.001)
    ap.add_argument("--results-dir", type=Path, default=selection.RESULTS)
    harness.add_noise_arguments(ap)
    args = ap.parse_args(argv)
    d = int(args.d) if args.d is not None else (QUICK_D if args.quick else FULL_D)
    rounds = args.rounds if args.rounds is not None else (QUICK_ROUNDS if args.quick else FULL_ROUNDS)
    problem = harness.noise_problem(args)
    if problem is None and (d < 1 or rounds < 1 or not 0 < args.density <= 1):
        problem = f"--d {d} and --rounds {rounds} must be >= 1, --density {args.density} in (0, 1]"
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    noise = harness.noise_from_args(args, quick=args.quick)
    cells = measure(d, rounds, args.density, noise)
    print(markdown(cells))
    print(harness.describe_method(noise.threshold, noise.retries))
    write_csv(cells, args.results_dir / CSV_NAME)
    return 0


if __name__ == "__main__":
    sys.exit(main())
