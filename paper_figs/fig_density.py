"""Accuracy and time to accuracy against density, per scheme, over seeds (`make fig-density`).

    python paper_figs/fig_density.py [--runs paper_figs/runs] [--out paper_figs/out]

The density-sensitivity experiment of the gTop-k paper (Shi, Wang, Chu, Li, Tang, Li, Qiang, Ye,
"A Distributed Synchronous SGD Algorithm with Global Top-k Sparsification for Low Bandwidth Networks",
ICDCS 2019, arXiv:1901.04359, Section 5, the convergence at densities 0.001, 0.0005, 0.0001), widened to
densities 1 ... 0.0001 and to Top-k and Gaussian-k. Reads the runs paper_figs/runs.py trains from
the `sweep` of figures.yaml's `density` entry (run_info.json with kind "density"): per seed, one dense run (density 1,
the point every scheme shares) and every (scheme, density) with the same warm-ups.

Panels: final validation accuracy (after the last step) vs configured density, mean over seeds with a
min-max bar, log x; modelled time on the runs' cluster to the target validation accuracy vs density
(fig_convergence's modelled time: this machine's measured compute, compression and update plus the
alpha-beta time of the collective), mean over the seeds that reach it with a min-max bar, the count of
seeds reaching it when not all do, and "not reached" at the top of the panel where no seed does.

Writes fig_density.{png,pdf,csv}: one row per (scheme, configured density) with the seeds, the achieved
density (density/achieved, mean over steps and after the density warm-up; Gaussian-k's differs from its
target), the final accuracy and the steps / modelled seconds to the target (mean, min, max over seeds).
"""
from __future__ import annotations

import argparse
import math
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fig_convergence import ORDER, SeedRun, info_of
import style
from figlib import OUT, RUNS, Run, fail, find_runs, mean_range, plt, read_rows
from matplotlib.lines import Line2D

HEADER = ["scheme", "label", "density", "seeds", "density_achieved_mean", "density_achieved_min",
          "density_achieved_max", "density_achieved_after_warmup", "steps", "final_val_acc_mean", "final_val_acc_min",
          "final_val_acc_max", "target_acc", "reached", "steps_to_target_mean", "steps_to_target_min",
          "steps_to_target_max", "time_to_target_s_mean", "time_to_target_s_min", "time_to_target_s_max",
          "comm_to_target_s_mean", "cluster"]


def density_runs(runs: Sequence[Run]) -> list[Run]:
    """The runs of the density sweep: those whose run_info.json says kind "density"."""
    return [r for r in runs if info_of(r).get("kind") == "density"]


def _mmm(values: Sequence[float]) -> list:
    return [float(np.mean(values)), float(min(values)), float(max(values))] if values else ["", "", ""]


def point(seeds: Sequence[SeedRun], target: float) -> dict:
    """One (scheme, density) point over its seeds: final accuracy, achieved density and time to `target`
    (mean, min, max; the time and steps over the seeds that reach it only, `reached` counts them)."""
    final = [float(s.val_acc[-1]) for s in seeds]
    achieved = [s.achieved for s in seeds]
    hit = [x for x in (s.to_target(target) for s in seeds) if x[0] is not None]
    return {"seeds": len(seeds), "achieved": _mmm(achieved),
            "achieved_after_warmup": float(np.mean([s.achieved_steady for s in seeds])),
            "steps": int(max(s.steps[-1] for s in seeds)), "final": _mmm(final), "reached": len(hit),
            "steps_to": _mmm([x[0] for x in hit]), "time_to": _mmm([x[1] for x in hit]),
            "comm_to": _mmm([x[2] for x in hit])[0]}


def table(runs: Sequence[Run]) -> tuple[dict, list[list]]:
    """(figure info of the sweep, CSV rows): one row per (scheme, configured density), schemes in
    fig_convergence's order (Top-k, gTop-k, Gaussian-k, ...), densities descending; the dense runs are every scheme's density-1 point."""
    if not runs:
        return {}, []
    info = info_of(runs[0])
    by: dict[tuple[str, float], list[Run]] = {}
    labels: dict[str, str] = {}
    for r in runs:
        i = info_of(r)
        by.setdefault((str(i["series"]), float(i["density"])), []).append(r)
        labels[str(i["series"])] = str(i["label"])
    dense = by.pop(("dense", 1.0), [])
    schemes = sorted(dict.fromkeys(k[0] for k in by), key=lambda s: (ORDER.index(s) if s in ORDER else len(ORDER), s))
    target = float(info["target_acc"])
    rows = []
    for scheme in schemes:
        points = sorted([(rho, rs) for (s, rho), rs in by.items() if s == scheme], key=lambda x: -x[0])
        if dense:
            points.insert(0, (1.0, dense))
        for rho, rs in points:
            seeds = sorted((SeedRun.of(r) for r in rs), key=lambda s: s.seed)
            p = point(seeds, target)
            rows.append([scheme, labels[scheme], rho, p["seeds"], *p["achieved"], p["achieved_after_warmup"],
                         p["steps"], *p["final"], target, f"{p['reached']}/{p['seeds']}", *p["steps_to"],
                         *p["time_to"], p["comm_to"], rs[0].summary.get("cluster", "")])
    return info, rows


