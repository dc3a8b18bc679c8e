"""Selection time vs vector size, and achieved density, of exact Top-k and its approximations.

    python paper_figs/fig_selection.py [--out DIR] [--results-dir DIR] [--sizes D ...] [--density R]
                                       [--reps ROUNDS] [--devices ...] [--quick] [--runs RUNS]
    (default DIR: paper_figs/out; sizes 1e5 1e6 1e7 2.5e7; density 0.001;
    --quick: 1e5 and 1e6, 3 rounds; --runs: also the real-u part below)

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
Then the contended numbers (issue 23 item 4), when <--results-dir>/selection_contention.csv exists
(`make bench-selection-contention` writes it; docs/selection-cost.md#selection-under-contention):
every selector quiet and beside a busy core at 1 and 2 threads, the threads chosen and the speed kept.

Real u (with --runs RUNS; `make fig-selection` trains the runs first, `paper_figs/runs.py --figure
selection`): every captured snapshot u = g + e (`capture.u_steps`) of the FNN-3 (FNN3) and SmallCNN Top-k
runs under RUNS (fig_histograms.py's choice: the Top-k run of lowest density per model), and, for
reference, u ~ N(0, 1) and u ~ Laplace(0, 1) of REFERENCE_D entries; each timed as above (same
interleaved rounds, same noise handling) at every density of REAL_DENSITIES, with the count each call
sent: Top-k and Random-k send exactly k = max(int(d * density), 1), Gaussian-k's released loop and DGC
sampling send what their thresholds keep. fig_selection_real.{png,pdf,csv}: top, median time per
vector and selector (bars: min-max over rounds); bottom, k_sent / k (mean; bars min-max over the timed
calls). The CSV has one row per (device, vector, density, selector): source (run | synthetic), model,
run, step, d, density, method, times, k, k_sent mean / min / max, k_sent / k, noise.
"""
from __future__ import annotations

import importlib.util
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

from fig_histograms import load_u, pick_runs
import style
from figlib import OUT, fail, find_runs, plt, read_rows
from matplotlib.lines import Line2D

ROOT = Path(__file__).resolve().parents[1]
STEM = "fig_selection"
COLUMNS = ["device", "threads", "dist", "d", "method", "reps", "inner", "median_ms", "min_ms", "max_ms",
           "density_target", "density_mean", "density_min", "density_max", "topk_over_method", "topk_over_method_lo",
           "topk_over_method_hi", "other_cores_max", "noisy", "repeated_rounds", "noise_threshold"]
LABELS = {"topk": "Top-k (exact, torch.topk)", "topk_blocks": "Top-k (exact, the lab's: block peaks)",
          "gaussiank": "Gaussian-k", "randomk": "Random-k", "dgcsampling": "DGC sampling (released: k of 1 % sample)",
          "dgcsampling_scaled": "DGC sampling (k scaled to the sample)"}
STYLE = {m: (label, style.look(m).color, style.look(m).marker) for m, label in LABELS.items()}   # paper_figs/style.py
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


bench = _load("bench_selection", ROOT / "bench" / "selection.py")     # puts src/ on sys.path
from ssgd.compress.sparse import k_of  # noqa: E402



def contended_report(results_dir: Path) -> str:
    """The table of bench/selection_contention.py's CSV under `results_dir`, or one line saying how to
    make it when there is none."""
    path = Path(results_dir) / "selection_contention.csv"
    if not path.exists():
        return f"no contended numbers ({path} missing): make bench-selection-contention writes them"
    contention = _load("bench_selection_contention", ROOT / "bench" / "selection_contention.py")
    return f"contended numbers from {path}:\n" + contention.markdown(contention.read_csv(path))


REAL_STEM = "fig_selection_real"
REAL_MODELS = ("FNN3", "SmallCNN")         # FNN-3 and SmallCNN (paper_figs/runs.py: hist_fnn3_*, hist_cnn_*)
REAL_DENSITIES = (0.001, 0.01)
REFERENCE_D = 1_000_000                    # the synthetic reference vectors of the real-u part
REAL_COLUMNS = ["device", "threads", "source", "model", "run", "step", "d", "density", "method", "reps", "inner",
                "median_ms", "min_ms", "max_ms", "topk_over_method", "k", "k_sent_mean", "k_sent_min", "k_sent_max",
                "k_sent_over_k", "other_cores_max", "noisy"]


