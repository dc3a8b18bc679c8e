"""Write paper_figs/README.md: every figure, its command, its data, the paper figure it corresponds to,
and what it says, with the numbers read from the CSVs in paper_figs/out (last step of `make figs`).

    python paper_figs/readme.py [--out paper_figs/out] [--readme paper_figs/README.md]

Links point from the README's folder to the figures, wherever --out and --readme are.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
from collections import defaultdict
from pathlib import Path

from scipy.stats import norm

from figlib import OUT, ROOT
import reproduction as rep

FIGURES = [
    ("fig_histograms", "`make fig-histograms` (~2 min with its runs)",
     "u snapshots (`capture.u_steps`) of Top-k runs, density 0.001, 4 workers: FNN-3 and SmallCNN on the embedded "
     "real MNIST digits, the small LSTM on synthetic PTB-shaped tokens (`paper_figs/runs.py`)",
     "Top-k paper: gradient-distribution histograms during TopK-SGD"),
    ("fig_bounds", "`make fig-bounds` (~4 min with its runs on 2 quiet cores)",
     "`capture/stats.jsonl` and u snapshots of the Top-k runs (FNN-3 at densities 0.001, 0.01, 0.05, 0.1, 0.2, 0.3; "
     "SmallCNN and LSTM at 0.001, 0.01, 0.1, 0.3) and of a gTop-k run (FNN-3, 0.001); the bound's shape condition "
     "on every snapshot (`fig_bounds_condition.csv`)", "Top-k paper: bound comparison; IJCAI'19 delta-ratio (norm) figure"),
    ("fig_selection", "`make fig-selection` (~3-10 min with its runs; also `fig_selection_real`)",
     "u ~ N(0, 1) and a heavy-tailed vector of 1e5 ... 2.5e7 entries, density 0.001, this machine's CPU (and GPU when "
     "present); real u: every u snapshot (`capture.u_steps`) of the FNN-3 and SmallCNN Top-k runs "
     "(`hist_fnn3_d0.001`, `hist_cnn_d0.001`) and a 1e6-entry N(0, 1) / Laplace reference at densities 0.001 and "
     "0.01, with the count each selector sent (`fig_selection_real.csv`)",
     "Top-k paper: top-k vs Gaussian-k selection time"),
    ("fig_convergence_topk_paper", "`make fig-convergence` (~12 min with its runs on 2 quiet cores; both figures)",
     "`metrics.jsonl` of dense / Top-k / Gaussian-k (released and bisection refinement) / Random-k / Top-k at "
     "Gaussian-k's achieved density, FNN-3 on the embedded MNIST digits, 4 workers, bs 128, lr 0.01, GaussianK-SGD's "
     "warm-ups for all, 2,000 steps, 3 seeds (`experiments/topk_paper_convergence_laptop.yaml`, "
     "`paper_figs/figures.yaml`), modelled on 4x1GbE",
     "Top-k paper convergence figure (loss / accuracy vs epoch) + time to accuracy"),
    ("fig_convergence_gtopk", "`make fig-convergence`",
     "dense / Top-k / gTop-k, FNN-3 on the embedded MNIST digits, 4 workers, bs 32, lr 0.1, the gTop-k code's "
     "warm-ups for all, 2,000 steps, 3 seeds (`experiments/icdcs_convergence_laptop.yaml`), modelled on 4x1GbE",
     "gTop-k paper convergence figure (S-SGD vs gTop-k S-SGD) + time to accuracy"),
    ("fig_convergence_gtopk_cnn", "`make fig-convergence`",
     "dense / Top-k / gTop-k, SmallCNN on the embedded MNIST digits (a closer stand-in for ResNet-20), 4 workers, "
     "bs 32, lr 0.1, the gTop-k code's warm-ups for all, 200 steps (inside the 10-epoch LR warm-up), 3 seeds "
     "(`experiments/icdcs_convergence_laptop.yaml` + `model=cnn`), modelled on 4x1GbE",
     "gTop-k paper convergence figure, with a convolutional model; `make fig-convergence-paper` runs the paper's"),
    ("fig_density", "`make fig-density` (~4 min with its runs on 2 quiet cores, 6-14 min on a shared one)",
     "final validation accuracy and modelled time to 0.90 on 4x1GbE vs density 1, 0.1, 0.01, 0.001, 0.0001 for "
     "gTop-k, Top-k and Gaussian-k (density 1 = the dense runs), FNN-3 on the embedded MNIST digits, the gTop-k "
     "figure's settings and the same warm-ups for all, 403 steps, 3 seeds (`paper_figs/figures.yaml` `density`)",
     "gTop-k paper (ICDCS'19) density sensitivity (convergence at densities 0.001 ... 0.0001)"),
    ("dlbench", "`make bench-dlbench` (~13 min; not part of `make figs`)",
     "time per mini-batch of DLBench's FCN-5, FCN-R, AlexNet-R, ResNet-56 and LSTM, synthetic data, PyTorch eager / "
     "torch.compile / TensorFlow / JAX at 1 and all threads (bench/README.md)",
     "DLBench (benchmarking state-of-the-art deep learning software tools)"),
    ("fig_scaling_efficiency", "`make fig-scaling` (~10 s)",
     "iteration-time model on the shipped profiles (src/ssgd/perf/profiles), 1 GbE / 10 GbE cluster constants",
     "gTop-k paper (ICDCS'19) scaling efficiency vs workers; paper values as markers"),
    ("fig_comm_vs_P", "`make fig-scaling`", "alpha-beta models of our collectives and the paper's closed forms, "
     "m = 25M, density 0.001", "gTop-k paper `sparvsgtopk_dynamicP`"),
    ("fig_breakdown_32", "`make fig-scaling`", "model at 32 workers vs the paper's breakdown",
     "gTop-k paper time breakdown"),
]


def read(out: Path, name: str) -> list[dict] | None:
    path = out / f"{name}.csv"
    if not path.exists():
        return None
    with path.open() as f:
        return list(csv.DictReader(f))


def histogram_findings(out: Path) -> list[str]:
    rows = read(out, "fig_histograms_stats")
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


def bound_findings(out: Path) -> list[str]:
    rows, delta = read(out, "fig_bounds"), read(out, "fig_bounds_delta")
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
    for r in read(out, "fig_bounds_condition") or []:
        cond[(r["model"], r["density"])].append(r)
    lines += [f"- {m}, rho = {rho}: the shape condition of the tighter bound (`analysis.line_condition`) holds on "
              f"{sum(int(r['holds']) for r in rs)} of {len(rs)} u snapshots; tail / line area at most "
              f"{max(float(r['tail_over_line']) for r in rs):.3f} (<= 1 needed), head / line at least "
              f"{min(float(r['head_over_line']) for r in rs):.3f} (>= 1 needed)" for (m, rho), rs in sorted(cond.items())]
    lines += [f"- IJCAI delta, {s} / Random-k, {m}, rho = {rho}: {d:.4f} in the last epoch ({e})"
              for (s, m, rho), (e, d) in sorted(last.items())]
    return lines


def _range(row: dict, key: str, fmt: str = ".3f") -> str:
    if not row[f"{key}_mean"]:
        return "-"
    mean, lo, hi = (float(row[f"{key}_{x}"]) for x in ("mean", "min", "max"))
    return f"{mean:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def convergence_findings(out: Path) -> list[str]:
    rows = read(out, "convergence_summary") or []
    lines = []
    for fig in dict.fromkeys(r["figure"] for r in rows):
        rs = [r for r in rows if r["figure"] == fig]
        r0 = rs[0]
        lines += [f"- `{fig}`: {r0['seeds']} seeds, {r0['steps']} steps, target {float(r0['target_acc']):g} validation "
                  f"accuracy; mean [min, max] over seeds; modelled time on {r0['cluster']} (this machine's measured "
                  "compute + alpha-beta communication; the communication part in parentheses)", "",
                  "  | scheme | density configured / achieved (after warm-up) | final val acc | best val acc | "
                  "seeds reaching target | steps to target | modelled s to target (comm s) |",
                  "  |---|---|---|---|---|---|---|"]
        for r in rs:
            dens = "1 / 1" if r["scheme"] == "dense" else \
                f"{float(r['density']):.3g} / {float(r['density_achieved_mean']):.3g} " \
                f"({float(r['density_achieved_after_warmup']):.3g})"
            comm = f" ({float(r['comm_to_target_s_mean']):.2f})" if r["comm_to_target_s_mean"] else ""
            lines.append(f"  | {r['label']} | {dens} | {_range(r, 'final_val_acc')} | "
                         f"{float(r['best_val_acc_mean']):.3f} | {r['reached']} | {_range(r, 'steps_to_target', '.0f')} | "
                         f"{_range(r, 'time_to_target_s', '.2f')}{comm} |")
        lines.append("")
    return lines


def density_findings(out: Path) -> list[str]:
    """fig_density.csv as a table: per scheme and density, achieved density, final accuracy, time to the target."""
    rows = read(out, "fig_density") or []
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
                     f"({float(r['density_achieved_after_warmup']):.3g}) | {_range(r, 'final_val_acc')} | "
                     f"{r['reached']} | {_range(r, 'steps_to_target', '.0f')} | "
                     f"{_range(r, 'time_to_target_s', '.2f') if r['time_to_target_s_mean'] else 'not reached'} |")
    return lines + [""]


def selection_findings(out: Path) -> list[str]:
    rows = read(out, "fig_selection") or []
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
    real = read(out, "fig_selection_real") or []
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


def reproduction_findings(out: Path) -> list[str]:
    """The per-cell reproduction table (paper_figs/reproduction.py): counts per artefact, then every row."""
    eff, ratios = read(out, "fig_scaling_efficiency"), read(out, "ratios_p32")
    if not eff or not ratios:
        return []
    rows = rep.ratio_rows(ratios) + rep.efficiency_rows(eff, "model") + rep.efficiency_rows(eff, "calibrated")
    if any(r["source"] == "testbed" for r in eff):
        rows += rep.efficiency_rows(eff, "testbed")
    basis = {"ratio at P = 32 (model)": "plain alpha-beta model: compute from the paper's P = 1 throughput, "
             "selection from the paper's breakdown; only the dependence on P is a prediction",
             "efficiency (model)": "plain alpha-beta model (as above): only the dependence on P is a prediction",
             "efficiency (calibrated)": "constants fitted to the paper's P = 4, 8; P = 16, 32 held out (shown)",
             "efficiency (testbed)": "measured on the testbed's 1 Gbit links (`make bench-testbed-replay`): the "
             "paper's GPU compute and selection replayed, the real trainer's communication; P <= 4 hosts here, so "
             "P = 8-32 are not attempted"}
    lines = [f"Verdict per cell: *reproduced* within {rep.TOLERANCE:.0%} relative, *direction only* (a ratio on "
             "the paper's side of 1; an efficiency whose change from P = 4 has the paper's sign), *not reproduced*, "
             "*not attempted*. Cells read ours / paper (error). 1 GbE, the paper's cluster. Every row: "
             "`make fig-scaling`.", "", "| artefact | ours is | cells |", "|---|---|---|"]
    lines += [f"| {a} | {basis[a]} | {rep.summary_line(a, c)} |" for a, c in rep.counts(rows).items()]
    lines += ["", "| artefact | cell | cells |", "|---|---|---|"]
    lines += [f"| {a} | {k} | {rep.summary_line(a, c)} |" for (a, k), c in rep.counts_by_cell(rows).items()]
    lines += ["", "| artefact | model | P | cells |", "|---|---|---|---|"]
    lines += [f"| {a} | {m} | {p} | " + "; ".join(f"{k}: {t}" for k, (t, _) in cells.items()) + " |"
              for a, m, p, cells in rows]
    lines += ["", "Not attempted here: the convergence figures' models (the papers' CNNs on CIFAR-10 / ImageNet, "
              "LSTM on PTB); `make figs` runs FNN-3 and SmallCNN on the embedded digits as stand-ins, `make fig-convergence-paper` "
              "the paper's ResNet-20 on CIFAR-10 (hours; docs/convergence.md)."]
    return lines


FINDINGS = {"reproduction": reproduction_findings, "fig_histograms": histogram_findings, "fig_bounds": bound_findings,
            "fig_convergence_topk_paper": convergence_findings, "fig_density": density_findings,
            "fig_selection": selection_findings}


def render(out: Path, readme: Path) -> str:
    rel = Path(os.path.relpath(out, readme.parent))
    lines = ["# paper_figs/", "",
             "Figure scripts; each writes PNG + PDF + the CSV it plotted into `paper_figs/out/`. `make figs` trains the",
             "runs the analysis and convergence figures need (`paper_figs/runs.py`, 2 at a time, into the git-ignored",
             "`paper_figs/runs/`; it resumes), draws every figure and rewrites this file (`paper_figs/readme.py`) from",
             "the CSVs; `make figs OUT=dir` writes the figures and this README into `dir` instead. About 13 minutes on 2",
             "quiet cores, most of it the 36 convergence runs (3 seeds per scheme: 2,000 steps of FNN-3, 200 of SmallCNN;",
             "`paper_figs/figures.yaml`) and the 39 runs of the density sweep (3 seeds x 403 steps per scheme and density,",
             "~4 min; `make fig-density`);",
             "`make figs-quick` is a 1-2 minute preview of the convergence figures (2 seeds x 300 steps, titled QUICK,",
             "into `outputs/figs-quick/`). docs/convergence.md reads the convergence numbers against the papers.",
             "Larger versions on real data: the experiments of `experiments/` (capture is on in `topk_histograms` and",
             "`ijcai_norm`), then the script with `--runs <multirun dir>`.", "",
             "| figure | command | data | paper figure |", "|---|---|---|---|"]
    lines += [f"| [`{n}`]({(rel / n).as_posix()}.png) | {cmd} | {data} | {paper} |" for n, cmd, data, paper in FIGURES]
    lines += ["| `validation_resnet20.csv` | `make validate-model` | profile measured here + local runs of each scheme | "
              "validation of the iteration model |",
              "| `ratios_p32.csv` | `make fig-scaling` | gTop-k/dense, gTop-k/Top-k efficiency ratios at P = 32, model vs "
              "paper | gTop-k abstract: 2.7-12x and 1.1-1.7x |", "", "## What the figures say (numbers from the CSVs)", ""]
    for name, find in FINDINGS.items():
        found = find(out)
        images = [name, "fig_convergence_gtopk", "fig_convergence_gtopk_cnn"] if name == "fig_convergence_topk_paper" else \
            [] if name == "reproduction" else [name]
        lines += [f"### {name.replace('_topk_paper', '')}", "", *(f"![{n}]({(rel / n).as_posix()}.png)" for n in images),
                  *([""] if images else []), *(found or ["- not generated yet: run `make figs`"]), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT), help="folder of the figure CSVs")
    ap.add_argument("--readme", default=str(ROOT / "paper_figs" / "README.md"))
    args = ap.parse_args(argv)
    readme = Path(args.readme).resolve()
    readme.parent.mkdir(parents=True, exist_ok=True)
    readme.write_text(render(Path(args.out).resolve(), readme))
    print(f"wrote {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
