"""Convergence of each scheme under the same warm-ups, over seeds, with the modelled time to accuracy.

    python paper_figs/fig_convergence.py [--runs paper_figs/runs] [--out paper_figs/out]

Reads metrics.jsonl, summary.json and .hydra/config.yaml of every run under --runs that has no capture
statistics (runs with capture are the histogram / bounds runs) and is not a run of the density sweep
(run_info.json kind "density", read by fig_density.py). Runs trained by paper_figs/runs.py carry a
run_info.json (figure, series, legend label, seed, profile, target accuracy, from paper_figs/figures.yaml);
other runs (e.g. a Hydra multirun of an experiment) form one figure whose series are the compressors (and
densities, when a compressor ran at several), with targets from --target-acc.

Seeds aggregate: each series is one legend entry, its mean over seeds as a line and the min-max over
seeds as a band. The legend gives the configured density and the achieved one (density/achieved averaged
over all training steps, then over seeds). Panels: training loss vs epoch; validation accuracy vs epoch;
validation accuracy vs modelled time on the run's cluster (cumulative target/iter_s: the target's compute
profile plus the alpha-beta time of the collective on the target network, docs/metrics.md; for a model that
no compute profile describes, such as FNN-3, the small CNN and the LSTM, cumulative target/comm_s, the
communication alone, and the axes say so); and the modelled time to reach the figure's target validation
accuracy (mean, min-max over seeds; seeds that never reach it are counted, not averaged in).

The modelled time does not depend on this machine's load (nothing in it is measured here); the measured
compute is reported beside it (convergence_summary.csv: compute_ms_*).

Writes, per figure F, fig_convergence_F{,_col1,_col2}.{png,pdf} (paper_figs/style.py) and fig_convergence_F.csv
(the plotted means and bands) and, for all figures,
convergence_summary.csv (one row per figure and series: seeds, densities, final / best accuracy, steps and
modelled seconds to the target) and convergence_density_phases.csv (achieved / target density in the
density warm-up and in each third of the remaining steps: how Gaussian-k's count drifts). Runs of the
quick profile (`make figs-quick`) write *_quick files with a QUICK title.
"""
from __future__ import annotations

import argparse
import math
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import analysis as an
import style
from figlib import OUT, RUNS, Run, find_runs, mean_range, plt, read_json, read_rows, require, write_csv

ORDER = ("dense", "topk", "gtopk", "gaussiank", "randomk", "dgcsampling")


def clock_key(train: list[dict]) -> str:
    """target/iter_s when every train record has it (the model has a target compute profile), else
    target/comm_s (the communication on the target alone)."""
    return "target/iter_s" if train and all("target/iter_s" in m for m in train) else "target/comm_s"


@dataclass
class SeedRun:
    """The numbers of one run that the figure needs."""

    run: Run
    seed: int
    steps: np.ndarray           # train records
    epochs: np.ndarray
    loss: np.ndarray
    iter_s: np.ndarray          # modelled seconds per iteration, interval means of the train records
    comm_s: np.ndarray          # the alpha-beta communication part of it
    time: np.ndarray            # cumulative modelled seconds at each train record
    val_steps: np.ndarray
    val_epochs: np.ndarray
    val_acc: np.ndarray
    val_time: np.ndarray
    achieved: float             # mean over steps of density/achieved
    achieved_steady: float      # the same after the density warm-up
    phases: list                # (first step, last step, achieved / target) of the warm-up and 3 later spans
    target_s: float             # mean modelled seconds per iteration (of `clock_key`)

    @classmethod
    def of(cls, run: Run) -> SeedRun:
        train = [m for m in run.metrics if "train/loss" in m]
        val = [m for m in run.metrics if "val/acc" in m]
        steps = [m["step"] for m in train]
        iter_s = [m[clock_key(train)] for m in train]
        val_steps = np.array([m["step"] for m in val], dtype=np.float64)
        return cls(run, int(run.config.seed), np.array(steps, dtype=np.float64),
                   np.array([m["epoch"] for m in train]), np.array([m["train/loss"] for m in train]),
                   np.array(iter_s, dtype=np.float64), np.array([m["target/comm_s"] for m in train]),
                   an.modelled_time(steps, iter_s), val_steps, np.array([m["epoch"] for m in val]),
                   np.array([m["val/acc"] for m in val]), an.time_at(steps, iter_s, val_steps),
                   an.step_mean(steps, [m["density/achieved"] for m in train]),
                   an.steady_density(steps, [m["density/achieved"] for m in train],
                                     [m["density/scheduled"] for m in train], run.density),
                   an.density_phases(steps, [m["density/achieved"] for m in train],
                                     [m["density/scheduled"] for m in train], run.density),
                   an.step_mean(steps, iter_s))

    def to_target(self, target: float) -> tuple[int | None, float, float]:
        """(first step with val acc >= target, modelled seconds to it, the communication part of them);
        (None, nan, nan) if never reached."""
        step = an.first_reach(self.val_steps, self.val_acc, target)
        if step is None:
            return None, math.nan, math.nan
        return (step, float(an.time_at(self.steps, self.iter_s, [step])[0]),
                float(an.time_at(self.steps, self.comm_s, [step])[0]))