@dataclass(frozen=True)
class Vector:
    """One vector the real-u part times: a run's snapshot (source "run") or a synthetic reference."""

    source: str
    model: str
    run: str
    step: int | None
    u: torch.Tensor


@dataclass(frozen=True)
class Achieved:
    """Entries sent per call, over the timed calls, against k = max(int(d * density), 1)."""

    k: int
    mean: float
    lo: int
    hi: int

    @property
    def ratio(self) -> float:
        return self.mean / self.k


def achieved(counts: list[int], d: int, density: float) -> Achieved:
    """Mean, min and max of `counts` (entries each call selected) with k as both released code bases
    compute it (ssgd.compress.sparse.k_of); at least one count."""
    if not counts:
        raise ValueError("achieved: no timed call")
    return Achieved(k_of(d, density), statistics.fmean(counts), min(counts), max(counts))


def real_vectors(runs_root: Path, device: str, reference_d: int = REFERENCE_D) -> list[Vector]:
    """Every u snapshot of the REAL_MODELS runs under runs_root (float32, on `device`), then the
    synthetic N(0, 1) and Laplace(0, 1) references of reference_d entries. A missing model or an
    unreadable snapshot exits 2 with one line (figlib.fail) naming the folder or the file."""
    chosen = {m: r for m, r in pick_runs(find_runs(runs_root)).items() if m in REAL_MODELS}
    missing = [m for m in REAL_MODELS if m not in chosen]
    if missing:
        fail(f"--runs {runs_root}: no finished Top-k run of {', '.join(missing)} with u snapshots "
             f"(capture.u_steps); `make fig-selection` trains them (paper_figs/runs.py --figure selection)")
    out = []
    for model in REAL_MODELS:
        run = chosen[model]
        for path in run.snapshots():
            try:
                step, _, u = load_u(path)
            except Exception as err:                     # torch.load raises many types on a bad file
                fail(f"{path}: cannot read this u snapshot ({type(err).__name__}: {err}); "
                     f"delete the run folder and rerun `make fig-selection`")
            out.append(Vector("run", model, run.path.name, step, torch.from_numpy(u).float().to(device)))
    for dist in bench.DISTRIBUTIONS:
        out.append(Vector("synthetic", dist, "", None, bench.make_vector(dist, reference_d, seed=reference_d,
                                                                           device=device)))
    return out


def measure_real(vectors: list[Vector], densities: list[float], methods: list[str], reps: int | None,
                 noise: object, progress=print) -> list[list]:
    """REAL_COLUMNS rows: every vector x density, the selectors timed by bench.time_selectors (the one
    timing implementation); reps None -> bench.default_reps(d)."""
    threads = torch.get_num_threads()
    rows: list[list] = []
    for v in vectors:
        d = v.u.numel()
        for density in densities:
            start = time.perf_counter()
            n = reps or bench.default_reps(d)
            series, counts = bench.time_selectors({m: bench.METHODS[m](0) for m in methods}, v.u, density, n, noise)
            info = series.to_json()
            cell = []
            for m in methods:
                sp, r, a = series.spread(m), series.ratio(methods[0], m), achieved(counts[m], d, density)
                rows.append([str(v.u.device), threads, v.source, v.model, v.run, "" if v.step is None else v.step, d,
                             density, m, n, series.inner, 1e3 * sp.median, 1e3 * sp.lo, 1e3 * sp.hi, r.median, a.k,
                             a.mean, a.lo, a.hi, a.ratio, info["other_cores_max"], series.noisy])
                cell.append(f"{m} {1e3 * sp.median:.3g} ms {a.ratio:.3g} k")
            where = f"{v.model} step {v.step}" if v.step is not None else f"u ~ {v.model}"
            progress(f"real-u {where} d={d:,} density {density} ({n} rounds x {series.inner}, "
                     f"{time.perf_counter() - start:.1f} s): " + ", ".join(cell))
    return rows


