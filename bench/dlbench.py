"""DLBench revisited: time per mini-batch of DLBench's workloads across tools and thread counts.

Measured (papers.md 8; DLBench's metric): the time of one training step = forward + loss + backward
+ SGD update (lr 0.01, momentum 0.9) on one fixed synthetic mini-batch, after `--warmup` steps (at
least one for compiled tools: tracing and compilation happen there and are reported separately as
`warmup_s`), timed one step at a time over `--reps` steps (fewer, but at least 3, once a cell's timed
steps have used `--budget` seconds); reported as the median with the quartiles, min and max.

Workloads (`dlbench_workloads.py`, parameter counts pinned and checked for every tool):
FCN-5 (26752-2048-2048-2048-26752 sigmoid), FCN-R (784-2048-4096-1024-10 sigmoid, MNIST-shaped),
AlexNet-R and ResNet-56 (CIFAR-shaped), the 2-layer LSTM(256) on PTB-shaped tokens (32 steps).
Default batch sizes are DLBench sizes that fit a 2-core budget (FCN-5 128, FCN-R 342, AlexNet-R 256,
ResNet-56 32, LSTM 32; its CPU runs used 1024 / 1024 / 1024 / 128 / 128): `--batch-size`.

Tools: PyTorch eager (`torch`), `torch.compile` (`torch_compile`; Inductor with the same thread
count), and with `.venv-tools` (made by `make bench-dlbench`) Keras 3 on TensorFlow (`tensorflow`:
a tf.function graph, no XLA, Keras's default on CPU) and on JAX (`jax`: XLA jit). Tools whose
environment is missing are skipped with a message. Thread counts (`--threads`): 1, then powers of
two, and all usable cores. Each (tool, threads) pair runs in its own process pinned to that many
cores (CPU affinity) with every thread pool of the tool sized to it (OMP_NUM_THREADS,
torch.set_num_threads, TensorFlow's intra/inter-op pools, XLA's pool follows the affinity).

    .venv/bin/python bench/dlbench.py                       # all tools found, ~6 min on 2 cores
    .venv/bin/python bench/dlbench.py --quick               # no torch.compile, 3 steps per cell, ~3 min
    .venv/bin/python bench/dlbench.py --tools torch --workloads resnet56 --batch-size resnet56=128 --reps 10

Writes bench/results/dlbench.json (rows, every step's time, machine, versions, skipped tools) and
paper_figs/out/dlbench.{csv,md,png,pdf}. Do not run it next to other work: on 2 cores a busy
neighbour inflates every time.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import machine_info as machine  # noqa: E402
from dlbench_workloads import WORKLOADS  # noqa: E402

TOOLS = ("torch", "torch_compile", "tensorflow", "jax")
TOOL_LABELS = {"torch": "PyTorch eager", "torch_compile": "torch.compile", "tensorflow": "TensorFlow (Keras 3)",
               "jax": "JAX (Keras 3)"}
KERAS_TOOLS = ("tensorflow", "jax")
TOOLS_VENV = ROOT / ".venv-tools"
RESULTS = ROOT / "bench" / "results" / "dlbench.json"
FIGDIR = ROOT / "paper_figs" / "out"
WORKER_TIMEOUT_S = 1800       # per (tool, threads) process


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


# ----------------------------------------------------------------------------------------------
# worker: one (tool, threads) pair in its own process
# ----------------------------------------------------------------------------------------------
def worker(tool: str, threads: int, jobs: list[tuple[str, int]], warmup: int, reps: int, budget: float,
           out: Path) -> None:
    """Run every (workload, batch) job with `tool`; rewrite `out` after each so a timeout keeps the rest."""
    if tool in KERAS_TOOLS:
        import dlbench_keras as impl
    else:
        import dlbench_torch as impl
    impl.set_threads(tool, threads)
    rows: list[dict] = []
    for key, batch in jobs:
        t0 = time.perf_counter()
        try:
            row = impl.run(tool, WORKLOADS[key], batch, warmup, reps, budget)
        except Exception as err:                           # one failing cell must not lose the others
            row = {"error": f"{type(err).__name__}: {err}"}
        row.update(tool=tool, threads=threads, workload=key, batch=batch)
        rows.append(row)
        done = f"{1e3 * statistics.median(row['times_s']):.1f} ms/step" if "times_s" in row else row["error"]
        print(f"[dlbench] {tool} threads={threads} {key} batch={batch}: {done} "
              f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
        out.write_text(json.dumps({"rows": rows, "versions": impl.versions(tool)}) + "\n")


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


def run_worker(tool: str, threads: int, jobs: list[tuple[str, int]], args: argparse.Namespace) -> dict:
    """One worker process; returns its JSON ({'rows': [...], 'versions': {...}}), possibly partial.
    Its progress lines are passed through; other output is kept for the error message."""
    py = tools_python(args.tools_venv) if tool in KERAS_TOOLS else Path(sys.executable)
    with tempfile.TemporaryDirectory(prefix="dlbench-") as tmp:
        out = Path(tmp) / "rows.json"
        argv = [str(py), str(Path(__file__).resolve()), "--worker", "--tool", tool, "--threads", str(threads),
                "--warmup", str(args.warmup), "--reps", str(args.reps), "--budget", str(args.budget),
                "--out", str(out), "--jobs", *[f"{k}={b}" for k, b in jobs]]
        proc = subprocess.Popen(argv, env=tool_env(tool, threads), preexec_fn=pin_to(threads),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        watchdog = threading.Timer(WORKER_TIMEOUT_S, proc.kill)
        watchdog.start()
        tail: list[str] = []
        for line in proc.stderr:
            if line.startswith("[dlbench]"):
                print(line, end="", file=sys.stderr, flush=True)
            else:
                tail = (tail + [line.rstrip()])[-5:]
        code = proc.wait()
        timed_out = not watchdog.is_alive() and code != 0
        watchdog.cancel()
        result = json.loads(out.read_text()) if out.exists() else {"rows": [], "versions": {}}
    if code != 0:
        why = f"timed out after {WORKER_TIMEOUT_S} s" if timed_out else f"exit status {code}: {' | '.join(tail[-2:])}"
        print(f"[dlbench] {tool} threads={threads}: worker failed: {why}", file=sys.stderr, flush=True)
        result["failed"] = why
    return result


def summarise(row: dict) -> dict:
    """Add median / quartiles / min / max / throughput and the parameter check to a worker row."""
    w = WORKLOADS[row["workload"]]
    row["label"] = w.label
    if "times_s" not in row:
        return row
    t = sorted(row["times_s"])
    q = statistics.quantiles(t, n=4, method="inclusive") if len(t) > 1 else [t[0]] * 3
    row.update(median_s=statistics.median(t), q1_s=q[0], q3_s=q[2], min_s=t[0], max_s=t[-1], reps=len(t),
               samples_per_s=row["batch"] / statistics.median(t), params_expected=w.params,
               params_ok=row["params"] == w.params)
    return row


def measure(args: argparse.Namespace, tools: list[str], threads: list[int], batches: dict[str, int]) -> dict:
    rows, versions, skipped = [], {}, {}
    jobs = list(batches.items())
    for tool in tools:
        why = tool_available(tool, args.tools_venv)
        if why:
            skipped[tool] = why
            print(f"[dlbench] skipping {TOOL_LABELS[tool]}: {why}", file=sys.stderr, flush=True)
            continue
        for n in threads:
            print(f"[dlbench] {TOOL_LABELS[tool]}, {n} thread(s): {', '.join(f'{k}@{b}' for k, b in jobs)}",
                  file=sys.stderr, flush=True)
            result = run_worker(tool, n, jobs, args)
            rows += [summarise(r) for r in result["rows"]]
            versions[tool] = result.get("versions", {})
            if "failed" in result:
                skipped[f"{tool}@{n}"] = result["failed"]
    return {"rows": rows, "versions": versions, "skipped": skipped}


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
    return f"{ms(row['median_s'])} ({ms(row['q1_s'])}-{ms(row['q3_s'])}){flag}"


def markdown(result: dict) -> str:
    """Time per mini-batch in ms, median (quartiles), one row per workload x threads, one column per tool."""
    rows, tools = result["rows"], [t for t in TOOLS if any(r["tool"] == t for r in result["rows"])]
    index = {(r["workload"], r["threads"], r["tool"]): r for r in rows}
    lines = [f"Time per mini-batch (ms; median, quartiles in brackets) on {machine.one_line(result['machine'])}; "
             f"{tool_versions(result.get('versions', {}))}.", "",
             "| workload | batch | threads | " + " | ".join(TOOL_LABELS[t] for t in tools) + " |",
             "|---|---|---|" + "---|" * len(tools)]
    for key in WORKLOADS:
        for n in result["settings"]["threads"]:
            cells = [index.get((key, n, t)) for t in tools]
            if not any(cells):
                continue
            batch = next(c["batch"] for c in cells if c)
            lines.append(f"| {WORKLOADS[key].label} | {batch} | {n} | " + " | ".join(cell(c) for c in cells) + " |")
    most = max(result["settings"]["threads"])
    warm = [r for r in rows if r["tool"] != "torch" and "warmup_s" in r and r["threads"] == most]
    if warm:
        lines += ["", f"Warm-up (tracing / compilation, then `--warmup` steps), s, at {most} thread(s):", "",
                  "| workload | " + " | ".join(TOOL_LABELS[t] for t in tools if t != "torch") + " |",
                  "|---|" + "---|" * len([t for t in tools if t != "torch"])]
        for key in WORKLOADS:
            cells = [index.get((key, max(result["settings"]["threads"]), t)) for t in tools if t != "torch"]
            if any(cells):
                lines.append(f"| {WORKLOADS[key].label} | " + " | ".join(
                    f"{c['warmup_s']:.1f}" if c and "warmup_s" in c else "-" for c in cells) + " |")
    for tool, why in result["skipped"].items():
        lines.append(f"\nSkipped {tool}: {why}")
    return "\n".join(lines) + "\n"


def write_csv(result: dict, path: Path) -> None:
    keys = ["workload", "label", "tool", "threads", "batch", "median_s", "q1_s", "q3_s", "min_s", "max_s", "reps",
            "samples_per_s", "warmup_s", "params", "params_expected", "params_ok", "error"]
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
    ap.add_argument("--reps", type=int, default=10, help="timed steps per cell (default 10)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first (default 1; compiled tools >= 1)")
    ap.add_argument("--budget", type=float, default=3.0, help="seconds of timed steps per cell before cutting reps")
    ap.add_argument("--quick", action="store_true", help="no torch.compile, 3 steps per cell")
    ap.add_argument("--tools-venv", type=Path, default=TOOLS_VENV, help="environment of the Keras tools")
    ap.add_argument("--results", type=Path, default=RESULTS, help="JSON output")
    ap.add_argument("--out-dir", type=Path, default=FIGDIR, help="table and chart directory")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tool", help=argparse.SUPPRESS)
    ap.add_argument("--jobs", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
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
    tools = [t for t in args.tools if not (args.quick and t == "torch_compile")]
    return tools, threads, parse_batches(args.batch_size, args.workloads)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.worker:
        jobs = [(k, int(b)) for k, _, b in (j.rpartition("=") for j in args.jobs)]
        worker(args.tool, int(args.threads[0]), jobs, args.warmup, args.reps, args.budget, args.out)
        return 0
    try:
        if args.quick:
            args.reps = min(args.reps, 3)
        tools, threads, batches = validate(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    info = machine.describe()
    info["cpu_busy_share_at_start"] = machine.warn_if_busy("dlbench")
    result = measure(args, tools, threads, batches)
    result["machine"] = info
    result["settings"] = {"tools": tools, "threads": threads, "batches": batches, "reps": args.reps,
                          "warmup": args.warmup, "budget_s": args.budget, "quick": args.quick,
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