def draw(info: dict, rows: list[list], width: float = style.WIDTHS["col2"]) -> plt.Figure:
    """Two panels (side by side; single column: one above the other): final accuracy vs density, time to the
    target vs density (log x; schemes offset a little along x so their bars do not hide each other)."""
    col = {h: i for i, h in enumerate(HEADER)}
    wide = width >= 5
    fig, axes = style.figure(width, 1 if wide else 2, 2 if wide else 1, 2.6 if wide else 2.0, 0.6 if wide else 0.8)
    acc_ax, time_ax = axes.flat
    schemes = list(dict.fromkeys(r[0] for r in rows))
    target, cluster = rows[0][col["target_acc"]], rows[0][col["cluster"]]
    unreached = []
    for i, scheme in enumerate(schemes):
        rs = [r for r in rows if r[0] == scheme]
        lk = style.look(scheme, i)
        x = np.array([r[col["density"]] for r in rs]) * 1.12 ** (i - (len(schemes) - 1) / 2)
        m, lo, hi = (np.array([r[col[f"final_val_acc_{k}"]] for r in rs]) for k in ("mean", "min", "max"))
        acc_ax.errorbar(x, m, yerr=[m - lo, hi - m], **lk.kw(ms=3.5), capsize=2, label=rs[0][1])
        time_points(time_ax, x, rs, col, lk)
        unreached.append((lk, [(xx, r) for xx, r in zip(x, rs) if r[col["time_to_target_s_mean"]] == ""]))
    mark_unreached(time_ax, unreached, col, len(schemes))
    steps, seeds = max(r[col["steps"]] for r in rows), max(r[col["seeds"]] for r in rows)
    acc_ax.set(xscale="log", xlabel="density (configured)", ylabel=f"val. accuracy after {steps} steps",
               title=f"final accuracy (mean, min-max of {seeds} seeds)")
    time_ax.set(xscale="log", xlabel="density (configured)", ylabel=f"modelled s on {cluster} to {target:g}",
                title=f"time to accuracy {target:g}")
    for ax in (acc_ax, time_ax):
        ax.invert_xaxis()
    handles, labels = acc_ax.get_legend_handles_labels()
    handles.append(Line2D([], [], **style.Look(style.GREY, "none", "x").kw()))
    style.legend_below(fig, handles, labels + ["not reached by any seed (0/seeds)"], ncol=len(labels) + 1 if wide else 2)
    quick = "QUICK PREVIEW. " if info.get("profile") == "quick" else ""
    fig.suptitle(textwrap.fill(f"{quick}{info.get('title', 'accuracy vs density')}", 120 if wide else 55))
    return fig


def time_points(ax, x: np.ndarray, rs: list[list], col: dict, lk: style.Look) -> None:
    """A scheme's time to the target (mean, whisker min-max over the seeds reaching it) at the densities some
    seed reached it; "n/seeds" beside a point that not every seed reached."""
    reached = [(xx, r) for xx, r in zip(x, rs) if r[col["time_to_target_s_mean"]] != ""]
    if not reached:
        return
    tx = np.array([xx for xx, _ in reached])
    tm, tlo, thi = (np.array([r[col[f"time_to_target_s_{k}"]] for _, r in reached]) for k in ("mean", "min", "max"))
    ax.errorbar(tx, tm, yerr=[tm - tlo, thi - tm], **lk.kw(ms=3.5), capsize=2, label=rs[0][1])
    for xx, r in reached:
        n, total = r[col["reached"]].split("/")
        if n != total:
            ax.annotate(f"{n}/{total}", (xx, r[col["time_to_target_s_mean"]]), fontsize="x-small", color=lk.color,
                        xytext=(3, 3), textcoords="offset points")


def mark_unreached(ax, unreached: list[tuple[style.Look, list]], col: dict, n_schemes: int) -> None:
    """One row of x per scheme above the data where no seed reached the target, "0/seeds" beside each."""
    top = ax.get_ylim()[1] if ax.lines else 1.0
    ax.set_ylim(0, top * (1.16 + 0.08 * n_schemes))
    for i, (lk, points) in enumerate(unreached):
        if points:
            y = top * (1.06 + 0.08 * i)
            ax.plot([xx for xx, _ in points], [y] * len(points), **style.Look(lk.color, "none", "x").kw(ms=4))
            for xx, r in points:
                ax.annotate(f"0/{r[col['seeds']]}", (xx, y), fontsize="xx-small", color=lk.color, ha="left",
                            va="center", xytext=(3, 0), textcoords="offset points")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=str(RUNS), help="folder searched for run directories")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    runs = density_runs(find_runs(Path(args.runs)))
    if not runs:
        fail(f"no finished density run (run_info.json kind 'density') under {args.runs}; "
             "`make fig-density` trains them")
    info, rows = table(runs)
    if not rows:
        fail(f"only dense runs of the density sweep under {args.runs}; `make fig-density` trains the sparse ones")
    for path in style.save(lambda width: draw(info, rows, width), Path(args.out), "fig_density", HEADER, rows):
        print(f"wrote {path}")
    return 0



def findings(out: Path) -> list[str]:
    """fig_density.csv as a table: per scheme and density, achieved density, final accuracy, time to the target."""
    rows = read_rows(out, "fig_density") or []
    if not rows:
        return []
    r0 = rows[0]
    lines = [f"- {r0['seeds']} seeds, {r0['steps']} steps, target {float(r0['target_acc']):g} validation accuracy; "
             f"mean [min, max] over seeds (time: over the seeds reaching it); modelled time on {r0['cluster']}; "
             "density 1 is the dense runs, shared by every scheme", "",
             "  | scheme | density configured / achieved (after warm-up) | final val acc | seeds reaching target | "
             "steps to target | modelled s to target |", "  |---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"  | {r['label']} | {float(r['density']):g} / {float(r['density_achieved_mean']):.3g} "
                     f"({float(r['density_achieved_after_warmup']):.3g}) | {mean_range(r, 'final_val_acc')} | "
                     f"{r['reached']} | {mean_range(r, 'steps_to_target', '.0f')} | "
                     f"{mean_range(r, 'time_to_target_s', '.2f') if r['time_to_target_s_mean'] else 'not reached'} |")
    return lines + [""]


if __name__ == "__main__":
    sys.exit(main())
