"""`make bench-testbed-e2e`: the papers' claim in one table, measured: real training over the testbed's links.

FNN-3 on the embedded MNIST digits (the lab's default run), one MPI rank per testbed host (docs/testbed.md),
dense vs Top-k vs gTop-k (Shi et al., ICDCS 2019, arXiv:1901.04359: gTop-k S-SGD against dense and Top-k
S-SGD) and gTop-k's successors Ok-Topk and TopkDSA (docs/zoo.md), several seeds, real compute. Per run, from its metrics.jsonl and summary.json:

  * steps and training seconds to the validation accuracy target (the sum over logged intervals of
    steps x the interval's mean measured step time; start-up and evaluation excluded);
  * the share of the step spent communicating (time/comm_s / time/step_s, measured), bytes sent per step;
  * the final validation accuracy.

Printed as a table of median [min-max] over seeds per (P, scheme), written to
<out-dir>/testbed_e2e_<BW>.csv (one row per run) and .json.

    make testbed-up P=4 && make bench-testbed-e2e            # P = 4, 5 schemes x 3 seeds x 620 steps
    PYTHONPATH=src python bench/testbed_e2e.py --P 4 8 --seeds 1 2 3 --steps 620 --target 0.9
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import testbed_comm as testbed  # noqa: E402

SCHEMES = ("dense", "topk", "gtopk", "oktopk", "topkdsa")   # TopkA = topk; Ok-Topk exact every call (tau = 1)


def run_one(run_dir: Path, P: int, scheme: str, seed: int, steps: int, timeout: float,
            extra: list[str] | None = None) -> str:
    """One training run on P testbed hosts (`extra`: more overrides); returns 'ok' or what went wrong."""
    argv = [sys.executable, str(ROOT / "src" / "train.py"), "backend=mpi", "cluster=testbed",
            f"cluster.world_size={P}", f"compressor={scheme}", f"seed={seed}", f"trainer.max_steps={steps}",
            "trainer.eval_every=1", "trainer.progress=false", "wandb.mode=disabled", f"hydra.run.dir={run_dir}", *(extra or [])]
    try:
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "WANDB_SILENT": "true"})
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s"
    return "ok" if proc.returncode == 0 else f"exit status {proc.returncode}: {proc.stderr.strip()[-300:]}"


def time_to_target(records: list[dict[str, Any]], target: float) -> tuple[int | None, float | None]:
    """(step, training seconds) at the first evaluation with val/acc >= target; (None, None) if never."""
    seconds, last_step = 0.0, 0
    for r in records:
        if "time/step_s" in r:
            seconds += (r["step"] - last_step) * r["time/step_s"]
            last_step = r["step"]
        if r.get("val/acc", -1.0) >= target:
            return r["step"], seconds + 0.0
    return None, None


def read_run(run_dir: Path, target: float) -> dict[str, Any]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    summary = json.loads((run_dir / "summary.json").read_text())
    step, seconds = time_to_target(records, target)
    return {"steps_to_target": step, "seconds_to_target": seconds, "final_val_acc": summary.get("val/acc"),
            "comm_share": summary["time/comm_s"] / summary["time/step_s"], "step_ms": 1e3 * summary["time/step_s"],
            "bytes_per_step": summary["comm/bytes_sent"], "wall_s": summary.get("wall_s")}


def cell(values: list[float | None], fmt: str) -> str:
    have = [v for v in values if v is not None]
    if not have:
        return "not reached"
    miss = len(values) - len(have)
    text = f"{format(statistics.median(have), fmt)} [{format(min(have), fmt)}-{format(max(have), fmt)}]"
    return text + (f" ({miss} of {len(values)} not reached)" if miss else "")


def table(rows: list[dict[str, Any]], target: float) -> list[str]:
    out = [f"| P | scheme | seconds to val acc {target} | steps to it | ms per step | comm share of the step "
           "| bytes sent per step | final val acc |", "|---|---|---|---|---|---|---|---|"]
    for P in sorted({r["P"] for r in rows}):
        for scheme in SCHEMES:
            mine = [r for r in rows if r["P"] == P and r["scheme"] == scheme and r["status"] == "ok"]
            if not mine:
                continue
            out.append(f"| {P} | {scheme} | {cell([r['seconds_to_target'] for r in mine], '.1f')} "
                       f"| {cell([r['steps_to_target'] for r in mine], '.0f')} | {cell([r['step_ms'] for r in mine], '.1f')} "
                       f"| {cell([100 * r['comm_share'] for r in mine], '.0f')} % "
                       f"| {cell([r['bytes_per_step'] for r in mine], ',.0f')} "
                       f"| {cell([r['final_val_acc'] for r in mine], '.3f')} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--P", type=int, nargs="+", help="hosts per run (default 4, or the testbed's P if smaller)")
    ap.add_argument("--schemes", nargs="+", choices=SCHEMES, default=list(SCHEMES))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--steps", type=int, default=620, help="trainer.max_steps per run (default 620: 20 epochs at P=4)")
    ap.add_argument("--target", type=float, default=0.90, help="validation accuracy target (default 0.90)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per run before it is stopped")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    env = testbed.testbed_env()
    hosts, bw = int(env["SSGD_TESTBED_P"]), env["SSGD_TESTBED_BW"]
    Ps = args.P or [min(4, hosts)]
    problem = testbed.check_hosts(Ps, hosts)
    if problem is None and args.steps < 1:
        problem = f"--steps {args.steps}: must be >= 1"
    if problem is None and not 0 < args.target <= 1:
        problem = f"--target {args.target}: must be in (0, 1]"
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    start, rows = time.perf_counter(), []
    plan = [(P, seed, scheme) for P in Ps for seed in args.seeds for scheme in args.schemes]   # schemes interleaved
    with tempfile.TemporaryDirectory(prefix="ssgd-testbed-e2e-") as tmp:
        for i, (P, seed, scheme) in enumerate(plan, 1):
            run_dir = Path(tmp) / f"P{P}-{scheme}-s{seed}"
            t0 = time.perf_counter()
            status = run_one(run_dir, P, scheme, seed, args.steps, args.timeout)
            row: dict[str, Any] = {"bw": bw, "P": P, "scheme": scheme, "seed": seed, "steps": args.steps,
                                   "target": args.target, "status": status}
            if status == "ok":
                row.update(read_run(run_dir, args.target))
            rows.append(row)
            print(f"[e2e] {i}/{len(plan)} P={P} {scheme} seed {seed}: {status}, {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr, flush=True)
    print("\n".join(table(rows, args.target)))
    fields = sorted({k for r in rows for k in r}, key=lambda k: (k not in ("bw", "P", "scheme", "seed"), k))
    testbed.write_results(args.out_dir / f"testbed_e2e_{bw}", rows, fields, {"testbed": {"hosts": hosts, "bw": bw}},
                          start)
    return 1 if any(r["status"] != "ok" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
