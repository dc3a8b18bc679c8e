"""||u - TopK(u)||^2 / ||u||^2 over training against the bounds, and the IJCAI delta ratio.

Bounds: Shi, Chu, Cheung, See, "Understanding Top-k Sparsification in Distributed Deep Learning"
(arXiv:1911.08772); delta ratio: Shi et al., "A Convergence Analysis of Distributed SGD with
Communication-Efficient Gradient Sparsification" (IJCAI 2019).

    python paper_figs/fig_bounds.py [--runs paper_figs/runs] [--out paper_figs/out]

Reads `<run>/capture/stats.jsonl` (`capture.stats=true`) of every run under --runs.
One panel per (model, density) of the Top-k runs: per step, ||u - TopK(u)||^2 / ||u||^2 of
rank 0's u, the same for Random-k at the same k, and the bounds 1 - k/d (always true) and (1 - k/d)^2
(the Top-k paper's, which assumes a bell-shaped u). Then, per model, the IJCAI ratio per epoch,
delta = mean ||x - A(x)||^2 / mean ||x - RandK(x)||^2 with x the workers' mean u and A the scheme's
aggregate (gTop-k runs first), expected at or just below 1 (dotted line).
Writes fig_bounds{,_col1,_col2}.{png,pdf} and fig_bounds.csv (per step; a grid of panels, then one delta
panel per model) and fig_bounds_delta.csv (per epoch). On every u snapshot of the
Top-k runs (`capture.u_steps`) it also checks the shape condition the tighter bound rests on
(`analysis.line_condition`: the sorted u_i^2 under the line through (k, s_k) and (d, 0) on the tail and over it on
the head, by area) and writes fig_bounds_condition.csv, one row per snapshot.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import analysis as an
import torch
import style
from figlib import OUT, RUNS, Run, find_runs, plt, read_rows, require, write_csv
from matplotlib.lines import Line2D


def stats_runs(runs: list[Run]) -> list[tuple[Run, list[dict]]]:
    return [(run, stats) for run in runs if (stats := run.capture_stats())]


def condition_rows(run: Run) -> list[list]:
    """One row per u snapshot of `run`: the line condition at the run's k = max(int(d * density), 1)."""
    rows = []
    for path in run.snapshots():
        snap = torch.load(path, weights_only=False)
        u = snap["u"].double().numpy()
        k = max(int(u.size * float(snap["density"])), 1)
        c = an.line_condition(u, k)
        rows.append([run.path.name, run.model, run.scheme, float(snap["density"]), int(snap["step"]), u.size, k,
                     int(c["holds"]), c["tail_over_line"], c["head_over_line"], c["entries_off_line"]])
    return rows


BOUND_LINES = (("ratio/topk", "Top-k", style.Look(style.BLUE, "-")),
               ("ratio/randk", "Random-k", style.Look(style.ORANGE, "--")),
               ("bound/linear", "1 - k/d", style.Look(style.BLACK, ":")),
               ("bound/square", "(1 - k/d)^2", style.Look(style.VERMILLION, "-.")))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=str(RUNS), help="folder searched for run directories")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    runs = require(stats_runs(find_runs(Path(args.runs))), Path(args.runs), "capture statistics (capture.stats)")
    topk = sorted([rs for rs in runs if rs[0].scheme == "topk"], key=lambda rs: (rs[0].model, rs[0].density))
    delta_runs = sorted([rs for rs in runs if "ijcai/err_scheme" in rs[1][-1] and rs[0].scheme != "dense"],
                        key=lambda rs: (rs[0].scheme != "gtopk", rs[0].model, rs[0].density))
    rows = [[run.path.name, run.model, run.scheme, run.density, s["step"], s["epoch"], s["ratio/topk"],
             s["ratio/randk"], s["bound/linear"], s["bound/square"], s["u/kurtosis"]] for run, stats in topk for s in stats]
    deltas = [(run, *an.epoch_delta([s["epoch"] for s in stats], [s["ijcai/err_scheme"] for s in stats],
                                    [s["ijcai/err_randk"] for s in stats])) for run, stats in delta_runs]
    delta_rows = [[run.path.name, run.model, run.scheme, run.density, int(e), float(v)]
                  for run, epochs, delta in deltas for e, v in zip(epochs, delta)]
    header = ["run", "model", "scheme", "density", "step", "epoch", "ratio_topk", "ratio_randk", "bound_linear",
              "bound_square", "kurtosis"]
    out = Path(args.out)
    written = style.save(lambda width: draw(width, topk, deltas), out, "fig_bounds", header, rows)
    write_csv(out / "fig_bounds_delta.csv", ["run", "model", "scheme", "density", "epoch", "delta"], delta_rows)
    write_csv(out / "fig_bounds_condition.csv",
              ["run", "model", "scheme", "density", "step", "d", "k", "holds", "tail_over_line", "head_over_line",
               "entries_off_line"], [r for run, _ in topk for r in condition_rows(run)])
    for path in [*written, out / "fig_bounds_delta.csv", out / "fig_bounds_condition.csv"]:
        print(f"wrote {path}")
    return 0


