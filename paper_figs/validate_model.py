"""Validate the iteration-time model against real local runs: predicted vs measured, side by side.

    python paper_figs/validate_model.py [--backend thread|mpi|both] [--model resnet20 --dataset synthetic_cifar10]
                                        [--P 2] [--thread-P 4] [--threads K] [--steps 20] [--thread-steps 10]

1. Profiles the model here (`ssgd.tools.measure`, one intra-op thread, as one worker).
2. For every scheme (a conf/compressor name; density warm-up off, `cluster=local`), runs `src/train.py`
   * ``backend=mpi`` with P ranks (P <= cores, so each rank has a core, as each worker has its own
     machine in the model): predicted by `ssgd.perf.iteration.iteration_time`;
   * ``backend=thread`` with P virtual workers on K pool threads: predicted by
     `ssgd.perf.iteration.threads_step_time` (ceil(P/K) workers per thread, then the in-process
     collective, then one update).
   Both predictions use the same profile and the `local` alpha-beta constants; the scheme is built
   from its conf/compressor YAML (`ssgd.tools.scheme_costs`) with the run's achieved entries per rank
   (density/achieved x d: Gaussian-k's count is not trimmed to k).
3. Prints, per backend and scheme, predicted next to measured part by part and writes
   paper_figs/out/validation_<model>.csv. Measured values are means over the steps after the first
   (a warm-up), read from the run's metrics.jsonl. Parts:
     compute   forward + backward (threads: of the ceil(P/K) workers one pool thread runs; measured:
               ceil(P/K) x the mean per-worker time, each worker timed inside its thread)
     compress  selection, likewise (measured: the trainer's time/compress_s, which also counts the
               residual update done in the update phase)
     phase     threads only: the measured wall time of the whole compute phase (step - comm - update),
               predicted compute + compress
     comm      wall time of the collective call
     update    residual updates, averaging and the optimizer step (predicted: the optimizer step)
     iteration the whole step
   The last column is the CPU (in cores) that other processes used during the run, from /proc/stat:
   the model assumes idle cores, so a run with other load there is not a fair test.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from ssgd.run import build  # noqa: E402
from ssgd.perf.alphabeta import AlphaBeta  # noqa: E402
from ssgd.compress.sparse import k_of  # noqa: E402
from ssgd.perf.iteration import IterationTime, Profile, iteration_time, threads_step_time  # noqa: E402
from ssgd.tools import scheme_costs as conf_schemes  # noqa: E402
from ssgd.tools.measure import measure_profile  # noqa: E402
from ssgd.worlds.base import usable_cores  # noqa: E402

BACKENDS = ("thread", "mpi")
PARTS = ("compute", "compress", "phase", "comm", "update", "iteration")


def train_argv(backend: str, P: int, scheme: str, steps: int, args: argparse.Namespace, out: Path) -> list[str]:
    """`src/train.py` command of one measured run (one metrics.jsonl record per step)."""
    argv = [sys.executable, str(ROOT / "src" / "train.py"), f"backend={backend}", "cluster=local",
            f"cluster.world_size={P}", f"compressor={scheme}", "compressor.density_warmup=[]",
            f"model={args.model}", f"dataset={args.dataset}",
            f"trainer.batch_size={args.batch}", f"trainer.max_steps={steps}", "trainer.log_every=1",
            "trainer.progress=false", "wandb.mode=disabled", f"hydra.run.dir={out}"]
    if backend == "thread":
        argv.append(f"threads={args.threads}")
    return argv


def cpu_seconds() -> tuple[float, float] | None:
    """(busy CPU seconds of the whole machine since boot, CPU seconds of this process's finished
    children), or None where /proc/stat is missing (not Linux)."""
    try:
        import resource

        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (ImportError, OSError, ValueError):
        return None
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy = (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")      # all but idle and iowait
    return busy, usage.ru_utime + usage.ru_stime


def run(backend: str, P: int, scheme: str, steps: int, args: argparse.Namespace, out: Path) -> dict[str, float]:
    """Run one training job; mean of every time/ and density/ metric over steps 2..steps, plus
    "others_cores": the CPU cores other processes kept busy meanwhile (NaN where unknown), because a
    timing taken while someone else computes on the same cores is not this model's to predict."""
    before, start = cpu_seconds(), time.perf_counter()
    proc = subprocess.run(train_argv(backend, P, scheme, steps, args, out), capture_output=True, text=True,
                          timeout=900, env={**os.environ, "WANDB_SILENT": "true"})
    after, wall = cpu_seconds(), time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"error: the {backend} {scheme} run failed:\n{proc.stderr[-2000:]}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps_logged = [r for r in records if "time/step_s" in r][1:]          # step 1 is a warm-up
    if not steps_logged:
        raise SystemExit(f"error: the {backend} {scheme} run logged fewer than 2 steps (--steps >= 2)")
    keys = [k for k in steps_logged[0] if k.startswith(("time/", "density/"))]
    means = {k: sum(r[k] for r in steps_logged) / len(steps_logged) for k in keys}
    others = math.nan if before is None or after is None else \
        max((after[0] - before[0]) - (after[1] - before[1]), 0.0) / wall
    return {**means, "others_cores": others}


