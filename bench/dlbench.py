"""DLBench revisited: time per mini-batch of DLBench's workloads across tools and thread counts.

DLBench (Shi, Wang, Xu, Chu, "Benchmarking State-of-the-Art Deep Learning Software Tools",
arXiv:1608.07249) times one training step = forward + loss + backward + SGD update (lr 0.01,
momentum 0.9) on one fixed synthetic mini-batch. Here every (tool, thread count) cell of a workload
runs in its own worker process, which builds the model, warms up (`--warmup` steps, at least one for
compiled tools: tracing and compilation happen there and are reported as `warmup_s`) and then waits
for the driver. The driver interleaves the cells in rounds (bench/harness.py): one step of each cell
in turn, round after round, `--reps` rounds (fewer, but at least 3, when the slowest cell's step times
`--reps` would pass `--budget` seconds). Reported per cell: the median step time with the quartiles,
min and max over rounds; per tool the speed-up from 1 thread to the others, taken inside each round.
During each round the CPU used by processes outside this benchmark (the driver and its workers) is
measured; a round above --noise-threshold cores (default 0.2) is repeated (<= --retries, default 2),
and a workload whose rounds stay above it is marked "noisy" in every table.

The cells of a workload are alive together while memory allows (a new worker starts only while
MemAvailable stays above max(2 GiB, 15 % of RAM)); cells that did not fit are measured in a later
group, and the tables say which cells were interleaved together.

Workloads (`dlbench_workloads.py`, parameter counts pinned and checked for every tool):
FCN-5 (26752-2048-2048-2048-26752 sigmoid), FCN-R (784-2048-4096-1024-10 sigmoid, MNIST-shaped),
AlexNet-R and ResNet-56 (CIFAR-shaped), the 2-layer LSTM(256) on PTB-shaped tokens (32 steps).
Default batch sizes are DLBench sizes that fit a 2-core budget (FCN-5 128, FCN-R 342, AlexNet-R 256,
ResNet-56 32, LSTM 32; its CPU runs used 1024 / 1024 / 1024 / 128 / 128): `--batch-size`.

Tools: PyTorch eager (`torch`), `torch.compile` (`torch_compile`; Inductor with the same thread
count), and with `.venv-tools` (made by `make bench-dlbench`) Keras 3 on TensorFlow (`tensorflow`:
a tf.function graph, no XLA, Keras's default on CPU) and on JAX (`jax`: XLA jit). Tools whose
environment is missing are skipped with a message. Thread counts (`--threads`): 1, then powers of
two, and all usable cores. Each worker is pinned to that many cores (CPU affinity) with every thread
pool of the tool sized to it (OMP_NUM_THREADS, torch.set_num_threads, TensorFlow's intra/inter-op
pools, XLA's pool follows the affinity).

    .venv/bin/python bench/dlbench.py                       # all tools found
    .venv/bin/python bench/dlbench.py --quick               # no torch.compile, 3 rounds, 1 retry
    .venv/bin/python bench/dlbench.py --quick --tools torch --workloads fcnr alexnet_r
    .venv/bin/python bench/dlbench.py --tools torch --workloads resnet56 --batch-size resnet56=128 --reps 10

Writes <--results> (default bench/results/dlbench.json: rows, every round's step times and noise,
machine, versions, skipped tools) and <--out-dir>/dlbench.{csv,md,png,pdf} (default paper_figs/out).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import harness  # noqa: E402
import machine_info as machine  # noqa: E402
from dlbench_workloads import WORKLOADS  # noqa: E402

TOOLS = ("torch", "torch_compile", "tensorflow", "jax")
TOOL_LABELS = {"torch": "PyTorch eager", "torch_compile": "torch.compile", "tensorflow": "TensorFlow (Keras 3)",
               "jax": "JAX (Keras 3)"}
KERAS_TOOLS = ("tensorflow", "jax")
TOOLS_VENV = ROOT / ".venv-tools"
RESULTS = ROOT / "bench" / "results" / "dlbench.json"
FIGDIR = ROOT / "paper_figs" / "out"
WORKER_TIMEOUT_S = 1800       # per answer of a worker (its start-up and warm-up included)
MIN_ROUNDS = 3                # rounds per workload even when the budget is spent
GiB = 2**30


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


# ----------------------------------------------------------------------------------------------
# worker: one (tool, threads, workload) cell in its own process, serving the driver
# ----------------------------------------------------------------------------------------------
def serve(tool: str, threads: int, key: str, batch: int, warmup: int) -> int:
    """Build and warm up one cell, say `READY {facts}`, then answer each `step` line on stdin with
    `T <seconds> <loss>` (one timed training step) until `quit` or end of input."""
    if tool in KERAS_TOOLS:
        import dlbench_keras as impl
    else:
        import dlbench_torch as impl
    impl.set_threads(tool, threads)
    try:
        step, facts = impl.prepare(tool, WORKLOADS[key], batch, warmup)
        facts["versions"] = impl.versions(tool)
    except Exception as err:                               # reported as the cell's error, not a crash
        print(f"ERROR {type(err).__name__}: {err}".replace("\n", " "), flush=True)
        return 1
    print("READY " + json.dumps(facts), flush=True)
    for line in sys.stdin:
        if line.strip() != "step":
            break
        t0 = time.perf_counter()
        loss = step()
        print(f"T {time.perf_counter() - t0!r} {loss!r}", flush=True)
    return 0


# ----------------------------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------------------------
def default_threads(cores: int) -> list[int]:
    """1, the powers of two below `cores`, and `cores` (DLBench: 1, 2, 4, ... all)."""
    counts, n = [1], 2
    while n < cores:
        counts.append(n)
        n *= 2
    return sorted(set(counts + [cores]))


def parse_batches(items: list[str] | None, keys: list[str]) -> dict[str, int]:
    """['16'] -> 16 for every workload; ['resnet56=64', 'lstm=128'] -> those; others keep their default."""
    batches = {k: WORKLOADS[k].batch for k in keys}
    for item in items or []:
        name, _, value = item.rpartition("=")
        if name and name not in WORKLOADS:
            raise UsageError(f"--batch-size {item}: unknown workload {name!r}; allowed: {', '.join(WORKLOADS)}")
        if not value.isdigit() or int(value) < 1:
            raise UsageError(f"--batch-size {item}: the batch size must be a positive integer")
        for k in ([name] if name else keys):
            if k in batches:
                batches[k] = int(value)
    return batches


def tools_python(venv: Path) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / "python"


def tool_available(tool: str, venv: Path) -> str | None:
    """None when `tool` can run, else why not (one line)."""
    if tool not in KERAS_TOOLS:
        return None
    py = tools_python(venv)
    if not py.exists():
        return (f"no {venv.name}/ (create it with `make bench-dlbench`, which installs "
                f"bench/requirements-tools.txt there; TOOLS=0 skips it)")
    module = "tensorflow" if tool == "tensorflow" else "jax"
    probe = subprocess.run([str(py), "-c", f"import keras, {module}"], capture_output=True, text=True,
                           env=tool_env(tool, 1))
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"{venv.name}/ cannot import keras and {module}: {last}"
    return None


def tool_env(tool: str, threads: int) -> dict[str, str]:
    """Environment of a worker: every thread pool sized to `threads`, quiet logs, the Keras backend."""
    n = str(threads)
    env = {**os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n,
           "TF_NUM_INTRAOP_THREADS": n, "TF_NUM_INTEROP_THREADS": n, "TF_CPP_MIN_LOG_LEVEL": "2",
           "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1"), "MALLOC_ARENA_MAX": "2"}
    if tool in KERAS_TOOLS:
        env["KERAS_BACKEND"] = tool
    return env


def pin_to(threads: int):
    """preexec_fn: restrict the worker to the first `threads` of this process's CPUs (Linux)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))[:threads]
    return lambda: os.sched_setaffinity(0, cpus)


