"""Histograms of u = g + e during TopK-SGD, with the fitted normal and a tail diagnostic (Top-k paper).

    python paper_figs/fig_histograms.py [--runs paper_figs/runs] [--out paper_figs/out]

Reads the u snapshots (`capture.u_steps`, `<run>/capture/u_step<N>.pt`) of every run under --runs;
per model (its Top-k run with the lowest density when it has several) up to 4 saved iterations spread over
the run: one panel of their density histograms of the standardised z = (u - mean) / std over +- 5 (log
density, so the tails show) with N(0, 1) over them, and one panel of their normal Q-Q plots (heavier tails
than Gaussian bend away from the diagonal). fig_histograms_stats.csv holds per snapshot the kurtosis (3 for
a normal) and the tail-share ratio (share of |u - mean| > Phi^-1(1 - rho/2) std, divided by rho: what
Gaussian-k's first threshold keeps, relative to k; 1 for a normal; the threshold of GaussianK-SGD's
compression.py, Shi et al. arXiv:1911.08772).
Writes fig_histograms{,_col1,_col2}.{png,pdf} and .csv (model, step, kind = hist | normal | qq, x, y; hist
and normal over z) and
fig_histograms_stats.csv (per snapshot: mean, std, kurtosis, tail-share ratio, share outside 5 std).
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from scipy.stats import norm

import analysis as an
import style
from figlib import OUT, RUNS, Run, find_runs, plt, read_rows, require, write_csv
from matplotlib.lines import Line2D

MAX_PANELS = 4


def pick_runs(runs: list[Run]) -> dict[str, Run]:
    """model -> its run with snapshots, preferring Top-k runs, then the lowest density."""
    chosen: dict[str, Run] = {}

    def key(run: Run) -> tuple[bool, float]:
        return run.scheme != "topk", run.density

    for run in runs:
        if run.snapshots() and (run.model not in chosen or key(run) < key(chosen[run.model])):
            chosen[run.model] = run
    return chosen


def spread(paths: list[Path], n: int) -> list[Path]:
    """n snapshots spread over the run (first and last included)."""
    if len(paths) <= n:
        return paths
    return [paths[i] for i in np.linspace(0, len(paths) - 1, n).round().astype(int)]


def load_u(path: Path) -> tuple[int, float, np.ndarray]:
    snap = torch.load(path, weights_only=False)
    return int(snap["step"]), float(snap["density"]), snap["u"].double().numpy()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=str(RUNS), help="folder searched for run directories")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    chosen = pick_runs(find_runs(Path(args.runs)))
    require(list(chosen.values()), Path(args.runs), "u snapshots (capture.u_steps)")
    models = sorted(chosen)
    snaps = {m: [load_u(p) for p in spread(chosen[m].snapshots(), MAX_PANELS)] for m in models}
    rows, stats = plotted_rows(chosen, snaps)
    out = Path(args.out)
    written = style.save(lambda width: draw(width, models, snaps), out, "fig_histograms",
                         ["model", "step", "kind", "x", "y"], rows)
    write_csv(out / "fig_histograms_stats.csv", ["model", "scheme", "density", "step", "d", "mean", "std", "kurtosis",
                                                 "tail_share_ratio", "outside_5sigma"], stats)
    for path in [*written, out / "fig_histograms_stats.csv"]:
        print(f"wrote {path}")
    return 0


def standardised(u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The density histogram of z = (u - mean) / std over +- 5 (bin centres, density) and N(0, 1) at them."""
    mean, std = an.normal_fit(u)
    edges, dens, _ = an.histogram(u)
    scale = std if std > 0 else 1.0
    z = ((edges[:-1] + edges[1:]) / 2 - mean) / scale
    return z, dens * scale, an.normal_pdf(z, 0.0, 1.0)


