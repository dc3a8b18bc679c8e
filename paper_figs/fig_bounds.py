"""||u - TopK(u)||^2 / ||u||^2 over training against the bounds, and the IJCAI delta ratio.

Bounds: Shi, Chu, Cheung, See, "Understanding Top-k Sparsification in Distributed Deep Learning"
(arXiv:1911.08772); delta ratio: Shi et al., "A Convergence Analysis of Distributed SGD with
Communication-Efficient Gradient Sparsification" (IJCAI 2019).

    python paper_figs/fig_bounds.py [--runs paper_figs/runs] [--out paper_figs/out]

Reads `<run>/capture/stats.jsonl` (`capture.stats=true`) of every run under --runs.
Top row, one panel per (model, density) of the Top-k runs: per step, ||u - TopK(u)||^2 / ||u||^2 of
rank 0's u, the same for Random-k at the same k, and the bounds 1 - k/d (always true) and (1 - k/d)^2
(the Top-k paper's, which assumes a bell-shaped u). Bottom: the IJCAI ratio per epoch,
delta = mean ||x - A(x)||^2 / mean ||x - RandK(x)||^2 with x the workers' mean u and A the scheme's
aggregate (gTop-k runs first), expected at or just below 1 (dotted line).
Writes fig_bounds.{png,pdf,csv} (per step) and fig_bounds_delta.csv (per epoch). On every u snapshot of the
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
from figlib import OUT, RUNS, Run, find_runs, plt, read_rows, require, save, write_csv


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=str(RUNS), help="folder searched for run directories")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    runs = require(stats_runs(find_runs(Path(args.runs))), Path(args.runs), "capture statistics (capture.stats)")
    topk = sorted([rs for rs in runs if rs[0].scheme == "topk"], key=lambda rs: (rs[0].model, rs[0].density))
    delta_runs = sorted([rs for rs in runs if "ijcai/err_scheme" in rs[1][-1] and rs[0].scheme != "dense"],
                        key=lambda rs: (rs[0].scheme != "gtopk", rs[0].model, rs[0].density))
    ncol = max(len(topk), 1)
    fig = plt.figure(figsize=(3.6 * ncol, 6.4))
    grid = fig.add_gridspec(2, ncol)
    rows: list[list] = []
    for col, (run, stats) in enumerate(topk):
        ax = fig.add_subplot(grid[0, col])
        steps = [s["step"] for s in stats]
        for key, label, style in (("ratio/topk", "Top-k", "C0-"), ("ratio/randk", "Random-k", "C1-"),
                                  ("bound/linear", "1 - k/d", "k--"), ("bound/square", "(1 - k/d)^2", "C3:")):
            ax.plot(steps, [s[key] for s in stats], style, lw=1, label=label)
        ax.set_title(f"{run.model}, Top-k, rho = {run.density:g}", fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylabel("||u - C(u)||^2 / ||u||^2", fontsize=8)
        ax.tick_params(labelsize=7)
        if col == 0:
            ax.legend(fontsize=7)
        rows += [[run.path.name, run.model, run.scheme, run.density, s["step"], s["epoch"], s["ratio/topk"],
                  s["ratio/randk"], s["bound/linear"], s["bound/square"], s["u/kurtosis"]] for s in stats]
    ax = fig.add_subplot(grid[1, :])
    delta_rows: list[list] = []
    for run, stats in delta_runs:
        epochs, delta = an.epoch_delta([s["epoch"] for s in stats], [s["ijcai/err_scheme"] for s in stats],
                                       [s["ijcai/err_randk"] for s in stats])
        ax.plot(epochs, delta, "o-", ms=3, label=f"{run.scheme} / Random-k, {run.model}, rho = {run.density:g}")
        delta_rows += [[run.path.name, run.model, run.scheme, run.density, int(e), float(v)] for e, v in zip(epochs, delta)]
    ax.axhline(1.0, color="k", ls=":", lw=1)
    ax.set_xlabel("epoch", fontsize=8)
    ax.set_ylabel("delta = mean ||x - A(x)||^2 / mean ||x - RandK(x)||^2", fontsize=8)
    ax.set_title("IJCAI ratio (x = workers' mean of u; A = the scheme's aggregate)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    header = ["run", "model", "scheme", "density", "step", "epoch", "ratio_topk", "ratio_randk", "bound_linear",
              "bound_square", "kurtosis"]
    out = Path(args.out)
    written = save(fig, out, "fig_bounds", header, rows)
    write_csv(out / "fig_bounds_delta.csv", ["run", "model", "scheme", "density", "epoch", "delta"], delta_rows)
    write_csv(out / "fig_bounds_condition.csv",
              ["run", "model", "scheme", "density", "step", "d", "k", "holds", "tail_over_line", "head_over_line",
               "entries_off_line"], [r for run, _ in topk for r in condition_rows(run)])
    for path in [*written, out / "fig_bounds_delta.csv", out / "fig_bounds_condition.csv"]:
        print(f"wrote {path}")
    return 0



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
