"""`make figs` / `make figs-quick` / `make fig-<name>`: train the runs, draw the figures, write the README
of the figures; every step is read from the registry (paper_figs/figures.yaml, registry.py).

    python paper_figs/make_figs.py [--out paper_figs/out] [--runs paper_figs/runs] [--jobs 2] [--quick]
    python paper_figs/make_figs.py --figure NAME [--out DIR] [--runs DIR] [--results-dir DIR] [--dry-run]
                                   [-- ARGS ...]

Steps, each a separate process, stopping at the first that fails (its exit status is ours): runs.py
(the training runs; resumes), every entry of the registry that is part of `make figs` in its order
(`<script> --out OUT [--runs RUNS]`), readme.py. A step that exits 0 without writing an output its entry
lists fails (not checked with --quick or ARGS). With --quick: only the quick profile's runs (2 seeds, 300 steps) and the entries marked
`quick`, into outputs/figs-quick/ by default. The README of the figures goes to paper_figs/README.md when
--out is paper_figs/out, else to <out>/README.md.
--figure NAME: one entry: its runs (`runs.py --figure NAME`, when it reads runs), then its script with
--out only when given (the script's default otherwise), --results-dir when given and the entry takes it,
and ARGS. --dry-run prints the commands instead (what `make -n fig-NAME` shows).
A line per step says how long it took, the time so far and the expected time left; runs.py prints one
line per run.
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from pathlib import Path

import registry
from figlib import OUT, ROOT, RUNS

QUICK = ROOT / "outputs" / "figs-quick"
README_S = 3                    # expected seconds of readme.py on 2 quiet cores (progress estimates only)
Step = tuple[str, list[str]]    # (name, argv after the python executable)


def steps(out: Path, runs: Path, jobs: int, quick: bool) -> list[Step]:
    """(name, argv after the python executable) of every step of `make figs` (--quick: `make figs-quick`)."""
    pf = ROOT / "paper_figs"
    profile = ["--profile", "quick"] if quick else []
    plan = [("runs", [str(pf / "runs.py"), "--out", str(runs), "--jobs", str(jobs), *profile])]
    plan += [figure_step(e, out, runs) for e in registry.entries(registry.load())
             if e.in_figs and (e.quick or not quick)]
    if quick:
        return plan
    readme = pf / "README.md" if out.resolve() == OUT.resolve() else out / "README.md"
    return plan + [("readme", [str(pf / "readme.py"), "--out", str(out), "--readme", str(readme)])]


def figure_step(entry: registry.Entry, out: Path | None, runs: Path, results: Path | None = None,
                extra: list[str] | tuple[str, ...] = ()) -> Step:
    """The entry's script with --out (when given), --runs (when it reads runs), --results-dir (when given
    and the entry takes it) and `extra`."""
    argv = [str(entry.script), *(["--out", str(out)] if out is not None else [])]
    argv += ["--results-dir", str(results)] if results is not None and entry.results_dir else []
    argv += ["--runs", str(runs)] if entry.reads_runs else []
    return entry.step, [*argv, *extra]


def one_figure(name: str, out: Path | None, runs: Path, jobs: int, results: Path | None,
               extra: list[str]) -> list[Step]:
    """The steps of `make fig-<name>`: its runs, when it reads any, then its script."""
    entry = registry.entry(registry.load(), name)
    if not entry.in_figs:
        from figlib import fail

        fail(f"--figure {name}: drawn by {entry.rows()[0].command if entry.rows() else entry.spec['script']}, "
             "not by make_figs.py")
    train = [("runs", [str(ROOT / "paper_figs" / "runs.py"), "--out", str(runs), "--jobs", str(jobs),
                       "--figure", name])] if entry.reads_runs else []
    return train + [figure_step(entry, out, runs, results, extra)]


def expected_runs_s(runs: Path, jobs: int, quick: bool, figure: str | None = None) -> float:
    """runs.py's own estimate of its training time (every run, as if none were done yet)."""
    import runs as runs_py

    jobs_list = runs_py.plan("quick" if quick else "full", runs_py.load_figures())
    return sum(j.est_s for j in jobs_list if figure is None or figure in j.figures) / jobs