def plotted_rows(chosen: dict[str, Run], snaps: dict[str, list]) -> tuple[list[list], list[list]]:
    """The figure's CSV rows (hist, normal, qq per model and step) and fig_histograms_stats.csv's rows."""
    rows, stats = [], []
    for model, run in sorted(chosen.items()):
        for step, rho, u in snaps[model]:
            mean, std = an.normal_fit(u)
            _, _, outside = an.histogram(u)
            stats.append([model, run.scheme, rho, step, u.size, mean, std, an.kurtosis(u), an.tail_share_ratio(u, rho),
                          outside])
            z, dens, pdf = standardised(u)
            theo, emp = an.qq_points(u)
            rows += [[model, step, "hist", x, y] for x, y in zip(z, dens)]
            rows += [[model, step, "normal", x, y] for x, y in zip(z, pdf)]
            rows += [[model, step, "qq", x, y] for x, y in zip(theo, emp)]
    return rows, stats


def draw(width: float, models: list[str], snaps: dict[str, list]) -> plt.Figure:
    """Per model a histogram panel (every snapshot, standardised, log density, N(0, 1) over them) and a Q-Q
    panel; double column: histograms above, Q-Q below, a column per model; single column: a row per model."""
    wide = width >= 5
    nr, nc = (2, len(models)) if wide else (len(models), 2)
    fig, axes = style.figure(width, nr, nc, 1.9 if wide else 1.45, 0.45)
    n = max(len(s) for s in snaps.values())
    for j, model in enumerate(models):
        hist_ax, qq_ax = (axes[0][j], axes[1][j]) if wide else (axes[j][0], axes[j][1])
        for k, (step, rho, u) in enumerate(snaps[model]):
            i = k if k < len(snaps[model]) - 1 else n - 1          # a model's last snapshot: the legend's last
            z, dens, pdf = standardised(u)
            lk = style.Look(style.COLORS[i], style.LINESTYLES[i % len(style.LINESTYLES)])
            hist_ax.plot(z, np.where(dens > 0, dens, np.nan), **lk.kw(lw=0.9), drawstyle="steps-mid")
            theo, emp = an.qq_points(u)
            qq_ax.plot(theo, emp, **style.Look(style.COLORS[i], "none", style.MARKERS[i]).kw(ms=1.8))
        hist_ax.plot(z, pdf, color=style.BLACK, lw=0.8, ls=(0, (1, 1)))
        hist_ax.set(yscale="log", ylim=(1e-5, 2), xlim=(-5, 5), xlabel="(u - mean) / std", ylabel="density",
                    title=f"{model}, steps {', '.join(str(s) for s, _, _ in snaps[model])}")
        qq_ax.plot([-4.5, 4.5], [-4.5, 4.5], color=style.BLACK, lw=0.8, ls=(0, (1, 1)))
        qq_ax.set(xlabel="N(0, 1) quantile", ylabel="quantile of (u - mean) / std", title=f"{model}: normal Q-Q")
    handles = [Line2D([], [], **style.Look(style.COLORS[i], style.LINESTYLES[i % 4], style.MARKERS[i]).kw(ms=3))
               for i in range(n)] + [Line2D([], [], color=style.BLACK, lw=0.8, ls=(0, (1, 1)))]
    names = ["first snapshot", "second", "third", "last snapshot"][:n - 1] + ["last snapshot"] if n > 1 else ["snapshot"]
    style.legend_below(fig, handles, names + ["normal: N(0, 1), diagonal"], ncol=5 if wide else 3)
    return fig


def findings(out: Path) -> list[str]:
    """README lines from fig_histograms_stats.csv: per model, the kurtosis and the tail share at the first and
    last snapshot."""
    rows = read_rows(out, "fig_histograms_stats")
    by_model: dict[str, list[dict]] = defaultdict(list)
    for r in rows or []:
        by_model[r["model"]].append(r)
    lines = []
    for model, rs in sorted(by_model.items()):
        first, last = rs[0], rs[-1]
        lines.append(f"- {model} ({first['scheme']}, rho = {first['density']}): kurtosis {float(first['kurtosis']):.1f} at "
                     f"step {first['step']}, {float(last['kurtosis']):.1f} at step {last['step']} (normal: 3); entries "
                     f"beyond Gaussian-k's first threshold mean + {norm.ppf(1 - float(first['density']) / 2):.2f} std: "
                     f"{float(first['tail_share_ratio']):.2f} k, then {float(last['tail_share_ratio']):.2f} k "
                     "(normal: 1 k)")
    return lines


if __name__ == "__main__":
    sys.exit(main())