def real_table(rows: list[list]) -> str:
    """Markdown: per vector and density, each selector's median ms [min-max] and k_sent / k [min-max]."""
    c = {name: i for i, name in enumerate(REAL_COLUMNS)}
    methods = list(dict.fromkeys(r[c["method"]] for r in rows))
    out = ["\nReal u: median ms [min-max over rounds]; k_sent / k mean [min-max over calls]", "",
           "| device | vector | d | density | " + " | ".join(methods) + " |", "|---" * (len(methods) + 4) + "|"]
    keys = dict.fromkeys((r[c["device"]], r[c["model"]], r[c["step"]], r[c["d"]], r[c["density"]]) for r in rows)
    for key in keys:
        cells = {r[c["method"]]: r for r in rows
                 if (r[c["device"]], r[c["model"]], r[c["step"]], r[c["d"]], r[c["density"]]) == key}
        parts = []
        for m in methods:
            r = cells[m]
            parts.append(f"{r[c['median_ms']]:.3g} [{r[c['min_ms']]:.2g}-{r[c['max_ms']]:.2g}] ms, "
                         f"{r[c['k_sent_over_k']]:.3g} [{r[c['k_sent_min']] / r[c['k']]:.3g}-"
                         f"{r[c['k_sent_max']] / r[c['k']]:.3g}] k" + ("*" if r[c["noisy"]] else ""))
        device, model, step, d, density = key
        vec = f"{model} step {step}" if step != "" else f"u ~ {model}"
        out.append(f"| {device} | {vec} | {d:,} | {density} | " + " | ".join(parts) + " |")
    return "\n".join(out)


def plot_real(rows: list[list], width: float = style.WIDTHS["col2"]) -> plt.Figure:
    """Top: median ms per vector (x) and selector; bottom: k_sent / k (log); hollow: the first density."""
    c = {name: i for i, name in enumerate(REAL_COLUMNS)}
    device = rows[0][c["device"]]
    rows = [r for r in rows if r[c["device"]] == device]
    vectors = list(dict.fromkeys((r[c["model"]], r[c["step"]]) for r in rows))
    densities = list(dict.fromkeys(r[c["density"]] for r in rows))
    labels = [f"{m}\nstep {s}" if s != "" else f"{m}\n(synthetic)" for m, s in vectors]
    wide = width >= 5
    fig, axes = style.figure(width, 2, 1, 2.2 if wide else 1.8, 1.0 if wide else 1.4, sharex=True)
    left, right = axes[0][0], axes[1][0]
    methods = [m for m in STYLE if any(r[c["method"]] == m for r in rows)]
    bar_w = 0.8 / (len(methods) * len(densities))
    for j, method in enumerate(methods):
        for i, density in enumerate(densities):
            off = (j * len(densities) + i + 0.5) * bar_w - 0.4
            cells = [next(r for r in rows if (r[c["model"]], r[c["step"]], r[c["density"]], r[c["method"]])
                          == (*v, density, method)) for v in vectors]
            xs = [n + off for n in range(len(vectors))]
            lk = style.Look(style.look(method).color, "none", style.look(method).marker, filled=i > 0)
            med = [r[c["median_ms"]] for r in cells]
            left.errorbar(xs, med, yerr=spread(med, [r[c["min_ms"]] for r in cells], [r[c["max_ms"]] for r in cells]),
                          **lk.kw(ms=3.5), capsize=1.5, label=f"{STYLE[method][0]}, density {density}")
            ratio, k = [r[c["k_sent_over_k"]] for r in cells], [r[c["k"]] for r in cells]
            right.errorbar(xs, ratio, yerr=spread(ratio, [r[c["k_sent_min"]] / kk for r, kk in zip(cells, k)],
                                                  [r[c["k_sent_max"]] / kk for r, kk in zip(cells, k)]),
                           **lk.kw(ms=3.5), capsize=1.5)
    right.axhspan(2 / 3, 4 / 3, color="0.93", zorder=0, lw=0)
    right.axhline(1.0, color=style.GREY, lw=0.8)
    left.set(yscale="log", ylabel="compress(u) (ms)", title=f"selection time on captured u ({device}, "
             f"{rows[0][c['threads']]} threads)")
    right.set(yscale="log", ylabel="k_sent / k", title="achieved count (grey: [2k/3, 4k/3])")
    for ax in (left, right):
        ax.grid(True, which="major", axis="y", alpha=0.3, lw=0.5)
    right.set_xticks(range(len(vectors)), labels, rotation=0 if wide else 90)
    method_legend(fig, methods, [f"hollow: density {densities[0]}"] + [f"filled: density {d}" for d in densities[1:]])
    return fig