@dataclass
class Series:
    """One legend entry: a scheme (and density) of a figure, over its seeds."""

    key: str
    label: str
    runs: list[SeedRun]

    @property
    def scheme(self) -> str:
        return self.runs[0].run.scheme

    @property
    def density(self) -> float:
        return self.runs[0].run.density

    def achieved(self) -> float:
        return float(np.mean([r.achieved for r in self.runs]))

    def legend(self) -> str:
        if self.scheme == "dense":
            return f"{self.label} ({len(self.runs)} seeds)"
        steady = float(np.mean([r.achieved_steady for r in self.runs]))
        after = f", {steady:.3g} after warm-up" if abs(steady - self.achieved()) > 0.05 * self.achieved() else ""
        return (f"{self.label}: density {self.density:.3g} configured, {self.achieved():.3g} achieved "
                f"(mean over steps{after}; {len(self.runs)} seeds)")


def info_of(run: Run) -> dict:
    path = run.path / "run_info.json"
    return read_json(path) if path.exists() else {}


def group(runs: list[Run], default_target: float) -> dict[str, tuple[dict, list[Series]]]:
    """figure -> (its info: title, target_acc, profile; its series in legend order)."""
    figures: dict[str, dict[str, list[Run]]] = {}
    infos: dict[str, dict] = {}
    labels: dict[tuple[str, str], str] = {}
    densities: dict[str, set[float]] = {}
    for run in runs:
        densities.setdefault(run.scheme, set()).add(run.density)
    for run in runs:
        info = info_of(run)
        fig = str(info.get("figure", ""))
        if "series" in info:
            key, label = str(info["series"]), str(info["label"])
        else:
            several = len(densities[run.scheme]) > 1 and run.scheme != "dense"
            key = f"{run.scheme}_rho{run.density:g}" if several else run.scheme
            label = f"{run.scheme} (rho {run.density:g})" if several else run.scheme
        figures.setdefault(fig, {}).setdefault(key, []).append(run)
        labels[(fig, key)] = label
        infos.setdefault(fig, {"title": info.get("title", "convergence"),
                               "target_acc": float(info.get("target_acc", default_target)),
                               "profile": info.get("profile", "")})
    out = {}
    for fig, by_key in figures.items():
        series = [Series(key, labels[(fig, key)], sorted((SeedRun.of(r) for r in rs), key=lambda s: s.seed))
                  for key, rs in by_key.items()]
        # by scheme; within a scheme the plain series first, then its variants (other densities, options)
        series.sort(key=lambda s: (ORDER.index(s.scheme) if s.scheme in ORDER else len(ORDER), s.key != s.scheme,
                                   s.density, s.key))
        out[fig] = (infos[fig], series)
    return out


