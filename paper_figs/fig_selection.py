"""Selection time vs vector size, and achieved density, of exact Top-k and its approximations.

    python paper_figs/fig_selection.py [--out DIR] [--results-dir DIR] [--sizes D ...] [--density R]
                                       [--reps ROUNDS] [--devices ...] [--quick]
    (default DIR: paper_figs/out; sizes 1e5 1e6 1e7 2.5e7; density 0.001; ~1-2 min on 2 quiet cores;
    --quick: 1e5 and 1e6, 3 rounds, ~15 s)

The Top-k paper's motivation (Shi, Chu, Cheung, See, "Understanding Top-k Sparsification in
Distributed Deep Learning", arXiv:1911.08772): exact top-k costs O(d log k) and is slow on GPUs,
threshold selectors are O(d). For u ~ N(0, 1) and u ~ Laplace(0, 1), times one `compress(u, density)`
of exact Top-k, Gaussian-k, Random-k, and DGC sampling (as in the released code hclhkbu/GaussianK-SGD,
compression.py; `dgcsampling` = the released code's unscaled k on a 1 % sample, `dgcsampling_scaled`
= k scaled to the sample as in DGC), interleaved in rounds on one vector, median and min-max over
rounds, on the CPU and on CUDA when present. The timing, and its noise handling, is
bench/selection.py's (one implementation): during each round the CPU used by other processes is
measured; rounds above --noise-threshold cores (default 0.2) are repeated (<= --retries, default 2)
and cells still above it are marked noisy in the tables and the CSV, and drawn with hollow grey-edged
markers and a title note in the figure.

fig_selection.{png,pdf,csv}: left, median time vs d (log-log, bars: min-max; u ~ N(0, 1)); right,
achieved density / target vs d for both distributions (mean over the timed calls, bars: min-max;
Top-k, Random-k send exactly k and are left out). The CSV holds every measured cell (both
distributions) with the per-round ratio Top-k time / method time (median, min, max) and the noise
columns; <--results-dir>/selection.json the same rows for bench/summary.py.
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
COLUMNS = ["device", "threads", "dist", "d", "method", "reps", "inner", "median_ms", "min_ms", "max_ms",
           "density_target", "density_mean", "density_min", "density_max", "topk_over_method", "topk_over_method_lo",
           "topk_over_method_hi", "other_cores_max", "noisy", "repeated_rounds", "noise_threshold"]
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
    return [[r.device, r.threads, r.dist, r.d, r.method, r.reps, r.inner, r.median_ms, r.min_ms, r.max_ms,
             r.density_target, r.density_mean, r.density_min, r.density_max, bench.ratio(rows, r),
             r.topk_over_method_lo if r.method != "topk" else 1.0, r.topk_over_method_hi if r.method != "topk" else 1.0,
             r.other_cores_max, r.noisy, r.repeated_rounds, r.noise_threshold] for r in rows]


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
                noisy = [r for r in cells if r.noisy is not False]
                if noisy:
                    left.scatter([r.d for r in noisy], [r.median_ms for r in noisy], s=90, facecolors="none",
                                 edgecolors="0.5", linewidths=1.0, zorder=3)
        for dist, ls in DIST_LINE.items():
            cells = [r for r in rows if r.method == method and r.device == devices[0] and r.dist == dist]
            if cells and method not in ("topk", "randomk"):          # these two send exactly k by construction
                t = cells[0].density_target
                mean = [r.density_mean / t for r in cells]
                bars = spread(mean, [r.density_min / t for r in cells], [r.density_max / t for r in cells])
                right.errorbar([r.d for r in cells], mean, yerr=bars, color=color, marker=marker, mfc="none",
                               capsize=2, ls=ls, label=f"{label}, u ~ {dist}")
    r0 = rows[0]
    noisy = [r for r in rows if r.noisy is not False]
    note = ""
    if noisy:
        worst = max((r.other_cores_max or 0.0) for r in noisy)
        note = f"\nNOISY (grey circles): other processes used up to {worst:.2f} cores > {r0.noise_threshold:g}"
    left.set(xscale="log", yscale="log", xlabel="vector size d", ylabel="compress(u) time (ms, median; bars min-max)",
             title=f"Selection time, density {r0.density_target}, u ~ N(0, 1), {r0.threads} CPU threads{note}")
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
    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = " ".join(["paper_figs/fig_selection.py", *(sys.argv[1:] if argv is None else argv)])
    rows = bench.run(args, command)
    written = save(plot(rows), out, STEM, COLUMNS, csv_rows(rows))
    print(f"wrote {len(written)} files to {out} and {args.results_dir / 'selection.json'} in "
          f"{time.perf_counter() - t0:.1f} s ({os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