def method_legend(fig, methods: list[str], lines: list[str], handles: list | None = None) -> None:
    """The selectors' legend (colour and marker) below the axes, what lines / fills mean above them."""
    wide = fig.get_figwidth() >= 5
    marks = [Line2D([], [], **style.Look(style.look(m).color, "none", style.look(m).marker).kw()) for m in methods]
    style.legend_below(fig, marks, [STYLE[m][0] for m in methods], ncol=2 if wide else 1)
    extra = handles or [Line2D([], [], **style.Look(style.GREY, "none", "o", filled=i > 0).kw())
                        for i in range(len(lines))]
    style.legend_below(fig, extra, lines, "upper center", ncol=len(lines) if wide else 1)


def csv_rows(rows: list) -> list[list]:
    """One CSV row per measured cell (bench Row), in COLUMNS order."""
    return [[r.device, r.threads, r.dist, r.d, r.method, r.reps, r.inner, r.median_ms, r.min_ms, r.max_ms,
             r.density_target, r.density_mean, r.density_min, r.density_max, bench.ratio(rows, r),
             r.topk_over_method_lo if r.method != "topk" else 1.0, r.topk_over_method_hi if r.method != "topk" else 1.0,
             r.other_cores_max, r.noisy, r.repeated_rounds, r.noise_threshold] for r in rows]


def spread(center: list[float], low: list[float], high: list[float]) -> list[list[float]]:
    """errorbar's yerr for bars from low to high (clamped at 0: a mean of equal floats may round past them)."""
    return [[max(c - lo, 0.0) for c, lo in zip(center, low)], [max(hi - c, 0.0) for c, hi in zip(center, high)]]


def plot(rows: list, width: float = style.WIDTHS["col2"]) -> plt.Figure:
    """Left: median ms vs d (u ~ normal, solid CPU, dashed CUDA; grey rings: noisy); right: achieved density /
    target (solid u ~ normal, dotted u ~ Laplace). Single column: one above the other."""
    wide = width >= 5
    fig, axes = style.figure(width, 1 if wide else 2, 2 if wide else 1, 2.6 if wide else 2.0, 1.1 if wide else 1.6)
    left, right = axes.flat
    devices = list(dict.fromkeys(r.device for r in rows))
    for method in STYLE:
        base = style.look(method)
        for device in devices:
            cells = [r for r in rows if r.method == method and r.device == device and r.dist == "normal"]
            if cells:
                med = [r.median_ms for r in cells]
                left.errorbar([r.d for r in cells], med, yerr=spread(med, [r.min_ms for r in cells],
                                                                     [r.max_ms for r in cells]),
                              **style.Look(base.color, "-" if device == "cpu" else "--", base.marker, False).kw(ms=3.5),
                              capsize=1.5, label=f"{STYLE[method][0]}, {device}")
        if method not in ("topk", "topk_blocks", "randomk"):     # these send exactly k by construction
            density_curves(right, [r for r in rows if r.method == method and r.device == devices[0]], method)
    r0 = rows[0]
    noisy = [r for r in rows if r.noisy is not False and r.dist == "normal"]
    lines = ["CPU (left), u ~ N(0, 1) (right)", "CUDA (left)", "u ~ Laplace (right)"]
    handles = [Line2D([], [], color=style.GREY, ls=ls) for ls in ("-", "--", ":")]
    if noisy:
        left.scatter([r.d for r in noisy], [r.median_ms for r in noisy], s=60, facecolors="none",
                     edgecolors=style.GREY, linewidths=0.8, zorder=3)
        lines.append(f"NOISY: other processes used up to {max((r.other_cores_max or 0.0) for r in noisy):.2f} cores")
        handles.append(Line2D([], [], **style.Look(style.GREY, "none", "o", filled=False).kw(ms=7)))
    left.set(xscale="log", yscale="log", xlabel="vector size d", ylabel="compress(u) (ms)",
             title=f"selection time, density {r0.density_target}, {r0.threads} threads")
    right.axhspan(2 / 3, 4 / 3, color="0.93", zorder=0, lw=0)
    right.axhline(1.0, color=style.GREY, lw=0.8)
    right.set(xscale="log", xlabel="vector size d", ylabel="achieved density / target",
              title=f"achieved density ({devices[0]}; grey: [2k/3, 4k/3])")
    for ax in (left, right):
        ax.grid(True, which="major", alpha=0.3, lw=0.5)
    method_legend(fig, list(STYLE), lines, handles)
    return fig


