"""Write paper_figs/README.md: every figure, its command, its data, the paper figure it corresponds to,
and what it says, with the numbers read from the CSVs in paper_figs/out (last step of `make figs`).
The rows and the sections come from the registry (paper_figs/figures.yaml): an entry's `readme` rows,
and for an entry with `findings` its script's `findings(out)` under its heading and images.

    python paper_figs/readme.py [--out paper_figs/out] [--readme paper_figs/README.md]

Links point from the README's folder to the figures, wherever --out and --readme are.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import registry
from figlib import OUT, ROOT


ADDING = [
    "## Adding a figure", "",
    "A figure is two files: its script and one entry of the registry `paper_figs/figures.yaml`.", "",
    "1. `paper_figs/fig_<name>.py` takes `--out DIR` (default `paper_figs/out`) and, when it reads training runs,",
    "   `--runs DIR`; it writes PNG + PDF + the CSV it plotted and defines `findings(out: Path) -> list[str]`, the",
    "   lines this README shows, read back from its CSVs. A paper figure draws with `paper_figs/style.py` and saves",
    "   with `style.save(draw, ...)`: `draw(width)` at 3.3 and 7 in (`<stem>_col1`, `<stem>_col2`, `<stem>` = 7 in),",
    "   one look per series (`style.SERIES`, Okabe-Ito colours), legends outside the axes; `figlib.save` writes a",
    "   plain chart at one size.",
    "2. An entry under `figures:` in `paper_figs/figures.yaml` (its header lists the keys): `script`, `expected_s`,",
    "   `outputs`, its `readme` rows (name, command, data, paper figure), `findings: {}` and the runs it reads",
    "   (`runs:` name -> experiment, overrides, est_s; `reads:` runs of earlier entries).", "",
    "Then `make fig-<name>` (or `make fig NAME=<name>`) trains its runs and draws it, `make figs` draws it in the",
    "registry's order and checks that its outputs were written, and this README gets its rows and findings; no",
    "other file changes. `tests/unit/test_figure_registry.py` checks every entry and that a new one needs nothing else.",
]


def table_row(row: registry.Row, rel: Path) -> str:
    """A row of the README's table; a figure links to its PNG (`rel`: the figures' folder from the README's)."""
    name = f"[`{row.name}`]({(rel / row.name).as_posix()}.png)" if row.is_image else f"`{row.name}`"
    return f"| {name} | {row.command} | {row.data} | {row.paper} |"


def render(out: Path, readme: Path) -> str:
    """The README of the figures in `out`, its links relative to the folder of `readme`."""
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
    entries = registry.entries(registry.load())
    lines += [table_row(row, rel) for e in entries for row in e.rows()]
    lines += ["", *ADDING, "", "## What the figures say (numbers from the CSVs)", ""]
    for e in entries:
        if e.has_findings:
            images = e.images()
            lines += [f"### {e.heading}", "", *(f"![{n}]({(rel / n).as_posix()}.png)" for n in images),
                      *([""] if images else []), *(e.findings()(out) or ["- not generated yet: run `make figs`"]), ""]
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