def predict(profile: Profile, backend: str, scheme: str, P: int, K: int, net: AlphaBeta,
            measured: dict[str, float]) -> IterationTime:
    """The model of the step as `backend` runs it: the scheme of conf/compressor/<scheme>.yaml at its
    density, each rank sending the run's mean achieved count (count factor = achieved count / k)."""
    density = float(conf_schemes.load_config(scheme).density)
    k = k_of(profile.d, density)
    factor = measured.get("density/achieved", k / profile.d) * profile.d / k
    model = conf_schemes.scheme(scheme, profile.d, density, count_factor=factor)
    if backend == "thread":
        return threads_step_time(profile, model, P, K, net)
    return iteration_time(profile, model, net, P)


def parts(pred: IterationTime, m: dict[str, float], n: int, backend: str) -> dict[str, tuple[float, float]]:
    """{part: (predicted s, measured s)}; n = workers per pool thread (1 under MPI)."""
    compute = pred.io_s + pred.h2d_s + pred.forward_s + pred.backward_s
    out = {"compute": (compute, n * m["time/compute_s"]), "compress": (pred.compress_s, n * m["time/compress_s"])}
    if backend == "thread":
        out["phase"] = (compute + pred.compress_s, m["time/step_s"] - m["time/comm_s"] - m["time/update_s"])
    out.update({"comm": (pred.comm_s, m["time/comm_s"]), "update": (pred.update_s, m["time/update_s"]),
                "iteration": (pred.total_s, m["time/step_s"])})
    return out


def profile_here(args: argparse.Namespace) -> tuple[Profile, AlphaBeta]:
    """The model's profile measured in this process (one intra-op thread) and the `local` network."""
    torch.set_num_threads(1)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", [f"model={args.model}", f"dataset={args.dataset}", f"trainer.batch_size={args.batch}",
                                 "cluster=local"])
    data = build.dataset(cfg)
    model = build.model(cfg, data, cfg.seed)
    profile = measure_profile(model, data.x_train[:args.batch], data.y_train[:args.batch], args.model)
    return profile, build.network(cfg)


def write_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=(*BACKENDS, "both"), default="both")
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--dataset", default="synthetic_cifar10")
    ap.add_argument("--P", type=int, default=2, help="MPI ranks (<= cores)")
    ap.add_argument("--thread-P", type=int, default=4, help="virtual workers of the threads backend")
    ap.add_argument("--threads", type=int, default=None, help="pool threads K (default: usable cores)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20, help="steps per MPI run (the first is not counted)")
    ap.add_argument("--thread-steps", type=int, default=10, help="steps per threads run (the first is not counted)")
    ap.add_argument("--schemes", nargs="+", default=["dense", "topk", "gtopk", "gaussiank"],
                    help=f"conf/compressor names, of: {', '.join(conf_schemes.names())}")
    ap.add_argument("--out", default=str(ROOT / "paper_figs" / "out"))
    args = ap.parse_args(argv)
    args.threads = args.threads or usable_cores()
    unknown = [s for s in args.schemes if s not in conf_schemes.names()]
    if unknown:
        ap.error(f"--schemes {' '.join(unknown)}: no such conf/compressor/*.yaml; allowed: {', '.join(conf_schemes.names())}")
    for key in ("P", "thread_P", "threads", "batch"):
        if getattr(args, key) < 1:
            ap.error(f"--{key.replace('_', '-')}={getattr(args, key)}: must be >= 1")
    for key in ("steps", "thread_steps"):
        if getattr(args, key) < 2:
            ap.error(f"--{key.replace('_', '-')}={getattr(args, key)}: must be >= 2 (step 1 is not counted)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    t0 = time.perf_counter()
    profile, net = profile_here(args)
    backends = BACKENDS if args.backend == "both" else (args.backend,)
    print(f"{args.model}, batch {args.batch}, densities of conf/compressor; profile here: forward "
          f"{profile.t_f * 1e3:.1f} ms, backward {profile.t_b * 1e3:.1f} ms, top-k {profile.select_s * 1e3:.2f} ms, "
          f"update {profile.update_s * 1e3:.2f} ms; network: local (alpha {net.alpha:g} s, beta {net.beta:g} s/B)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends:
            P, K = (args.thread_P, min(args.threads, args.thread_P)) if backend == "thread" else (args.P, 1)
            steps = args.thread_steps if backend == "thread" else args.steps
            n = math.ceil(P / K) if backend == "thread" else 1
            where = f"{P} workers on {K} pool threads" if backend == "thread" else f"{P} MPI ranks"
            print(f"\nbackend={backend}: {where}, {steps} steps (first not counted)")
            print("| scheme | part | predicted ms | measured ms | measured / predicted | other processes (cores) |")
            print("|---|---|---|---|---|---|")
            for scheme in args.schemes:
                measured = run(backend, P, scheme, steps, args, Path(tmp) / f"{backend}-{scheme}")
                pred = predict(profile, backend, scheme, P, K, net, measured)
                for part, (p, m) in parts(pred, measured, n, backend).items():
                    rows.append({"backend": backend, "P": P, "K": K, "scheme": scheme, "part": part,
                                 "predicted_s": p, "measured_s": m, "others_cores": measured["others_cores"]})
                    ratio = f"{m / p:.2f}" if p > 0 else "-"
                    print(f"| {scheme} | {part} | {p * 1e3:.2f} | {m * 1e3:.2f} | {ratio} | "
                          f"{measured['others_cores']:.2f} |", flush=True)
    write_csv(Path(args.out) / f"validation_{args.model}.csv", rows)
    print(f"\nwrote {Path(args.out) / f'validation_{args.model}.csv'} in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