def density_curves(ax, rows: list, method: str) -> None:
    """A selector's achieved density / target vs d, one curve per distribution of u (DIST_LINE)."""
    base = style.look(method)
    for dist, ls in DIST_LINE.items():
        cells = [r for r in rows if r.dist == dist]
        if cells:
            t = cells[0].density_target
            mean = [r.density_mean / t for r in cells]
            bars = spread(mean, [r.density_min / t for r in cells], [r.density_max / t for r in cells])
            ax.errorbar([r.d for r in cells], mean, yerr=bars, **style.Look(base.color, ls, base.marker, False).kw(ms=3.5),
                        capsize=1.5, label=f"{STYLE[method][0]}, u ~ {dist}")


def _extra(ap) -> None:
    ap.add_argument("--out", default=str(OUT), help="output folder")
    ap.add_argument("--runs", type=Path, default=None,
                    help="also time the selectors on the u snapshots of the FNN-3 and SmallCNN runs under RUNS "
                         "(fig_selection_real.*)")
    ap.add_argument("--real-densities", type=float, nargs="+", default=list(REAL_DENSITIES),
                    help=f"densities of the real-u part (default {' '.join(map(str, REAL_DENSITIES))})")
    ap.add_argument("--reference-d", type=int, default=REFERENCE_D,
                    help=f"entries of the synthetic reference vectors of the real-u part (default {REFERENCE_D:,})")


def main(argv: list[str] | None = None) -> int:
    args = bench.parse("fig_selection.py", __doc__.splitlines()[0], argv,
                       extra=_extra)
    if args.runs is not None:
        if bad := [x for x in args.real_densities if not 0.0 < x <= 1.0]:
            fail(f"--real-densities {' '.join(map(str, bad))}: must be in (0, 1]")
        if args.reference_d < 1:
            fail(f"--reference-d {args.reference_d}: must be >= 1")
        vectors = real_vectors(args.runs, args.devices[0], args.reference_d)     # fails before any timing
    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = " ".join(["paper_figs/fig_selection.py", *(sys.argv[1:] if argv is None else argv)])
    rows = bench.run(args, command)
    written = style.save(lambda width: plot(rows, width), out, STEM, COLUMNS, csv_rows(rows))
    print(contended_report(args.results_dir))
    if args.runs is not None:
        t1 = time.perf_counter()
        noise = bench.harness.noise_from_args(args, quick=args.quick)
        real = measure_real(vectors, args.real_densities, args.methods, args.reps, noise)
        print(real_table(real))
        written += style.save(lambda width: plot_real(real, width), out, REAL_STEM, REAL_COLUMNS, real)
        print(f"real-u part: {len(real)} cells in {time.perf_counter() - t1:.1f} s")
    print(f"wrote {len(written)} files to {out} and {args.results_dir / 'selection.json'} in "
          f"{time.perf_counter() - t0:.1f} s ({os.cpu_count()} CPUs)")
    return 0



def findings(out: Path) -> list[str]:
    """README lines from fig_selection*.csv: speed-ups over exact Top-k at the largest d, entries sent on real u."""
    rows = read_rows(out, "fig_selection") or []
    lines = []
    for device, dist in sorted({(r["device"], r["dist"]) for r in rows}):
        rs = [r for r in rows if (r["device"], r["dist"]) == (device, dist)]
        d = max(int(r["d"]) for r in rs)
        at = {r["method"]: r for r in rs if int(r["d"]) == d}
        speed = ", ".join(f"{m} {float(r['topk_over_method']):.1f}x" for m, r in at.items() if m != "topk")
        dens = ", ".join(f"{m} {float(r['density_mean']) / float(r['density_target']):.3f} k" for m, r in at.items()
                         if m not in ("topk", "randomk"))
        lines.append(f"- {device}, u ~ {dist}, d = {d:,}: exact Top-k {float(at['topk']['median_ms']):.0f} ms; "
                     f"speed-up over it: {speed}; entries sent: {dens}")
    real = read_rows(out, "fig_selection_real") or []
    for density in sorted({float(r["density"]) for r in real}):
        for method in ("gaussiank", "dgcsampling_scaled"):
            sent = [r for r in real if float(r["density"]) == density and r["method"] == method]
            runs = [float(r["k_sent_over_k"]) for r in sent if r["source"] == "run"]
            ref = ", ".join(f"u ~ {r['model']} {float(r['k_sent_over_k']):.2f} k" for r in sent
                            if r["source"] == "synthetic")
            if runs:
                lines.append(f"- real u (FNN-3, SmallCNN snapshots), density {density:g}: {method} sends "
                             f"{min(runs):.2f}-{max(runs):.2f} k (mean over calls); reference {ref}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
