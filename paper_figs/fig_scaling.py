"""Scaling figures of the gTop-k paper from the iteration-time model, next to the paper's numbers.

    python paper_figs/fig_scaling.py [--out DIR] [--profile PATH ...] [--no-shipped] [--no-calibrated]
                                     [--link ALPHA BETA | --link-from YAML] [--measured CSV]
                                     (default DIR: paper_figs/out; `make fig-scaling [OUT=DIR]`)

--profile PATH (repeatable) adds a measured profile (`python -m ssgd.tools.measure <overrides> out=PATH`)
to every figure and to the ratio table beside the shipped ones (--no-shipped: instead of them); the
paper's markers appear only for profiles named like the paper's models.

Paper: Shi et al., ICDCS 2019 (arXiv:1901.04359). One module per part, each documented there:
(a) fig_scaling_efficiency (scaling_efficiency.py): efficiency vs P = 4 ... 1024 of every scheme and
    profile on 1 GbE and 10 GbE, the paper's markers, the calibrated curves and, when --measured names a
    CSV of `make bench-testbed-replay` (default: paper_figs/measured/testbed_replay_1gbit.csv, its tracked
    copy), the efficiencies measured on the testbed;
(b) fig_comm_vs_P (scaling_comm.py): communication time vs P, our alpha-beta models and the paper's forms;
(c) fig_breakdown_32 and ratios_p32.csv (scaling_breakdown.py): the 32-worker breakdown, model vs paper,
    and the gTop-k/dense, gTop-k/Top-k efficiency ratios at P = 32 (also printed);
(d) calibrated mode, on unless --no-calibrated (scaling_calibrated.py): constants fitted to the paper's
    P = 4, 8 times, P = 16, 32 predicted, against the naive and pinned-link predictors:
    scaling_calibrated_{points,errors,constants}.csv and their tables.
What they share (schemes, clusters, profiles) is scaling_model.py. Each figure: PNG + PDF + the CSV that
was plotted. `findings` reads the CSVs back into the per-cell reproduction table of paper_figs/README.md
(paper_figs/reproduction.py).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import reproduction as rep
import scaling_calibrated as calibrated
from figlib import read_rows
from scaling_breakdown import fig_breakdown, print_ratios, ratio_rows, write_ratios
from scaling_comm import fig_comm
from scaling_efficiency import MEASURED, fig_efficiency, load_measured
from scaling_model import NETWORKS, ROOT, load_network, load_profile_files, shipped_profiles
from ssgd.perf.paper import paper_model


def parser() -> argparse.ArgumentParser:
    """The command line of the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "paper_figs" / "out"), help="output folder")
    ap.add_argument("--profile", action="append", default=[], metavar="PATH",
                    help="a measured profile JSON (python -m ssgd.tools.measure ... out=PATH) to plot beside "
                         "the shipped ones; repeatable")
    ap.add_argument("--no-shipped", action="store_true", help="plot only the --profile files")
    ap.add_argument("--calibrated", action=argparse.BooleanOptionalAction, default=True,
                    help="fit effective constants to the paper's P = 4, 8 times, predict P = 16, 32, overlay them "
                         "and write scaling_calibrated_*.csv (default: on)")
    link = ap.add_mutually_exclusive_group()
    link.add_argument("--link", nargs=2, type=float, metavar=("ALPHA", "BETA"), default=None,
                      help="the pinned predictor's alpha (s) and beta (s/byte) (default: the measured testbed "
                           f"link, {calibrated.TESTBED_ALPHA_S:g} s and {calibrated.TESTBED_BETA_S_PER_BYTE:g} s/byte)")
    link.add_argument("--link-from", metavar="PATH", default=None,
                      help="take the pinned predictor's alpha and beta from network.alpha/beta of this YAML "
                           "(e.g. outputs/testbed/alphabeta.yaml of make alphabeta-testbed)")
    ap.add_argument("--measured", type=Path, default=MEASURED, metavar="CSV",
                    help="efficiencies measured on the testbed in replay mode (make bench-testbed-replay) to draw "
                         f"beside the model (default: {MEASURED.relative_to(ROOT)}, when present)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.no_shipped and not args.profile:
        ap.error("--no-shipped needs at least one --profile PATH")
    t0 = time.perf_counter()
    shipped = [] if args.no_shipped else shipped_profiles()
    try:
        pinned = calibrated.load_link(args.link, args.link_from)
        profs = shipped + load_profile_files(args.profile, shipped)
        measured = load_measured(args.measured)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written = draw(profs, out, args.calibrated, measured, pinned)
    print(f"wrote {len(written)} files to {out} in {time.perf_counter() - t0:.1f} s")
    return 0


def draw(profs: list, out: Path, calibrate: bool, measured: dict, pinned) -> list[Path]:
    """Every figure and CSV of the module docstring into `out`; the paths written."""
    nets = [(label, load_network(cluster)) for label, cluster in NETWORKS]
    cals = [calibrated.calibrate(paper_model(p.name), p.d) for p in profs if calibrate and paper_model(p.name)]
    written = fig_efficiency(profs, nets, out, {c.paper.name: c for c in cals}, measured) + fig_comm(nets, out) \
        + fig_breakdown(profs, nets[0][1], out)
    rows = ratio_rows(profs, nets)
    written.append(write_ratios(rows, out))
    print_ratios(rows)
    if cals:
        written += calibrated.write_calibrated(cals, nets[0][1], out, pinned)
    return written



def findings(out: Path) -> list[str]:
    """The per-cell reproduction table (paper_figs/reproduction.py): counts per artefact, then every row."""
    eff, ratios = read_rows(out, "fig_scaling_efficiency"), read_rows(out, "ratios_p32")
    if not eff or not ratios:
        return []
    rows = rep.ratio_rows(ratios) + rep.efficiency_rows(eff, "model") + rep.efficiency_rows(eff, "calibrated")
    if any(r["source"] == "testbed" for r in eff):
        rows += rep.efficiency_rows(eff, "testbed")
    if any(r["source"] == "simgrid" for r in eff):
        rows += rep.simulated_ratio_rows(eff) + rep.efficiency_rows(eff, "simgrid")
    basis = {"ratio at P = 32 (model)": "plain alpha-beta model: compute from the paper's P = 1 throughput, "
             "selection from the paper's breakdown; only the dependence on P is a prediction",
             "efficiency (model)": "plain alpha-beta model (as above): only the dependence on P is a prediction",
             "efficiency (calibrated)": "constants fitted to the paper's P = 4, 8; P = 16, 32 held out (shown)",
             "efficiency (testbed)": "measured on the testbed's 1 Gbit links (`make bench-testbed-replay`): the "
             "paper's GPU compute and selection replayed, the real trainer's communication; P <= 4 hosts here, so "
             "P = 8-32 are not attempted",
             "ratio at P = 32 (simulated)": "SimGrid replay (`make simgrid-scaling`): the same profiles, whole iterations "
             "on a simulated 32 x 1 GbE star, the lab's collective programs, 25 MiB buckets with wait-free backprop",
             "efficiency (simgrid)": "SimGrid replay (as above), efficiency from the slowest rank's step"}
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


if __name__ == "__main__":
    sys.exit(main())
