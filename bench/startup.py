"""How long `python src/train.py` takes to refuse bad input, and where a good run's start-up goes.

    python bench/startup.py                # make bench-startup
    python bench/startup.py --rounds 3 --out bench/results/startup.json

Cases, run as a user runs them (a fresh process each), interleaved in rounds (bench/harness.py):
a value-range error (`compressor.density=2`), an unknown key (`+foo=1`), a missing data path
(`dataset=cifar10 dataset.data_dir=<missing>`), and `--help`. Goals (issue: start-up): a config error
in under 2 s, a missing data path in under 3 s, on a quiet machine. Then one good run with
`--profile` (`trainer.max_steps=5`) prints the seconds of each start-up phase.

Then the backends (`--part backends`; `--part refusals` runs only the above): the same short run
(`trainer.max_steps=5`, the default config: FNN-3, embedded MNIST, gTop-k, P = 4, wandb offline) with
backend=thread, mpi and torch, interleaved in rounds (thread, mpi, torch, thread, ...). Each run's time
outside training is its wall time (process start to exit, as a user waits for it) minus the training time
the run reports (`wall_s` of summary.json: rank 0's `Trainer.fit`). Per backend: the median [min-max] of
that overhead, of the wall time, and the overhead minus thread's in the same round. Goal (issue 44): mpi
and torch within 10 s of thread's overhead on a quiet machine. `--baseline-src DIR` adds the same three
runs of another checkout's `src/` (e.g. the code before a change) to every round, so before and after are
measured interleaved. The load average is printed before and after, the other processes' CPU per round
(bench/harness.py) in the table's caption.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import harness  # noqa: E402

GOALS = {"value range": 2.0, "unknown key": 2.0, "missing data path": 3.0}
BACKENDS = ("thread", "mpi", "torch")
SHORT_RUN = ["trainer.max_steps=5"]
GAP_GOAL_S = 10.0          # mpi and torch: at most this many seconds more than thread outside training


def cases(missing: str) -> dict[str, list[str]]:
    return {"value range": ["compressor.density=2"], "unknown key": ["+foo=1"],
            "missing data path": ["dataset=cifar10", f"dataset.data_dir={missing}"], "--help": ["--help"]}


def call(args: list[str], expect: int) -> float:
    proc = subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    if proc.returncode != expect:
        raise SystemExit(f"startup: `train.py {' '.join(args)}` exited {proc.returncode}, expected {expect}: "
                         f"{proc.stderr.strip().splitlines()[-1:]}")
    return 0.0


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages ('unknown' where /proc/loadavg is missing)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


class ShortRun:
    """One backend's short run of one checkout (`src`): `__call__` runs it in a fresh process and returns the
    seconds outside training (wall minus summary.json's `wall_s`); its last call's wall time is `walls[-1]`."""

    def __init__(self, src: Path, backend: str, tmp: Path) -> None:
        self.src, self.backend, self.tmp = src, backend, tmp
        self.walls: list[float] = []
        self.count = 0

    def __call__(self) -> float:
        self.count += 1
        run_dir = self.tmp / f"{id(self)}-{self.backend}-{self.count}"
        argv = [sys.executable, str(self.src / "train.py"), f"backend={self.backend}", *SHORT_RUN,
                f"hydra.run.dir={run_dir}"]
        env = {**os.environ, "PYTHONPATH": str(self.src)}
        t0 = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"startup: backend={self.backend} ({self.src}) exited {proc.returncode}: "
                             f"{proc.stderr.strip().splitlines()[-1:]}")
        train_s = float(json.loads((run_dir / "summary.json").read_text())["wall_s"])
        self.walls.append(wall)
        return wall - train_s


def backend_rows(series: harness.Series, runs: dict[str, ShortRun], kept: dict[str, list[float]]) -> list[str]:
    """The table of the backends' overheads: one row per (checkout, backend); `kept`: the wall times of the
    kept rounds."""
    rows = ["| run | outside training, s: median [min-max] | wall, s: median [min-max] | minus thread "
            "(same round), s | goal |", "|---|---|---|---|---|"]
    for name, run in runs.items():
        base = name.replace(run.backend, "thread")
        gap = harness.Spread.of([r.times[name] - r.times[base] for r in series.rounds])
        goal = "" if run.backend == "thread" else \
            f"<= {GAP_GOAL_S:g} s: {'met' if gap.median <= GAP_GOAL_S else 'MISSED'}"
        rows.append(f"| {name} | {harness.ratio_cell(series.spread(name), series.noisy)} | "
                    f"{harness.ratio_cell(harness.Spread.of(kept[name]), series.noisy)} | "
                    f"{'' if run.backend == 'thread' else harness.ratio_cell(gap, series.noisy)} | {goal} |")
    return rows


def backends_part(args: argparse.Namespace, noise: harness.Noise) -> dict:
    """The backends' short runs, interleaved; prints their table and returns it as JSON."""
    checkouts = {"": ROOT / "src"}
    if args.baseline_src:
        checkouts = {"baseline ": Path(args.baseline_src).resolve(), "this ": ROOT / "src"}
    before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        runs = {f"{label}{b}": ShortRun(src, b, Path(tmp)) for label, src in checkouts.items() for b in BACKENDS}
        kept: dict[str, list[float]] = {name: [] for name in runs}

        def on_round(r: harness.Round) -> None:      # a round's kept attempt is its last: each run's last call
            for name, run in runs.items():
                kept[name].append(run.walls[-1])
            print(f"  backends: round {r.index + 1}/{args.rounds} ({load_average()})", file=sys.stderr, flush=True)

        series = harness.interleaved(list(runs.items()), args.rounds, threshold=noise.threshold,
                                     retries=noise.retries, warmup=args.warmup, on_round=on_round)
    after = load_average()
    print(f"\nShort runs (`{' '.join(SHORT_RUN)}`, default config, P = 4), seconds outside training = wall - "
          f"summary.json wall_s:\n")
    print("\n".join(backend_rows(series, runs, kept)))
    print(f"\n{harness.settings_line(series)}; other processes' CPU: {harness.noise_cell(series)}; load average "
          f"{before} before, {after} after")
    return {"series": series.to_json(), "walls": kept, "load_before": before,
            "load_after": after}


def refusals_part(args: argparse.Namespace, noise: harness.Noise) -> dict:
    """Bad input refused, interleaved, and one good run's `--profile` line; prints them, returns them as JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        missing = str(Path(tmp) / "no-such-dir")
        items = [(name, harness.timed(lambda a=a, name=name: call(a, 0 if name == "--help" else 2)))
                 for name, a in cases(missing).items()]
        series = harness.interleaved(items, args.rounds, threshold=noise.threshold, retries=noise.retries,
                                     on_round=lambda r: print(f"  round {r.index + 1}/{args.rounds}", file=sys.stderr))
        profile = subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), "--profile", "trainer.max_steps=5",
                                  f"hydra.run.dir={Path(tmp) / 'run'}"], capture_output=True, text=True, cwd=ROOT,
                                 timeout=600)
    print(f"| case | seconds, median [min-max] | goal |\n|---|---|---|")
    for name in series.names:
        s = series.spread(name)
        goal = f"< {GOALS[name]:g} s: {'met' if s.median < GOALS[name] else 'MISSED'}" if name in GOALS else ""
        print(f"| {name} | {harness.ratio_cell(s, series.noisy, 3)} | {goal} |")
    print(f"\n{harness.settings_line(series)}; other processes' CPU: {harness.noise_cell(series)}")
    print(harness.describe_method(noise.threshold, noise.retries))
    lines = [line for line in profile.stderr.splitlines() if line.startswith("profile:")]
    print("\nA good run (trainer.max_steps=5):", lines[-1] if lines else f"no profile line (exit {profile.returncode})")
    return {"series": series.to_json(), "profile": lines[-1:]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--part", choices=("all", "refusals", "backends"), default="all")
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds of the backends before the timed ones")
    ap.add_argument("--baseline-src", default=None,
                    help="another checkout's src/ whose short runs join every round of the backends")
    ap.add_argument("--out", default=None, help="write the rounds as JSON here")
    harness.add_noise_arguments(ap)
    args = ap.parse_args(argv)
    if (problem := harness.noise_problem(args)) is not None:
        ap.error(problem)
    if args.baseline_src and not (Path(args.baseline_src) / "train.py").is_file():
        ap.error(f"--baseline-src {args.baseline_src}: no train.py there (give a checkout's src/ folder)")
    noise = harness.noise_from_args(args)
    out = {}
    if args.part in ("all", "refusals"):
        out["refusals"] = refusals_part(args, noise)
    if args.part in ("all", "backends"):
        out["backends"] = backends_part(args, noise)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
