"""`make figs` / `make figs-quick`: train the runs, draw every figure, write the README of the figures.

    python paper_figs/make_figs.py [--out paper_figs/out] [--runs paper_figs/runs] [--jobs 2] [--quick]

Steps, each a separate process, stopping at the first that fails (its exit status is ours):
runs.py (the training runs; resumes), fig_histograms, fig_bounds, fig_convergence, fig_density, fig_selection,
fig_scaling, readme.py. With --quick: only the quick profile's convergence runs (2 seeds, 300 steps)
and fig_convergence (no density sweep), into outputs/figs-quick/ by default. The README of the figures goes to
paper_figs/README.md when --out is paper_figs/out, else to <out>/README.md.
A line per step says how long it took, the time so far and the expected time left; runs.py prints one
line per run.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from figlib import OUT, ROOT, RUNS

QUICK = ROOT / "outputs" / "figs-quick"
# expected seconds of the figure steps on 2 quiet cores (progress estimates only)
EXPECTED = {"fig_histograms": 15, "fig_bounds": 10, "fig_convergence": 15, "fig_density": 8, "fig_selection": 100,
            "fig_scaling": 15, "readme": 3}


def steps(out: Path, runs: Path, jobs: int, quick: bool) -> list[tuple[str, list[str]]]:
    """(name, argv after the python executable) of every step."""
    pf = ROOT / "paper_figs"
    profile = ["--profile", "quick"] if quick else []
    train = ("runs", [str(pf / "runs.py"), "--out", str(runs), "--jobs", str(jobs), *profile])
    conv = ("fig_convergence", [str(pf / "fig_convergence.py"), "--runs", str(runs), "--out", str(out)])
    if quick:
        return [train, conv]
    readme = pf / "README.md" if out.resolve() == OUT.resolve() else out / "README.md"
    return [train,
            ("fig_histograms", [str(pf / "fig_histograms.py"), "--runs", str(runs), "--out", str(out)]),
            ("fig_bounds", [str(pf / "fig_bounds.py"), "--runs", str(runs), "--out", str(out)]),
            conv,
            ("fig_density", [str(pf / "fig_density.py"), "--runs", str(runs), "--out", str(out)]),
            ("fig_selection", [str(pf / "fig_selection.py"), "--out", str(out), "--runs", str(runs)]),
            ("fig_scaling", [str(pf / "fig_scaling.py"), "--out", str(out)]),
            ("readme", [str(pf / "readme.py"), "--out", str(out), "--readme", str(readme)])]


def expected_runs_s(runs: Path, jobs: int, quick: bool) -> float:
    """runs.py's own estimate of its training time (every run, as if none were done yet)."""
    import runs as runs_py

    jobs_list = runs_py.plan("quick" if quick else "full", runs_py.load_figures())
    return sum(j.est_s for j in jobs_list) / jobs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="figure folder (default paper_figs/out; quick: outputs/figs-quick/out)")
    ap.add_argument("--runs", default=None, help="run folder (default paper_figs/runs; quick: outputs/figs-quick/runs)")
    ap.add_argument("--jobs", type=int, default=2, help="training runs at once (default 2: one per core)")
    ap.add_argument("--quick", action="store_true", help="the quick convergence preview only")
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else (QUICK / "out" if args.quick else OUT)
    runs = Path(args.runs) if args.runs else (QUICK / "runs" if args.quick else RUNS)
    plan = steps(out, runs, args.jobs, args.quick)
    expected = {name: EXPECTED.get(name, 0) for name, _ in plan}
    expected["runs"] = expected_runs_s(runs, args.jobs, args.quick)
    start = time.perf_counter()
    print(f"figs: {len(plan)} steps into {out} (runs in {runs}); expected ~{sum(expected.values()) / 60:.0f} min "
          f"on 2 quiet cores if no run is done yet", flush=True)
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
        left = sum(expected[n] for n, _ in plan[i:])
        print(f"[figs {i}/{len(plan)}] {name}: {time.perf_counter() - t0:.0f} s | "
              f"{(time.perf_counter() - start) / 60:.1f} min so far, ~{left / 60:.1f} min left on quiet cores",
              flush=True)
    print(f"figs: done in {(time.perf_counter() - start) / 60:.1f} min; figures in {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
