"""One page of every benchmark's latest results: bench/results/summary.md (the last step of `make bench`).

Reads what the benchmarks wrote (a missing one is reported as not run) and measures nothing:

  paper_figs/out/dlbench.md            make bench-dlbench   (bench/dlbench.py)
  bench/results/trainer_vs_peers.md    make bench-trainer   (bench/trainer_vs_peers.py)
  bench/results/threads_overhead.json  make bench-threads   (bench/threads_overhead.py)
  bench/results/comm.json              make bench-comm      (bench/comm.py)
  paper_figs/out/fig_selection.csv     make fig-selection   (paper_figs/fig_selection.py)

    .venv/bin/python bench/summary.py [--wall-s SECONDS | --start-file FILE]
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import machine_info as machine  # noqa: E402
from trainer_vs_peers import threads_table  # noqa: E402

RESULTS = ROOT / "bench" / "results"
FIGS = ROOT / "paper_figs" / "out"


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


def threads_section() -> list[str]:
    text = _read(RESULTS / "threads_overhead.json")
    if text is None:
        return ["not run (`make bench-threads`)"]
    return threads_table(json.loads(text)["rows"])


def comm_section() -> list[str]:
    path = RESULTS / "comm.json"
    if not path.exists():
        path = RESULTS / "comm_quick.json"
    text = _read(path)
    if text is None:
        return ["not run (`make bench-comm`)"]
    rows = json.loads(text)["rows"]
    names = ["dense_allreduce", "topk_allgather", "gtopk_allreduce", "gaussiank_allgather"]
    cells: dict[tuple[int, int], dict[str, float]] = {}
    for r in rows:
        cells.setdefault((r["P"], r["d"]), {})[r["collective"]] = r["time_per_call_s"]
    out = [f"({path.name}) ms per call, max over ranks of the median:", "",
           "| P | d | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for (P, d), c in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        times = [f"{1e3 * c[n]:.2f}" if n in c else "-" for n in names]
        out.append(f"| {P} | {d / 2**20:g}M | " + " | ".join(times) + " |")
    return out


def selection_section() -> list[str]:
    path = FIGS / "fig_selection.csv"
    if not path.exists():
        return ["not run (`make fig-selection`)"]
    with path.open() as f:
        rows = [r for r in csv.DictReader(f) if r.get("device", "cpu") == "cpu" and r.get("dist", "normal") == "normal"]
    if not rows:
        return ["no CPU rows in fig_selection.csv"]
    d = max(int(r["d"]) for r in rows)
    sel = [r for r in rows if int(r["d"]) == d]
    out = [f"One selection at d = {d:,}, density 0.001, normal input (fig_selection.csv):", "",
           "| method | median ms | exact Top-k / method |", "|---|---|---|"]
    out += [f"| {r['method']} | {float(r['median_ms']):.1f} | {float(r['topk_over_method']):.2f} |" for r in sel]
    return out


def summary(wall_s: float | None) -> str:
    lines = ["# Benchmark summary", "",
             f"Machine: {machine.one_line(machine.describe())}.",
             f"`make bench` wall time: {wall_s / 60:.1f} min." if wall_s else "", "",
             "## DLBench workloads (`make bench-dlbench`)", "",
             (_read(FIGS / "dlbench.md") or "not run (`make bench-dlbench`)\n").rstrip(), "",
             "Chart: `paper_figs/out/dlbench.png`.", "",
             "## The trainer against its peers (`make bench-trainer`)", "",
             (_read(RESULTS / "trainer_vs_peers.md") or "not run (`make bench-trainer`)\n").rstrip(), "",
             "## Threads backend overhead (`make bench-threads`)", "", *threads_section(), "",
             "## Collectives on MPI ranks (`make bench-comm`)", "", *comm_section(), "",
             "## Selection cost (`make fig-selection`)", "", *selection_section(), ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wall-s", type=float, help="wall time of the whole `make bench`, to report")
    ap.add_argument("--start-file", type=Path,
                    help="file holding the Unix time `make bench` started (instead of --wall-s)")
    ap.add_argument("--out", type=Path, default=RESULTS / "summary.md")
    args = ap.parse_args(argv)
    wall_s = args.wall_s
    if args.start_file is not None and args.start_file.exists():
        wall_s = time.time() - float(args.start_file.read_text().strip())
    text = summary(wall_s)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    shown = args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out
    print(f"[summary] wrote {shown}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
