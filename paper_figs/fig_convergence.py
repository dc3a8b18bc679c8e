"""Training loss and validation accuracy vs epoch and vs modelled wall time, per scheme (convergence).

    python paper_figs/fig_convergence.py [--runs paper_figs/runs] [--out paper_figs/out]

Reads metrics.jsonl and summary.json of every run under --runs that has no capture statistics (the
convergence runs; runs with capture are the histogram / bounds runs), groups them by (model, dataset).
Panels: training loss vs epoch, validation accuracy vs epoch, training loss vs modelled wall time on the
run's cluster (cumulative `time/iter_model_s`: this machine's measured compute and compression plus
the alpha-beta communication model of the cluster, README "What a run does"). One curve per scheme.
Writes fig_convergence.{png,pdf,csv}.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import analysis as an
from figlib import OUT, RUNS, Run, find_runs, plt, require, save

ORDER = ("dense", "topk", "gtopk", "gaussiank", "randomk")


def curves(run: Run) -> dict[str, list]:
    """Per-record series of one run: train records (step, epoch, loss, modelled time) and val records."""
    train = [m for m in run.metrics if "train/loss" in m]
    val = [m for m in run.metrics if "val/acc" in m]
    t = an.modelled_time([m["step"] for m in train], [m["time/iter_model_s"] for m in train])
    return {"step": [m["step"] for m in train], "epoch": [m["epoch"] for m in train],
            "loss": [m["train/loss"] for m in train], "time": list(t),
            "val_epoch": [m["epoch"] for m in val], "val_acc": [m["val/acc"] for m in val]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=str(RUNS), help="folder searched for run directories")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    runs = [r for r in find_runs(Path(args.runs)) if r.metrics and not r.capture_stats()]
    runs = require(runs, Path(args.runs), "metrics.jsonl and no capture (the convergence runs)")
    groups: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.model, str(run.summary.get("dataset"))), []).append(run)
    fig, axes = plt.subplots(len(groups), 3, figsize=(13, 3.4 * len(groups)), squeeze=False)
    rows: list[list] = []
    for row, ((model, dataset), group) in enumerate(sorted(groups.items())):
        group.sort(key=lambda r: (ORDER.index(r.scheme) if r.scheme in ORDER else len(ORDER), r.path.name))
        for run in group:
            c = curves(run)
            label = f"{run.scheme} (rho = {run.density:g})" if run.scheme != "dense" else "dense"
            axes[row, 0].plot(c["epoch"], c["loss"], lw=1, label=label)
            axes[row, 1].plot(c["val_epoch"], c["val_acc"], "o-", ms=2, lw=1, label=label)
            axes[row, 2].plot(c["time"], c["loss"], lw=1, label=label)
            rows += [[run.path.name, model, dataset, run.scheme, run.density, s, e, loss, t, ""]
                     for s, e, loss, t in zip(c["step"], c["epoch"], c["loss"], c["time"])]
            rows += [[run.path.name, model, dataset, run.scheme, run.density, "", e, "", "", a]
                     for e, a in zip(c["val_epoch"], c["val_acc"])]
        cluster, P = group[0].summary.get("cluster"), group[0].summary.get("world_size")
        for ax, (xlabel, ylabel) in zip(axes[row], [("epoch", "training loss"), ("epoch", "validation accuracy"),
                                                    (f"modelled wall time on {cluster} (s)", "training loss")]):
            ax.set_xlabel(xlabel, fontsize=8)
            ax.set_ylabel(ylabel, fontsize=8)
            ax.tick_params(labelsize=7)
        axes[row, 0].set_title(f"{model} on {dataset}, P = {P}", fontsize=9)
        axes[row, 0].set_yscale("log")
        axes[row, 2].set_yscale("log")
        axes[row, 1].legend(fontsize=7)
    fig.tight_layout()
    header = ["run", "model", "dataset", "scheme", "density", "step", "epoch", "train_loss", "model_time_s", "val_acc"]
    for path in save(fig, Path(args.out), "fig_convergence", header, rows):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