def draw(width: float, topk: list[tuple[Run, list[dict]]], deltas: list[tuple]) -> plt.Figure:
    """A grid of one panel per Top-k run (its ratio against the bounds per step), then one delta panel per
    model; the legends below (single column: the bounds' above)."""
    wide = width >= 5
    models = list(dict.fromkeys(run.model for run, *_ in deltas))
    ncols = 4 if wide else 3
    nb, nd = -(-len(topk) // ncols), -(-len(models) // ncols)
    fig, axes = style.figure(width, nb + nd, ncols, 1.35 if wide else 1.1, 0.7 if wide else 1.2)
    for i, (run, stats) in enumerate(topk):
        ax = axes[i // ncols][i % ncols]
        steps = [s["step"] for s in stats]
        for key, label, lk in BOUND_LINES:
            ax.plot(steps, [s[key] for s in stats], **lk.kw(lw=0.9), label=label)
        ax.set_title(f"{run.model}, rho {run.density:g}" if wide else f"{run.model} {run.density:g}",
                     fontsize=None if wide else "small")
        ax.set_xlabel("step")
        if i % ncols == 0:
            ax.set_ylabel(r"$\|u - C(u)\|^2 / \|u\|^2$")
    densities = sorted({run.density for run, *_ in deltas if run.scheme != "gtopk"})
    for j, model in enumerate(models):
        ax = axes[nb + j // ncols][j % ncols]
        for run, epochs, delta in (d for d in deltas if d[0].model == model):
            lk = (style.Look(style.BLACK, "--", "x") if run.scheme == "gtopk"
                  else style.cycle(densities.index(run.density)) if run.density in densities else style.cycle(0))
            ax.plot(epochs, delta, **lk.kw(ms=3, lw=0.9), label=f"{run.scheme}, rho {run.density:g}")
        ax.axhline(1.0, color=style.GREY, ls=(0, (1, 1)), lw=0.8)
        ax.set(title=f"{model}: delta", xlabel="epoch", ylabel="delta (IJCAI)" if j % ncols == 0 else None)
        ax.title.set_fontsize(None if wide else "small")
    for ax in axes.flat[len(topk):nb * ncols]:
        fig.delaxes(ax)
    for ax in axes.flat[nb * ncols + len(models):]:
        fig.delaxes(ax)
    legends(fig, wide, densities, any(run.scheme == "gtopk" for run, *_ in deltas))
    return fig


def legends(fig, wide: bool, densities: list[float], gtopk: bool) -> None:
    """The bounds' legend and the delta panels' (Top-k per density, gTop-k), outside the axes."""
    handles = [Line2D([], [], **lk.kw()) for _, _, lk in BOUND_LINES]
    style.legend_below(fig, handles, [label for _, label, _ in BOUND_LINES], "lower left" if wide else "upper center",
                       ncol=2, title="ratio of the Top-k runs")
    handles = [Line2D([], [], **style.cycle(i).kw(ms=3)) for i in range(len(densities))]
    labels = [f"Top-k, rho {d:g}" for d in densities]
    if gtopk:
        handles.append(Line2D([], [], **style.Look(style.BLACK, "--", "x").kw(ms=3)))
        labels.append("gTop-k")
    style.legend_below(fig, handles, labels, "lower right" if wide else "lower center", ncol=3,
                       title="delta: A(x)'s error / RandK(x)'s")


def findings(out: Path) -> list[str]:
    """README lines from fig_bounds*.csv: the Top-k ratio against both bounds, the shape condition, the IJCAI delta."""
    rows, delta = read_rows(out, "fig_bounds"), read_rows(out, "fig_bounds_delta")
    lines = []
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows or []:
        groups[(r["model"], r["density"])].append(r)
    for (model, rho), rs in sorted(groups.items()):
        square = sum(float(r["ratio_topk"]) <= float(r["bound_square"]) for r in rs)
        linear = sum(float(r["ratio_topk"]) <= float(r["bound_linear"]) for r in rs)
        lines.append(f"- {model}, rho = {rho}: ||u - TopK(u)||^2 / ||u||^2 at most "
                     f"{max(float(r['ratio_topk']) for r in rs):.4f}; under (1 - k/d)^2 at {square} of {len(rs)} steps, "
                     f"under 1 - k/d at {linear}")
    last: dict[tuple[str, str, str], tuple[int, float]] = {}
    for r in delta or []:
        last[(r["scheme"], r["model"], r["density"])] = (int(r["epoch"]), float(r["delta"]))
    cond: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in read_rows(out, "fig_bounds_condition") or []:
        cond[(r["model"], r["density"])].append(r)
    lines += [f"- {m}, rho = {rho}: the shape condition of the tighter bound (`analysis.line_condition`) holds on "
              f"{sum(int(r['holds']) for r in rs)} of {len(rs)} u snapshots; tail / line area at most "
              f"{max(float(r['tail_over_line']) for r in rs):.3f} (<= 1 needed), head / line at least "
              f"{min(float(r['head_over_line']) for r in rs):.3f} (>= 1 needed)" for (m, rho), rs in sorted(cond.items())]
    lines += [f"- IJCAI delta, {s} / Random-k, {m}, rho = {rho}: {d:.4f} in the last epoch ({e})"
              for (s, m, rho), (e, d) in sorted(last.items())]
    return lines


if __name__ == "__main__":
    sys.exit(main())