def draw(fig_name: str, info: dict, series: list[Series], width: float = style.WIDTHS["col2"]
         ) -> tuple[plt.Figure, list[list], list[list]]:
    """One convergence figure `width` inches wide (loss, accuracy vs epoch and vs modelled time, time to the
    target; 2 x 2 panels, single column: 4 x 1); its CSV rows and its rows of convergence_summary.csv."""
    target, wide = info["target_acc"], width >= 5
    fig, grid = style.figure(width, 2 if wide else 4, 2 if wide else 1, 2.2 if wide else 1.45,
                             0.35 + 0.2 * len(series) if wide else 0.35 + 0.3 * len(series))
    axes = grid.ravel()
    rows: list[list] = []
    summary: list[list] = []
    sparse = [s for s in series if s.scheme != "dense"] or series
    common = max({s.density for s in sparse}, key=lambda d: sum(s.density == d for s in sparse))
    first = next(s for s in sparse if s.density == common).runs[0]      # the figure's configured density
    cluster = first.run.summary.get("cluster")
    for i, s in enumerate(series):
        lk = style.look(s.key, i)
        rows += curves(axes, fig_name, s, lk)
        reached = time_bar(axes[3], s, len(series) - 1 - i, lk.color, target)
        summary.append(summary_row(fig_name, s, cluster, target, reached))
    style_panels(axes, series, cluster, target)
    handles, labels = axes[0].get_legend_handles_labels()
    style.legend_below(fig, handles, [textwrap.fill(t, 125 if wide else 62) for t in labels], ncol=1)
    quick = "QUICK PREVIEW, not the full figure (make figs-quick). " if info["profile"] == "quick" else ""
    fig.suptitle(textwrap.fill(f"{quick}{info['title']}", 120 if wide else 55))
    return fig, rows, summary


def curves(axes, fig_name: str, s: Series, lk: style.Look) -> list[list]:
    """A series' loss vs epoch, accuracy vs epoch and vs modelled time (mean and min-max band over seeds);
    its CSV rows."""
    loss_m, loss_lo, loss_hi = an.seed_band([r.loss for r in s.runs])
    ep = s.runs[0].epochs[:len(loss_m)]
    axes[0].plot(ep, loss_m, **lk.kw(marker="None"), label=s.legend())
    axes[0].fill_between(ep, loss_lo, loss_hi, color=lk.color, alpha=0.2, lw=0)
    acc_m, acc_lo, acc_hi = an.seed_band([r.val_acc for r in s.runs])
    vep = s.runs[0].val_epochs[:len(acc_m)]
    vt, _, _ = an.seed_band([r.val_time for r in s.runs])
    axes[1].plot(vep, acc_m, **lk.kw(marker="None"))
    axes[1].fill_between(vep, acc_lo, acc_hi, color=lk.color, alpha=0.2, lw=0)
    axes[2].plot(vt, acc_m, **lk.kw(marker="None"))
    axes[2].fill_between(vt, acc_lo, acc_hi, color=lk.color, alpha=0.2, lw=0)
    tm, _, _ = an.seed_band([r.time for r in s.runs])
    rows = [[fig_name, s.key, s.label, s.scheme, len(s.runs), "train", int(st), e, m, lo, hi, t, "", "", ""]
            for st, e, m, lo, hi, t in zip(s.runs[0].steps, ep, loss_m, loss_lo, loss_hi, tm)]
    rows += [[fig_name, s.key, s.label, s.scheme, len(s.runs), "val", int(st), e, "", "", "", t, m, lo, hi]
             for st, e, m, lo, hi, t in zip(s.runs[0].val_steps, vep, acc_m, acc_lo, acc_hi, vt)]
    return rows


def time_bar(ax, s: Series, y: int, color: str, target: float) -> tuple[int, list, list, list]:
    """The series' bar of modelled time to `target` (hatched: communication; whisker: min-max over the
    seeds reaching it); (seeds reaching it, their steps, seconds and communication seconds)."""
    hit = [x for x in (r.to_target(target) for r in s.runs) if x[0] is not None]
    st_hit, ts, comm = [x[0] for x in hit], [x[1] for x in hit], [x[2] for x in hit]
    if hit:
        mean, c = float(np.mean(ts)), float(np.mean(comm))
        ax.barh(y, c, color=color, alpha=1.0, hatch="//", edgecolor="white")
        ax.barh(y, mean - c, left=c, color=color, alpha=0.45,
                xerr=[[max(mean - min(ts), 0.0)], [max(max(ts) - mean, 0.0)]], capsize=3)
        ax.text(max(ts), y, f"  {mean:.2f} s, step {np.mean(st_hit):.0f}"
                + ("" if len(hit) == len(s.runs) else f" ({len(hit)}/{len(s.runs)} seeds)"),
                va="center", fontsize="x-small")
    else:
        ax.text(0, y, f"  not reached by any of {len(s.runs)} seeds", va="center", fontsize="x-small")
    return len(hit), st_hit, ts, comm


