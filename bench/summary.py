"""One page of every benchmark's latest results: <results>/summary.md (the last step of `make bench`).

Reads the JSON the benchmarks wrote (a missing one is reported as not run) and measures nothing.
Every table is rendered from the JSON by the benchmark's own renderer, which prints each number of
a noisy measurement with its mark (bench/harness.py): a result file without noise measurements (an
older run) is not rendered at all, only named.

  <results>/dlbench.json           make bench-dlbench   (bench/dlbench.py)
  <results>/trainer_vs_peers.json  make bench-trainer   (bench/trainer_vs_peers.py)
  <results>/threads_overhead.json  make bench-threads   (bench/threads_overhead.py)
  <results>/comm.json              make bench-comm      (bench/comm.py; comm_quick.json if only --quick ran)
  <results>/selection.json         make fig-selection   (paper_figs/fig_selection.py, bench/selection.py)

    .venv/bin/python bench/summary.py [--results-dir DIR] [--out FILE] [--wall-s SECONDS | --start-file FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import harness  # noqa: E402
import machine_info as machine  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def noisy_flags(name: str, result: dict) -> list[bool | None]:
    """The noise verdict of every comparison in one benchmark's result (KeyError if it has none)."""
    if name == "dlbench":
        return [g["series"]["noisy"] for g in result["groups"]]
    if name == "trainer_vs_peers":
        return [r["noisy"] for r in result["threads"]] + [r["noisy"] for r in result["mpi"]]
    if name == "threads_overhead":
        return [r["noisy"] for r in result["rows"]]
    if name == "comm":
        return [c["series"]["noisy"] for c in result["cases"]]
    if name == "selection":
        seen = {(r["device"], r["dist"], r["d"]): r["noisy"] for r in result["rows"]}
        return list(seen.values())
    raise ValueError(name)


def _dlbench(result: dict) -> str:
    import dlbench
    return dlbench.markdown(result)


def _trainer(result: dict) -> str:
    import trainer_vs_peers
    return trainer_vs_peers.markdown(result)


def _threads(result: dict) -> str:
    from threads_report import threads_table
    s = result.get("settings", {})
    lines = [harness.describe_method(s.get("noise_threshold_cores", harness.DEFAULT_THRESHOLD_CORES),
                                     s.get("retries", harness.DEFAULT_RETRIES)), ""]
    return "\n".join(lines + threads_table(result["rows"])) + "\n"


def _comm(result: dict) -> str:
    import comm
    return comm.markdown(result)


def _selection(result: dict) -> str:
    import selection
    return selection.markdown_tables([selection.Row(**r) for r in result["rows"]]) + "\n"


# (section title, make target, result file(s) in order of preference, key for noisy_flags, renderer)
SECTIONS: list[tuple[str, str, tuple[str, ...], str, Callable[[dict], str]]] = [
    ("DLBench workloads", "bench-dlbench", ("dlbench.json",), "dlbench", _dlbench),
    ("The trainer against its peers", "bench-trainer", ("trainer_vs_peers.json",), "trainer_vs_peers", _trainer),
    ("Threads backend overhead", "bench-threads", ("threads_overhead.json",), "threads_overhead", _threads),
    ("Collectives on MPI ranks; gTop-k ours vs released", "bench-comm", ("comm.json", "comm_quick.json"), "comm",
     _comm),
    ("Selection cost", "fig-selection", ("selection.json",), "selection", _selection),
]


def section(results: Path, title: str, target: str, files: tuple[str, ...], key: str,
            render: Callable[[dict], str]) -> tuple[list[str], list[bool | None]]:
    """The lines of one section and its comparisons' noise verdicts."""
    head = [f"## {title} (`make {target}`)", ""]
    path = next((results / f for f in files if (results / f).exists()), None)
    if path is None:
        return head + [f"not run (`make {target}`)", ""], []
    result = _load(path)
    try:
        flags = noisy_flags(key, result)
        body = render(result)
    except (KeyError, TypeError):
        return head + [f"{path.name} has no noise measurements (an older run): not shown; rerun `make {target}`.",
                       ""], []
    return head + [f"From `{path.name}`" + (f" (`{result['command']}`)" if result.get("command") else "") + ".", "",
                   body.rstrip(), ""], flags


def summary(wall_s: float | None, results: Path = RESULTS) -> str:
    parts, flags = [], []
    for title, target, files, key, render in SECTIONS:
        lines, f = section(results, title, target, files, key, render)
        parts += lines
        flags += f
    noisy = sum(1 for f in flags if f)
    unmeasured = sum(1 for f in flags if f is None)
    verdict = (f"{noisy} of {len(flags)} comparisons are marked noisy" if noisy else
               f"none of the {len(flags)} comparisons is noisy") + (
        f", {unmeasured} unmeasured" if unmeasured else "") + (
        ": other processes used more CPU than the benchmark's threshold while they ran; their numbers carry "
        "the mark '(noisy)' and are not quiet-machine results." if noisy else ".")
    head = ["# Benchmark summary", "",
            f"Machine: {machine.one_line(machine.describe())}.",
            f"`make bench` wall time: {wall_s / 60:.1f} min." if wall_s else "",
            f"Noise: {verdict}", ""]
    return "\n".join(head + parts)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results-dir", type=Path, default=RESULTS,
                    help="where the benchmarks wrote (default bench/results)")
    ap.add_argument("--wall-s", type=float, help="wall time of the whole `make bench`, to report")
    ap.add_argument("--start-file", type=Path,
                    help="file holding the Unix time `make bench` started (instead of --wall-s)")
    ap.add_argument("--out", type=Path, help="default <results-dir>/summary.md")
    args = ap.parse_args(argv)
    wall_s = args.wall_s
    if args.start_file is not None and args.start_file.exists():
        wall_s = time.time() - float(args.start_file.read_text().split()[0])
    text = summary(wall_s, args.results_dir)
    out = args.out or args.results_dir / "summary.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    print(f"[summary] wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