class Cell:
    """The driver's handle on one worker process (one tool, thread count, workload and batch)."""

    def __init__(self, tool: str, threads: int, key: str, batch: int, args: argparse.Namespace) -> None:
        self.tool, self.threads, self.key, self.batch = tool, threads, key, batch
        self.name = f"{tool}@{threads}"
        py = tools_python(args.tools_venv) if tool in KERAS_TOOLS else Path(sys.executable)
        argv = [str(py), str(Path(__file__).resolve()), "--worker", "--tool", tool, "--threads", str(threads),
                "--warmup", str(args.warmup), "--jobs", f"{key}={batch}"]
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(argv, env=tool_env(tool, threads), preexec_fn=pin_to(threads),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.facts: dict = {}
        self.error: str | None = None
        self.loss = float("nan")

    def _answer(self, prefixes: tuple[str, ...]) -> str:
        """The next protocol line of the worker (other output is skipped), under a watchdog."""
        watchdog = threading.Timer(WORKER_TIMEOUT_S, self.proc.kill)
        watchdog.start()
        try:
            for line in self.proc.stdout:
                if line.startswith(prefixes):
                    return line.rstrip("\n")
        finally:
            watchdog.cancel()
        self.log.seek(0)
        tail = " | ".join(self.log.read().strip().splitlines()[-2:])
        raise RuntimeError(f"worker ended (exit status {self.proc.wait()}): {tail}")

    def ready(self) -> bool:
        """Wait for the worker's build and warm-up; False (and `error` set) if it failed."""
        try:
            line = self._answer(("READY ", "ERROR "))
        except RuntimeError as err:
            self.error = str(err)
            return False
        if line.startswith("ERROR "):
            self.error = line[len("ERROR "):]
            return False
        self.facts = json.loads(line[len("READY "):])
        return True

    def step(self) -> float:
        """One timed training step in the worker; returns its seconds (measured there)."""
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        _, seconds, loss = self._answer(("T ",)).split()
        self.loss = float(loss)
        return float(seconds)

    def close(self) -> None:
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def memory_low(total: int | None) -> bool:
    """MemAvailable below max(2 GiB, 15 % of RAM): start no further worker in this group."""
    available = machine.mem_available_bytes()
    if available is None or total is None:
        return False
    return available < max(2 * GiB, 0.15 * total)


def rounds_for(cells: list[Cell], args: argparse.Namespace) -> int:
    """--reps, or fewer (>= MIN_ROUNDS, or --reps if smaller) when the slowest cell's step, probed
    once (an extra warm-up step), times --reps would pass --budget seconds."""
    if args.reps <= MIN_ROUNDS:
        return args.reps
    slowest = max(c.step() for c in cells)
    return max(MIN_ROUNDS, min(args.reps, int(args.budget / max(slowest, 1e-9))))


def measure_workload(key: str, batch: int, cells: list[tuple[str, int]], args: argparse.Namespace,
                     groups: list[dict]) -> list[dict]:
    """Every (tool, threads) cell of one workload, interleaved in rounds, in as few groups as memory
    allows; returns the cells' rows and appends each group's series to `groups`."""
    rows: list[dict] = []
    total = machine.mem_total_bytes()
    pending = list(cells)
    while pending:
        group: list[Cell] = []
        while pending and not (group and memory_low(total)):
            tool, n = pending.pop(0)
            cell = Cell(tool, n, key, batch, args)
            print(f"[dlbench] {key} batch={batch}: starting {TOOL_LABELS[tool]}, {n} thread(s) ...",
                  file=sys.stderr, flush=True)
            if cell.ready():
                group.append(cell)
            else:
                print(f"[dlbench] {key} {cell.name}: failed: {cell.error}", file=sys.stderr, flush=True)
                rows.append({"tool": tool, "threads": n, "workload": key, "batch": batch, "error": cell.error})
                cell.close()
        if not group:
            continue
        try:
            n_rounds = rounds_for(group, args)

            def progress(r: harness.Round) -> None:
                print(f"[dlbench] {key} round {r.index + 1}/{n_rounds}: " + ", ".join(
                    f"{name} {1e3 * t:.0f} ms" for name, t in r.times.items()) + "; other CPU "
                    + ("unmeasured" if r.other_cores is None else f"{r.other_cores:.2f} cores")
                    + (f" (attempt {r.attempts})" if r.attempts > 1 else "") + (" NOISY" if r.noisy else ""),
                    file=sys.stderr, flush=True)

            series = harness.interleaved([(c.name, c.step) for c in group], n_rounds, threshold=args.noise.threshold,
                                         retries=args.noise.retries, warmup=0, on_round=progress)
        finally:
            for c in group:
                c.close()
        info = series.to_json()
        groups.append({"workload": key, "cells": [c.name for c in group], "series": info})
        for c in group:
            rows.append({"tool": c.tool, "threads": c.threads, "workload": key, "batch": batch, **c.facts,
                         "final_loss": c.loss, "times_s": series.values(c.name), "group": len(groups) - 1,
                         "noisy": series.noisy, "other_cores_max": info["other_cores_max"]})
    return rows


def summarise(row: dict) -> dict:
    """Add median / quartiles / min / max / throughput and the parameter check to a worker row."""
    w = WORKLOADS[row["workload"]]
    row["label"] = w.label
    if "times_s" not in row:
        return row
    sp = harness.Spread.of(row["times_s"])
    row.update(median_s=sp.median, q1_s=sp.q1, q3_s=sp.q3, min_s=sp.lo, max_s=sp.hi, reps=sp.n,
               samples_per_s=row["batch"] / sp.median, params_expected=w.params,
               params_ok=row["params"] == w.params)
    return row


def measure(args: argparse.Namespace, tools: list[str], threads: list[int], batches: dict[str, int]) -> dict:
    rows, versions, skipped, groups = [], {}, {}, []
    ready = []
    for tool in tools:
        why = tool_available(tool, args.tools_venv)
        if why:
            skipped[tool] = why
            print(f"[dlbench] skipping {TOOL_LABELS[tool]}: {why}", file=sys.stderr, flush=True)
        else:
            ready.append(tool)
    for key, batch in batches.items():
        cells = [(tool, n) for tool in ready for n in threads]
        for row in measure_workload(key, batch, cells, args, groups):
            rows.append(summarise(row))
            if "versions" in row:
                versions[row["tool"]] = row.pop("versions")
            if "error" in row:
                skipped[f"{row['tool']}@{row['threads']} {key}"] = row["error"]
    return {"rows": rows, "versions": versions, "skipped": skipped, "groups": groups}


def speedups(result: dict) -> list[dict]:
    """Per workload and tool: time at 1 thread / time at n threads, taken inside each round (cells
    interleaved in the same group only), with the group's noise verdict."""
    out = []
    for g in result.get("groups", []):
        s = harness.Series.from_json(g["series"])
        for tool in TOOLS:
            one = f"{tool}@1"
            for name in s.names:
                if one in s.names and name.startswith(f"{tool}@") and name != one:
                    out.append({"workload": g["workload"], "tool": tool, "threads": int(name.split("@")[1]),
                                "speedup": s.ratio(one, name).to_json(), "noisy": s.noisy})
    return out


# ----------------------------------------------------------------------------------------------
# outputs
# ----------------------------------------------------------------------------------------------
def ms(seconds: float) -> str:
    v = 1e3 * seconds
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def tool_versions(versions: dict) -> str:
    """'torch 2.14.1, tensorflow 2.21.0, jax 0.10.2, keras 3.15.1' from the workers' reports."""
    seen: dict[str, str] = {}
    for info in versions.values():
        for name in ("torch", "tensorflow", "jax", "keras"):
            if info.get(name):
                seen[name] = info[name]
    return ", ".join(f"{k} {v}" for k, v in seen.items()) or "no tool ran"


def cell(row: dict | None) -> str:
    if row is None:
        return "-"
    if "median_s" not in row:
        return "failed"
    flag = "" if row["params_ok"] else " (params!)"
    return f"{ms(row['median_s'])} ({ms(row['q1_s'])}-{ms(row['q3_s'])}){flag}" + harness.mark(row.get("noisy"))


def noise_of(cells: list[dict | None]) -> str:
    """The noise column of a table row: max other-process CPU over its cells' rounds, marked if noisy."""
    measured = [c for c in cells if c and "median_s" in c]
    if not measured:
        return "-"
    if any(c.get("other_cores_max") is None for c in measured):
        return harness.UNMEASURED
    worst = max(c["other_cores_max"] for c in measured)
    return f"{worst:.2f}" + harness.mark(any(c.get("noisy") for c in measured))


def markdown(result: dict) -> str:
    """Time per mini-batch in ms, median (quartiles), one row per workload x threads, one column per tool;
    then the thread speed-ups measured inside each round. Every number of a noisy workload carries the mark."""
    rows, tools = result["rows"], [t for t in TOOLS if any(r["tool"] == t for r in result["rows"])]
    index = {(r["workload"], r["threads"], r["tool"]): r for r in rows}
    settings = result["settings"]
    lines = [f"Time per mini-batch (ms; median over rounds, quartiles in brackets) on "
             f"{machine.one_line(result['machine'])}; {tool_versions(result.get('versions', {}))}. Cells of a "
             f"workload interleaved in rounds (<= {settings.get('reps', '?')} rounds, >= {MIN_ROUNDS} within the "
             f"{settings.get('budget_s', '?')} s budget). "
             + harness.describe_method(settings.get("noise_threshold_cores", harness.DEFAULT_THRESHOLD_CORES),
                                       settings.get("retries", harness.DEFAULT_RETRIES)), "",
             "| workload | batch | threads | " + " | ".join(TOOL_LABELS[t] for t in tools)
             + f" | {harness.NOISE_COLUMN} |", "|---|---|---|" + "---|" * (len(tools) + 1)]
    for key in WORKLOADS:
        for n in settings["threads"]:
            cells = [index.get((key, n, t)) for t in tools]
            if not any(cells):
                continue
            batch = next(c["batch"] for c in cells if c)
            lines.append(f"| {WORKLOADS[key].label} | {batch} | {n} | " + " | ".join(cell(c) for c in cells)
                         + f" | {noise_of(cells)} |")
    ups = speedups(result)
    if ups:
        lines += ["", "Speed-up from 1 thread (time at 1 thread / time at n threads, per round; median [min-max]):", "",
                  "| workload | threads | " + " | ".join(TOOL_LABELS[t] for t in tools) + " |",
                  "|---|---|" + "---|" * len(tools)]
        for key in WORKLOADS:
            for n in sorted({u["threads"] for u in ups if u["workload"] == key}):
                found = {u["tool"]: u for u in ups if u["workload"] == key and u["threads"] == n}
                lines.append(f"| {WORKLOADS[key].label} | {n} | " + " | ".join(
                    harness.ratio_cell(found[t]["speedup"], found[t]["noisy"], digits=2) if t in found else "-"
                    for t in tools) + " |")
    split = {}
    for g in result.get("groups", []):
        split.setdefault(g["workload"], []).append(g["cells"])
    for key, parts in split.items():
        if len(parts) > 1:
            lines.append(f"\n{WORKLOADS[key].label}: memory allowed only some cells at once; interleaved together: "
                         + "; ".join(", ".join(p) for p in parts) + " (compare across groups with care).")
    most = max(settings["threads"])
    warm = [r for r in rows if r["tool"] != "torch" and "warmup_s" in r and r["threads"] == most]
    if warm:
        lines += ["", f"Warm-up (tracing / compilation, then `--warmup` steps), s, at {most} thread(s):", "",
                  "| workload | " + " | ".join(TOOL_LABELS[t] for t in tools if t != "torch") + " |",
                  "|---|" + "---|" * len([t for t in tools if t != "torch"])]
        for key in WORKLOADS:
            cells = [index.get((key, most, t)) for t in tools if t != "torch"]
            if any(cells):
                lines.append(f"| {WORKLOADS[key].label} | " + " | ".join(
                    f"{c['warmup_s']:.1f}" if c and "warmup_s" in c else "-" for c in cells) + " |")
    for tool, why in result["skipped"].items():
        lines.append(f"\nSkipped {tool}: {why}")
    return "\n".join(lines) + "\n"


def write_csv(result: dict, path: Path) -> None:
    keys = ["workload", "label", "tool", "threads", "batch", "median_s", "q1_s", "q3_s", "min_s", "max_s", "reps",
            "samples_per_s", "warmup_s", "params", "params_expected", "params_ok", "group", "other_cores_max", "noisy",
            "error"]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(result["rows"])


def chart(result: dict, stem: Path) -> None:
    """One panel per workload: bars per tool, grouped by thread count, quartiles as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if "median_s" in r]
    keys = [k for k in WORKLOADS if any(r["workload"] == k for r in rows)]
    tools = [t for t in TOOLS if any(r["tool"] == t for r in rows)]
    threads = result["settings"]["threads"]
    fig, axes = plt.subplots(1, max(len(keys), 1), figsize=(3.2 * max(len(keys), 1), 3.6), squeeze=False)
    width = 0.8 / max(len(threads), 1)
    for ax, key in zip(axes[0], keys):
        for j, n in enumerate(threads):
            sel = {r["tool"]: r for r in rows if r["workload"] == key and r["threads"] == n}
            xs = [i + (j - (len(threads) - 1) / 2) * width for i, t in enumerate(tools) if t in sel]
            med = [1e3 * sel[t]["median_s"] for t in tools if t in sel]
            err = [[1e3 * (sel[t]["median_s"] - sel[t]["q1_s"]) for t in tools if t in sel],
                   [1e3 * (sel[t]["q3_s"] - sel[t]["median_s"]) for t in tools if t in sel]]
            ax.bar(xs, med, width, yerr=err, capsize=2, label=f"{n} thread{'s' if n > 1 else ''}")
        batch = next(r["batch"] for r in rows if r["workload"] == key)
        ax.set_title(f"{WORKLOADS[key].label}, batch {batch}", fontsize=9)
        ax.set_xticks(range(len(tools)), [TOOL_LABELS[t].replace(" (Keras 3)", "\n(Keras 3)") for t in tools],
                      fontsize=7, rotation=30)
        ax.set_ylabel("ms per mini-batch", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"DLBench workloads, time per mini-batch (median, quartiles): {machine.one_line(result['machine'])}",
                 fontsize=8)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(stem.with_suffix(f".{ext}"), dpi=130)
    plt.close(fig)


def write_outputs(result: dict, results_path: Path, figdir: Path) -> None:
    results_path.parent.mkdir(parents=True, exist_ok=True)
    figdir.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(result, indent=1) + "\n")
    (figdir / "dlbench.md").write_text(markdown(result))
    write_csv(result, figdir / "dlbench.csv")
    chart(result, figdir / "dlbench")


# ----------------------------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------------------------
def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), help=f"of {', '.join(WORKLOADS)}")
    ap.add_argument("--tools", nargs="+", default=list(TOOLS), help=f"of {', '.join(TOOLS)}")
    ap.add_argument("--threads", nargs="+", type=int, help="thread counts (default: 1, powers of 2, all cores)")
    ap.add_argument("--batch-size", nargs="+", metavar="[WORKLOAD=]N", help="one size for all, or per workload")
    ap.add_argument("--reps", type=int, default=10, help="interleaved rounds: timed steps per cell (default 10)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first (default 1; compiled tools >= 1)")
    ap.add_argument("--budget", type=float, default=3.0, help="seconds of timed steps per cell before cutting reps")
    ap.add_argument("--quick", action="store_true", help="no torch.compile, 3 rounds, 1 retry")
    harness.add_noise_arguments(ap)
    ap.add_argument("--tools-venv", type=Path, default=TOOLS_VENV, help="environment of the Keras tools")
    ap.add_argument("--results", type=Path, default=RESULTS, help="JSON output")
    ap.add_argument("--out-dir", type=Path, default=FIGDIR, help="table and chart directory")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tool", help=argparse.SUPPRESS)
    ap.add_argument("--jobs", nargs="+", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def validate(args: argparse.Namespace) -> tuple[list[str], list[int], dict[str, int]]:
    bad = [w for w in args.workloads if w not in WORKLOADS]
    if bad:
        raise UsageError(f"--workloads {bad[0]}: no such workload; allowed: {', '.join(WORKLOADS)}")
    bad = [t for t in args.tools if t not in TOOLS]
    if bad:
        raise UsageError(f"--tools {bad[0]}: no such tool; allowed: {', '.join(TOOLS)}")
    cores = machine.usable_cores()
    threads = sorted(set(args.threads)) if args.threads else default_threads(cores)
    if any(n < 1 or n > cores for n in threads):
        raise UsageError(f"--threads {' '.join(map(str, args.threads))}: each must be in 1..{cores} (usable cores)")
    if args.reps < 1 or args.warmup < 0 or args.budget <= 0:
        raise UsageError("--reps must be >= 1, --warmup >= 0 and --budget > 0")
    if (problem := harness.noise_problem(args)) is not None:
        raise UsageError(problem)
    args.noise = harness.noise_from_args(args, quick=args.quick)
    tools = [t for t in args.tools if not (args.quick and t == "torch_compile")]
    return tools, threads, parse_batches(args.batch_size, args.workloads)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.worker:
        key, _, batch = args.jobs[0].rpartition("=")
        return serve(args.tool, int(args.threads[0]), key, int(batch), args.warmup)
    try:
        if args.quick:
            args.reps = min(args.reps, 3)
        tools, threads, batches = validate(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    info = machine.describe()
    result = measure(args, tools, threads, batches)
    result["machine"] = info
    result["settings"] = {"tools": tools, "threads": threads, "batches": batches, "reps": args.reps,
                          "warmup": args.warmup, "budget_s": args.budget, "quick": args.quick,
                          "noise_threshold_cores": args.noise.threshold, "retries": args.noise.retries,
                          "wall_s": time.perf_counter() - start}
    write_outputs(result, args.results, args.out_dir)
    print(markdown(result))
    print(f"[dlbench] {time.perf_counter() - start:.0f} s; wrote {args.results.name}, "
          f"{args.out_dir.name}/dlbench.{{md,csv,png,pdf}}", file=sys.stderr)
    wrong = [r for r in result["rows"] if r.get("params_ok") is False]
    for r in wrong:
        print(f"error: {r['tool']} {r['workload']}: {r['params']} parameters, expected {r['params_expected']} "
              f"(the definitions differ; the comparison is not fair)", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