def summary_row(fig_name: str, s: Series, cluster: str, target: float, reached: tuple[int, list, list, list]) -> list:
    """The series' row of convergence_summary.csv (SUMMARY_HEADER)."""
    n_hit, st_hit, ts, comm = reached
    final = [r.val_acc[-1] for r in s.runs]
    best = [r.val_acc.max() for r in s.runs]
    return [fig_name, s.key, s.label, s.scheme, len(s.runs), int(max(r.steps[-1] for r in s.runs)), cluster,
            s.density, s.achieved(), min(r.achieved for r in s.runs), max(r.achieved for r in s.runs),
            float(np.mean([r.achieved_steady for r in s.runs])),
            float(np.mean(final)), min(final), max(final), float(np.mean(best)), target, f"{n_hit}/{len(s.runs)}",
            *(_mean_min_max(st_hit) + _mean_min_max(ts) + _mean_min_max(comm)),
            1e3 * float(np.mean([r.target_s for r in s.runs])),
            1e3 * float(np.mean([r.run.summary.get("target/comm_s", math.nan) for r in s.runs])),
            *[1e3 * v for v in _mean_min_max([r.run.summary.get("time/compute_s", math.nan) for r in s.runs])]]


def style_panels(axes, series: list[Series], cluster: str, target: float) -> None:
    """The four panels' target line, labels, titles and limits."""
    for ax in axes[1:3]:
        ax.axhline(target, color=style.GREY, ls=(0, (1, 1)), lw=0.8)
    axes[0].set(xlabel="epoch", ylabel="training loss", yscale="log",
                title="training loss")
    axes[1].set(xlabel="epoch", ylabel="validation accuracy (top-1)", title="validation accuracy")
    what = "modelled time" if all(clock_key([m for m in r.run.metrics if "train/loss" in m]) == "target/iter_s"
                                  for s in series for r in s.runs) else "modelled communication time"
    axes[2].set(xlabel=f"{what} on {cluster} (s)", ylabel="validation accuracy (top-1)",
                title=f"validation accuracy vs {what}")
    lo = min(float(np.min(r.val_acc)) for s in series for r in s.runs)
    # from 0.12 below the target, lower where a series ends below that (its curve stays in view)
    finals = [float(np.mean([r.val_acc[-1] for r in s.runs])) for s in series]
    for ax in axes[1:3]:
        ax.set_ylim(max(lo, min(target - 0.12, min(finals) - 0.05)), None)
    axes[3].set_yticks(range(len(series)), [textwrap.shorten(s.label, 22, placeholder="...")
                                            for s in reversed(series)])
    axes[3].set(xlabel=f"{what} to accuracy {target:g} (s)", ylabel="scheme",
                title=f"time to {target:g} (hatched: communication)")
    axes[3].set_xlim(0, axes[3].get_xlim()[1] * 1.6)


def _mean_min_max(values: list[float]) -> list:
    return [float(np.mean(values)), min(values), max(values)] if values else ["", "", ""]


ROW_HEADER = ["figure", "series", "label", "scheme", "seeds", "kind", "step", "epoch", "train_loss_mean",
              "train_loss_min", "train_loss_max", "model_time_s_mean", "val_acc_mean", "val_acc_min", "val_acc_max"]
SUMMARY_HEADER = ["figure", "series", "label", "scheme", "seeds", "steps", "cluster", "density",
                  "density_achieved_mean", "density_achieved_min", "density_achieved_max",
                  "density_achieved_after_warmup", "final_val_acc_mean", "final_val_acc_min", "final_val_acc_max",
                  "best_val_acc_mean", "target_acc", "reached", "steps_to_target_mean", "steps_to_target_min",
                  "steps_to_target_max", "time_to_target_s_mean", "time_to_target_s_min", "time_to_target_s_max",
                  "comm_to_target_s_mean", "comm_to_target_s_min", "comm_to_target_s_max", "target_time_ms",
                  "target_comm_ms", "compute_ms_mean", "compute_ms_min", "compute_ms_max"]


PHASE_HEADER = ["figure", "series", "label", "seeds", "phase", "first_step", "last_step",
                "achieved_over_target_mean", "achieved_over_target_min", "achieved_over_target_max"]


