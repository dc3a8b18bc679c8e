"""Selection time vs vector size, and achieved density, of exact Top-k and its approximations.

    python paper_figs/fig_selection.py [--out DIR] [--sizes D ...] [--density R] [--reps N] [--devices ...]
    (default DIR: paper_figs/out; sizes 1e5 1e6 1e7 2.5e7; density 0.001; ~1 min on 2 cores)

The Top-k paper's motivation (papers.md 2.4, 3.4): exact top-k costs O(d log k) and is slow on GPUs,
threshold selectors are O(d). For u ~ N(0, 1) and u ~ Laplace(0, 1), times one `compress(u, density)`
of exact Top-k, Gaussian-k (papers.md 2.4), Random-k, and DGC sampling (papers.md 2.5; `dgcsampling`
= the released code's unscaled k on a 1 % sample, `dgcsampling_scaled` = k scaled to the sample as in
DGC), all interleaved on one vector, median and min-max over repetitions, on the CPU and on CUDA when
present. The timing is bench/selection.py's (one implementation).

fig_selection.{png,pdf,csv}: left, median time vs d (log-log, bars: min-max; u ~ N(0, 1)); right,
achieved density / target vs d for both distributions (mean over the timed calls, bars: min-max;
Top-k, Random-k send exactly k and are left out).
The CSV holds every measured cell (both distributions) with the ratio Top-k time / method time.
Prints the ratio tables: this is a benchmark, ratios are only comparable within one run.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType

from figlib import OUT, plt, save

ROOT = Path(__file__).resolve().parents[1]
STEM = "fig_selection"
COLUMNS = ["device", "threads", "dist", "d", "method", "reps", "median_ms", "min_ms", "max_ms", "density_target",
           "density_mean", "density_min", "density_max", "topk_over_method"]
STYLE = {"topk": ("Top-k (exact)", "C0", "o"), "gaussiank": ("Gaussian-k", "C3", "s"),
         "randomk": ("Random-k", "C7", "x"), "dgcsampling": ("DGC sampling (released: k of 1 % sample)", "C2", "^"),
         "dgcsampling_scaled": ("DGC sampling (k scaled to the sample)", "C1", "v")}
DIST_LINE = {"normal": "-", "laplace": ":"}


def _load(name: str, path: Path) -> ModuleType:
    """Import a script by path (bench/ is not a package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


bench = _load("bench_selection", ROOT / "bench" / "selection.py")


def csv_rows(rows: list) -> list[list]:
    """One CSV row per measured cell (bench Row), in COLUMNS order."""
    return [[r.device, r.threads, r.dist, r.d, r.method, r.reps, r.median_ms, r.min_ms, r.max_ms, r.density_target,
             r.density_mean, r.density_min, r.density_max, bench.ratio(rows, r)] for r in rows]


def spread(center: list[float], low: list[float], high: list[float]) -> list[list[float]]:
    """errorbar's yerr for bars from low to high (clamped at 0: a mean of equal floats may round past them)."""
    return [[max(c - lo, 0.0) for c, lo in zip(center, low)], [max(hi - c, 0.0) for c, hi in zip(center, high)]]


def plot(rows: list) -> plt.Figure:
    """Left: median ms vs d (u ~ normal, solid CPU, dashed CUDA); right: achieved density / target."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.2))
    devices = list(dict.fromkeys(r.device for r in rows))
    for method, (label, color, marker) in STYLE.items():
        for device in devices:
            cells = [r for r in rows if r.method == method and r.device == device and r.dist == "normal"]
            if cells:
                med = [r.median_ms for r in cells]
                bars = spread(med, [r.min_ms for r in cells], [r.max_ms for r in cells])
                left.errorbar([r.d for r in cells], med, yerr=bars, color=color, marker=marker, mfc="none", capsize=2,
                              ls="-" if device == "cpu" else "--", label=f"{label}, {device}")
        for dist, ls in DIST_LINE.items():
            cells = [r for r in rows if r.method == method and r.device == devices[0] and r.dist == dist]
            if cells and method not in ("topk", "randomk"):          # these two send exactly k by construction
                t = cells[0].density_target
                mean = [r.density_mean / t for r in cells]
                bars = spread(mean, [r.density_min / t for r in cells], [r.density_max / t for r in cells])
                right.errorbar([r.d for r in cells], mean, yerr=bars, color=color, marker=marker, mfc="none",
                               capsize=2, ls=ls, label=f"{label}, u ~ {dist}")
    r0 = rows[0]
    left.set(xscale="log", yscale="log", xlabel="vector size d", ylabel="compress(u) time (ms, median; bars min-max)",
             title=f"Selection time, density {r0.density_target}, u ~ N(0, 1), {r0.threads} CPU threads")
    right.axhspan(2 / 3, 4 / 3, color="0.92", zorder=0)
    right.axhline(1.0, color="k", lw=0.8)
    right.set(xscale="log", xlabel="vector size d", ylabel="achieved density / target (mean; bars min-max)",
              title=f"Achieved density ({devices[0]}; grey: [2k/3, 4k/3])")
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> int:
    args = bench.parse("fig_selection.py", __doc__.splitlines()[0], argv,
                       extra=lambda ap: ap.add_argument("--out", default=str(OUT),
                                                        help="output folder"))
    t0, load = time.perf_counter(), os.getloadavg()[0]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = bench.measure(args.sizes, args.density, args.devices, args.dists, args.methods, args.reps)
    written = save(plot(rows), out, STEM, COLUMNS, csv_rows(rows))
    print(bench.markdown_tables(rows))
    print(f"wrote {len(written)} files to {out} in {time.perf_counter() - t0:.1f} s "
          f"(1-min load average {load:.1f} at start, {os.getloadavg()[0]:.1f} at end, {os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
