"""Write paper_figs/README.md: every figure, its command, its data, the paper figure it corresponds to,
and what it says, with the numbers read from the CSVs in paper_figs/out (last step of `make figs`).

    python paper_figs/readme.py [--out paper_figs/out]
"""
from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

from scipy.stats import norm

from figlib import OUT, ROOT

FIGURES = [
    ("fig_histograms", "`make fig-histograms` (~2 min with its runs)",
     "u snapshots (`capture.u_steps`) of Top-k runs, density 0.001, 4 workers: FNN-3 and SmallCNN on the embedded "
     "real MNIST digits, the small LSTM on synthetic PTB-shaped tokens (`paper_figs/runs.py`)",
     "Top-k paper: gradient-distribution histograms during TopK-SGD"),
    ("fig_bounds", "`make fig-bounds` (~1.5 min with its runs)",
     "`capture/stats.jsonl` of the Top-k runs (FNN-3 at densities 0.001, 0.01, 0.05; SmallCNN; LSTM) and of a "
     "gTop-k run (FNN-3, 0.001)", "Top-k paper: bound comparison; IJCAI'19 delta-ratio (norm) figure"),
    ("fig_selection", "`make fig-selection` (~1-2 min)",
     "u ~ N(0, 1) and a heavy-tailed vector of 1e5 ... 2.5e7 entries, density 0.001, this machine's CPU (and GPU when "
     "present)", "Top-k paper: top-k vs Gaussian-k selection time"),
    ("fig_convergence", "`make fig-convergence` (~1 min with its runs)",
     "`metrics.jsonl` of dense / Top-k / gTop-k / Gaussian-k / Random-k, FNN-3 on the embedded MNIST digits, "
     "4 workers, bs 128, lr 0.01, 30 epochs (`experiments/topk_paper_convergence_laptop.yaml`), modelled on 4x1GbE",
     "Top-k paper and gTop-k paper convergence figures (loss / accuracy vs epoch)"),
    ("dlbench", "`make bench-dlbench` (~6 min; not part of `make figs`)",
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
    lines += [f"- IJCAI delta, {s} / Random-k, {m}, rho = {rho}: {d:.4f} in the last epoch ({e})"
              for (s, m, rho), (e, d) in sorted(last.items())]
    return lines


def convergence_findings(out: Path) -> list[str]:
    rows = read(out, "fig_convergence")
    final: dict[str, float] = {}
    for r in rows or []:
        if r["val_acc"]:
            final[r["scheme"]] = float(r["val_acc"])      # rows are in epoch order
    return [f"- final validation accuracy, {s}: {a:.3f}" for s, a in final.items()]


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
    return lines


FINDINGS = {"fig_histograms": histogram_findings, "fig_bounds": bound_findings,
            "fig_convergence": convergence_findings, "fig_selection": selection_findings}


def render(out: Path) -> str:
    rel = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    lines = ["# paper_figs/", "",
             "Figure scripts; each writes PNG + PDF + the CSV it plotted into `paper_figs/out/`. `make figs` trains the",
             "short runs the analysis figures need (`paper_figs/runs.py`, into the git-ignored `paper_figs/runs/`; it",
             "resumes), draws every figure and rewrites this file (`paper_figs/readme.py`) from the CSVs. About 5 minutes",
             "on 2 cores (the runs take half of it). Larger versions on real data: the experiments of `experiments/` (capture is on in",
             "`topk_histograms` and `ijcai_norm`), then the script with `--runs <multirun dir>`.", "",
             "| figure | command | data | paper figure |", "|---|---|---|---|"]
    lines += [f"| [`{n}`]({rel.name}/{n}.png) | {cmd} | {data} | {paper} |" for n, cmd, data, paper in FIGURES]
    lines += ["| `validation_resnet20.csv` | `make validate-model` | profile measured here + local runs of each scheme | "
              "validation of the iteration model |",
              "| `ratios_p32.csv` | `make fig-scaling` | gTop-k/dense, gTop-k/Top-k efficiency ratios at P = 32, model vs "
              "paper | gTop-k abstract: 2.7-12x and 1.1-1.7x |", "", "## What the figures say (numbers from the CSVs)", ""]
    for name, find in FINDINGS.items():
        found = find(out)
        lines += [f"### {name}", "", f"![{name}]({rel.name}/{name}.png)", "",
                  *(found or ["- not generated yet: run `make figs`"]), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT), help="folder of the figure CSVs")
    ap.add_argument("--readme", default=str(ROOT / "paper_figs" / "README.md"))
    args = ap.parse_args(argv)
    Path(args.readme).write_text(render(Path(args.out).resolve()))
    print(f"wrote {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