def phase_rows(s: Series) -> list[list]:
    """How the achieved density drifts: per phase (density warm-up, then thirds of the rest), achieved /
    target over its steps, mean, min and max over seeds."""
    if s.scheme == "dense":
        return []
    fig = str(info_of(s.runs[0].run).get("figure", ""))
    n = min(len(r.phases) for r in s.runs)
    names = (["warm-up"] if n == 4 else []) + ["first third", "second third", "last third"]
    rows = []
    for i in range(n):
        ratios = [r.phases[i][2] for r in s.runs]
        rows.append([fig, s.key, s.label, len(s.runs), names[i] if len(names) == n else str(i),
                     s.runs[0].phases[i][0], s.runs[0].phases[i][1], float(np.mean(ratios)), min(ratios), max(ratios)])
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=str(RUNS), help="folder searched for run directories")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--target-acc", type=float, default=0.9,
                    help="time-to-accuracy target for runs without run_info.json (default 0.9)")
    args = ap.parse_args(argv)
    runs = [r for r in find_runs(Path(args.runs)) if r.metrics and not r.capture_stats()
            and info_of(r).get("kind") != "density"]          # the density sweep is fig_density.py's
    runs = require(runs, Path(args.runs), "metrics.jsonl and no capture (the convergence runs)")
    figures = group(runs, args.target_acc)
    out = Path(args.out)
    summary: list[list] = []
    quick = any(info["profile"] == "quick" for info, _ in figures.values())
    for fig_name, (info, series) in sorted(figures.items()):
        first, rows, summ = draw(fig_name, info, series)
        plt.close(first)
        summary += summ
        stem = "fig_convergence" + (f"_{fig_name}" if fig_name else "") + ("_quick" if info["profile"] == "quick"
                                                                            else "")
        for path in style.save(lambda w, f=fig_name, i=info, s=series: draw(f, i, s, w)[0], out, stem, ROW_HEADER,
                               rows):
            print(f"wrote {path}")
    suffix = "_quick" if quick else ""
    path = out / f"convergence_summary{suffix}.csv"
    write_csv(path, SUMMARY_HEADER, summary)
    phases = out / f"convergence_density_phases{suffix}.csv"
    write_csv(phases, PHASE_HEADER, [row for _, (_, series) in sorted(figures.items()) for s in series
                                     for row in phase_rows(s)])
    for p in (path, phases):
        print(f"wrote {p}")
    return 0



def findings(out: Path) -> list[str]:
    """README tables from convergence_summary.csv: per panel and scheme, densities, accuracy, steps and time
    to the target."""
    rows = read_rows(out, "convergence_summary") or []
    lines = []
    for fig in dict.fromkeys(r["figure"] for r in rows):
        rs = [r for r in rows if r["figure"] == fig]
        r0 = rs[0]
        lines += [f"- `{fig}`: {r0['seeds']} seeds, {r0['steps']} steps, target {float(r0['target_acc']):g} validation "
                  f"accuracy; mean [min, max] over seeds; modelled time on {r0['cluster']} (the target's compute "
                  "profile + alpha-beta communication, or the communication alone for a model without a profile: "
                  "docs/metrics.md; the communication part in parentheses)", "",
                  "  | scheme | density configured / achieved (after warm-up) | final val acc | best val acc | "
                  "seeds reaching target | steps to target | modelled s to target (comm s) |",
                  "  |---|---|---|---|---|---|---|"]
        for r in rs:
            dens = "1 / 1" if r["scheme"] == "dense" else \
                f"{float(r['density']):.3g} / {float(r['density_achieved_mean']):.3g} " \
                f"({float(r['density_achieved_after_warmup']):.3g})"
            comm = f" ({float(r['comm_to_target_s_mean']):.2f})" if r["comm_to_target_s_mean"] else ""
            lines.append(f"  | {r['label']} | {dens} | {mean_range(r, 'final_val_acc')} | "
                         f"{float(r['best_val_acc_mean']):.3f} | {r['reached']} | "
                         f"{mean_range(r, 'steps_to_target', '.0f')} | "
                         f"{mean_range(r, 'time_to_target_s', '.2f')}{comm} |")
        lines.append("")
    return lines


if __name__ == "__main__":
    sys.exit(main())
