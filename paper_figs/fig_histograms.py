"""Histograms of u = g + e during TopK-SGD, with the fitted normal and a tail diagnostic (Top-k paper).

    python paper_figs/fig_histograms.py [--runs paper_figs/runs] [--out paper_figs/out]

Reads the u snapshots (`capture.u_steps`, `<run>/capture/u_step<N>.pt`) of every run under --runs;
one row per model (its Top-k run with the lowest density when it has several), one panel per saved
iteration (up to 4): the density histogram of rank 0's u over mean +- 5 std, the maximum-likelihood
normal N(mean, std) over it, and in the title the kurtosis (3 for a normal) and the tail-share ratio
(share of |u - mean| > Phi^-1(1 - rho/2) std, divided by rho: what Gaussian-k's first threshold keeps,
relative to k; 1 for a normal; the threshold of GaussianK-SGD's compression.py, Shi et al.
arXiv:1911.08772). Last column: normal Q-Q plots of every saved iteration (heavier tails than Gaussian
bend away from the diagonal).
Writes fig_histograms.{png,pdf,csv} (CSV: model, step, kind = hist | normal | qq, x, y) and
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
from figlib import OUT, RUNS, Run, find_runs, plt, read_rows, require, save, write_csv

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
    fig, axes = plt.subplots(len(models), MAX_PANELS + 1, figsize=(4.0 * (MAX_PANELS + 1), 3.2 * len(models)),
                             squeeze=False)
    rows: list[list] = []
    stats: list[list] = []
    for row, model in enumerate(models):
        run = chosen[model]
        snaps = [load_u(p) for p in spread(run.snapshots(), MAX_PANELS)]
        qq_ax = axes[row, MAX_PANELS]
        for col in range(MAX_PANELS):
            ax = axes[row, col]
            if col >= len(snaps):
                ax.axis("off")
                continue
            step, rho, u = snaps[col]
            mean, std = an.normal_fit(u)
            edges, dens, outside = an.histogram(u)
            kurt, tail = an.kurtosis(u), an.tail_share_ratio(u, rho)
            stats.append([model, run.scheme, rho, step, u.size, mean, std, kurt, tail, outside])
            centers = (edges[:-1] + edges[1:]) / 2
            pdf = an.normal_pdf(centers, mean, std)
            ax.bar(centers, dens, width=np.diff(edges), color="C0", alpha=0.6, label="u")
            ax.plot(centers, pdf, "C3-", lw=1.2, label="fitted normal")
            ax.set_title(f"{model} ({run.scheme}, rho={rho:g}), step {step}\n"
                         f"kurtosis {kurt:.1f}, tail share / rho {tail:.2f}",
                         fontsize=8)
            ax.set_xlabel("u (mean +- 5 std)", fontsize=8)
            ax.set_ylabel("probability density", fontsize=8)
            ax.tick_params(labelsize=7)
            rows += [[model, step, "hist", x, y] for x, y in zip(centers, dens)]
            rows += [[model, step, "normal", x, y] for x, y in zip(centers, pdf)]
            theo, emp = an.qq_points(u)
            qq_ax.plot(theo, emp, ".", ms=2, label=f"step {step}")
            rows += [[model, step, "qq", x, y] for x, y in zip(theo, emp)]
            if col == 0:
                ax.legend(fontsize=7)
        lim = [-4.5, 4.5]
        qq_ax.plot(lim, lim, "k--", lw=0.8, label="normal")
        qq_ax.set_title(f"{model}: normal Q-Q of standardised u", fontsize=8)
        qq_ax.set_xlabel("N(0,1) quantile", fontsize=8)
        qq_ax.set_ylabel("quantile of (u - mean) / std", fontsize=8)
        qq_ax.legend(fontsize=7)
        qq_ax.tick_params(labelsize=7)
    fig.suptitle("Distribution of u = g + e on rank 0 during TopK-SGD (Top-k paper, histograms)", fontsize=10)
    fig.tight_layout()
    out = Path(args.out)
    written = save(fig, out, "fig_histograms", ["model", "step", "kind", "x", "y"], rows)
    write_csv(out / "fig_histograms_stats.csv", ["model", "scheme", "density", "step", "d", "mean", "std", "kurtosis",
                                                 "tail_share_ratio", "outside_5sigma"], stats)
    for path in [*written, out / "fig_histograms_stats.csv"]:
        print(f"wrote {path}")
    return 0



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