def expected(plan: list[Step], runs: Path, jobs: int, quick: bool, figure: str | None) -> dict[str, float]:
    """Expected seconds of every step on 2 quiet cores: the registry's `expected_s`, runs.py's estimate."""
    times = {e.step: e.expected_s for e in registry.entries(registry.load())}
    got = {name: times.get(name, README_S if name == "readme" else 0.0) for name, _ in plan}
    if "runs" in got:
        got["runs"] = expected_runs_s(runs, jobs, quick, figure)
    return got


def missing_outputs(name: str, out: Path) -> list[str]:
    """The outputs the registry lists for step `name` that are not in `out`."""
    for e in registry.entries(registry.load()):
        if e.step == name:
            return [f for f in e.outputs() if not (out / f).exists()]
    return []


def run_steps(plan: list[Step], out: Path, expect: dict[str, float], check: bool) -> int:
    """Run the steps in order; the first failing one's exit status (1: it missed an output), else 0."""
    start = time.perf_counter()
    for i, (name, cmd) in enumerate(plan, 1):
        print(f"[figs {i}/{len(plan)}] {name} ...", flush=True)
        t0 = time.perf_counter()
        try:
            status = subprocess.call([sys.executable, *cmd], cwd=ROOT)
        except KeyboardInterrupt:
            print("interrupted: finished runs are kept; `make figs` resumes", file=sys.stderr)
            return 130
        if status != 0:
            print(f"error: figs step {name} failed with exit status {status}", file=sys.stderr)
            return status
        missing = missing_outputs(name, out) if check else []
        if missing:
            print(f"error: figs step {name} wrote no {', '.join(missing)} in {out} (paper_figs/figures.yaml lists "
                  "them as its outputs)", file=sys.stderr)
            return 1
        left = sum(expect[n] for n, _ in plan[i:])
        print(f"[figs {i}/{len(plan)}] {name}: {time.perf_counter() - t0:.0f} s | "
              f"{(time.perf_counter() - start) / 60:.1f} min so far, ~{left / 60:.1f} min left on quiet cores",
              flush=True)
    print(f"figs: done in {(time.perf_counter() - start) / 60:.1f} min; figures in {out}", flush=True)
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="figure folder (default paper_figs/out; quick: outputs/figs-quick/out)")
    ap.add_argument("--runs", default=None, help="run folder (default paper_figs/runs; quick: outputs/figs-quick/runs)")
    ap.add_argument("--jobs", type=int, default=2, help="training runs at once (default 2: one per core)")
    ap.add_argument("--quick", action="store_true", help="the quick convergence preview only")
    ap.add_argument("--figure", default=None, metavar="NAME", help="one entry of paper_figs/figures.yaml")
    ap.add_argument("--results-dir", default=None, help="--figure: the benchmark results folder, for the "
                                                        "entries that take one (default: the script's)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("args", nargs="*", help="--figure: arguments for the script (after --)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.args and args.figure is None:
        parser().error(f"unrecognized arguments: {' '.join(args.args)} (script arguments need --figure)")
    runs = Path(args.runs) if args.runs else (QUICK / "runs" if args.quick else RUNS)
    if args.figure is not None:
        out = Path(args.out) if args.out else None
        plan = one_figure(args.figure, out, runs, args.jobs, Path(args.results_dir) if args.results_dir else None,
                          args.args)
    else:
        out = Path(args.out) if args.out else (QUICK / "out" if args.quick else OUT)
        plan = steps(out, runs, args.jobs, args.quick)
    if args.dry_run:
        for _, cmd in plan:
            print(shlex.join([sys.executable, *cmd]))
        return 0
    expect = expected(plan, runs, args.jobs, args.quick, args.figure)
    print(f"figs: {len(plan)} steps into {out or OUT} (runs in {runs}); expected ~{sum(expect.values()) / 60:.0f} "
          f"min on 2 quiet cores if no run is done yet", flush=True)
    return run_steps(plan, out or OUT, expect, check=not args.args and not args.quick)


if __name__ == "__main__":
    sys.exit(main())
