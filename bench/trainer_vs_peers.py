"""Our trainer against what a user would otherwise write, side by side in one run, as ratios.

Three comparisons, each interleaved (variants alternate inside every repetition, and the ratio is
taken inside the repetition, then the median over repetitions: this machine is noisy):

1. **threads backend vs a plain loop** (`bench/threads_overhead.py`, imported): `Trainer.step` on a
   `ThreadWorld` of P virtual workers against a single-process loop doing the same P micro-batches
   and the same compression work. Goal: trainer / plain <= 1.15.
2. **MPI backend dense vs DistributedDataParallel**: on P = 2 and 4 MPI ranks of this machine (one
   intra-op thread per rank, as `backend=mpi` runs), `Trainer.step` on an `MPIWorld` with the dense
   scheme (flat gradient, one MPI allreduce after the backward pass, one update) against
   `torch.nn.parallel.DistributedDataParallel` on a gloo process group (bucketed allreduce
   overlapped with the backward pass), the same model, initial weights, per-worker batch (32), data
   shards and SGD settings, in the same processes (the gloo group rendezvouses over 127.0.0.1).
   Time per step = the slowest rank's wall time over a block of steps between two barriers / steps.
   Goal: ssgd dense / DDP <= 1.
3. **sparse schemes vs dense** at the same P: the same `Trainer.step` with topk, gtopk, gaussiank,
   randomk (density 0.001, the steady-state value) against dense.

Models: FNN-3 on the embedded MNIST digits and ResNet-20 on synthetic CIFAR-10 (compute-bound).

    .venv/bin/python bench/trainer_vs_peers.py            # ~3 min on 2 cores
    .venv/bin/python bench/trainer_vs_peers.py --quick    # ~1 min
    .venv/bin/python bench/trainer_vs_peers.py --parts mpi --P 2 4 --reps 5

Writes bench/results/trainer_vs_peers.json (every block's times, per-part breakdown of our step,
machine) and bench/results/trainer_vs_peers.md. The driver never initialises MPI: it starts
`mpiexec -n P python -m mpi4py bench/trainer_vs_peers.py --mpi-worker ...` (under a timeout).
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(HERE))
import machine_info as machine  # noqa: E402

RESULTS = ROOT / "bench" / "results"
PARTS = ("threads", "mpi")
SCHEMES = ("dense", "topk", "gtopk", "gaussiank", "randomk")
CASES = {   # model -> (dataset, per-worker batch, steps per timed block; quick steps)
    "fnn3": ("mnist_embedded", 32, 30, 10),
    "resnet20": ("synthetic_cifar10", 32, 4, 2),
}
THREAD_CASES = (("dense", "fnn3", "mnist_embedded"), ("gtopk", "fnn3", "mnist_embedded"),
                ("dense", "resnet20", "synthetic_cifar10"))
MPI_TIMEOUT_S = 900
OVERHEAD_GOAL = 1.15
DDP_GOAL = 1.0


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


# ----------------------------------------------------------------------------------------------
# MPI worker: every rank runs all variants, interleaved
# ----------------------------------------------------------------------------------------------
def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose("config", overrides)


class Ours:
    """`Trainer.step` of the package on this rank's `MPIWorld`, cycling through the epoch's batches."""

    def __init__(self, cfg, run_dir: Path) -> None:
        from ssgd import build
        from ssgd.mpi_world import MPIWorld

        self.trainer, self.writer, _ = build.trainer(cfg, run_dir, MPIWorld())
        self.density = float(cfg.compressor.density)
        self.loader = self.trainer.loader
        self.epoch, self.it = 0, 0
        self.loader.set_epoch(0)
        self.parts: dict[str, float] = {}
        self.steps = 0

    def step(self) -> None:
        if self.it == self.loader.steps_per_epoch:
            self.epoch, self.it = self.epoch + 1, 0
            self.loader.set_epoch(self.epoch)
        m = self.trainer.step(self.it, self.density)
        self.it += 1
        for key in ("time/compute_s", "time/compress_s", "time/comm_s", "time/update_s", "time/step_s"):
            self.parts[key] = self.parts.get(key, 0.0) + m[key]
        self.steps += 1

    def close(self) -> None:
        self.writer.close()


class DDP:
    """What a PyTorch user writes: DistributedDataParallel on gloo, the same model, data and SGD."""

    def __init__(self, cfg, rank: int, P: int) -> None:
        import torch
        from ssgd import build
        from ssgd.data.loader import ShardedLoader

        data = build.dataset(cfg)
        model = build.model(cfg, data, cfg.seed)                 # same initial weights as our trainer
        self.ddp = torch.nn.parallel.DistributedDataParallel(model)
        self.opt = build.optimizer_factory(cfg)(list(model.parameters()))
        self.loader = ShardedLoader(data.x_train, data.y_train, P, cfg.trainer.batch_size, cfg.seed)
        self.rank, self.epoch, self.it = rank, 0, 0
        self.loader.set_epoch(0)

    def step(self) -> None:
        from ssgd.replica import loss_and_correct

        if self.it == self.loader.steps_per_epoch:
            self.epoch, self.it = self.epoch + 1, 0
            self.loader.set_epoch(self.epoch)
        x, y = self.loader.batch(self.it, self.rank)
        self.it += 1
        self.ddp.train()
        self.opt.zero_grad(set_to_none=True)
        loss, _ = loss_and_correct(self.ddp(x), y)
        loss.backward()
        self.opt.step()
        loss.item()

    def close(self) -> None:
        pass


def mpi_worker(out: Path, port: int, models: list[str], schemes: list[str], reps: int, quick: bool) -> None:
    """Every rank builds every variant, then times blocks of steps, variants in rotating order."""
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, P = comm.Get_rank(), comm.Get_size()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=P)
    rows = []
    with tempfile.TemporaryDirectory(prefix=f"ssgd-peers-{rank}-") as tmp:
        for model in models:
            dataset, batch, steps, quick_steps = CASES[model]
            steps = quick_steps if quick else steps
            base = [f"model={model}", f"dataset={dataset}", f"trainer.batch_size={batch}", "backend=mpi",
                    f"cluster.world_size={P}", "wandb.mode=disabled", "trainer.progress=false"]
            runners: dict = {f"ssgd_{c}": Ours(compose(base + [f"compressor={c}"]), Path(tmp) / c) for c in schemes}
            runners["ddp"] = DDP(compose(base + ["compressor=dense"]), rank, P)
            names = list(runners)
            times: dict[str, list[float]] = {n: [] for n in names}
            for rep in range(reps + 1):                        # repetition 0 warms up every variant
                shift = rep % len(names)
                for name in names[shift:] + names[:shift]:
                    comm.Barrier()
                    t0 = time.perf_counter()
                    for _ in range(steps):
                        runners[name].step()
                    comm.Barrier()
                    per_step = comm.allreduce((time.perf_counter() - t0) / steps, op=MPI.MAX)
                    if rep:
                        times[name].append(per_step)
                if rank == 0:
                    print(f"[peers] P={P} {model} rep {rep}/{reps}: " + ", ".join(
                        f"{n} {1e3 * times[n][-1]:.1f} ms" for n in names if times[n]), file=sys.stderr, flush=True)
            parts = {n: {k: v / r.steps for k, v in r.parts.items()} for n, r in runners.items() if isinstance(r, Ours)}
            parts = comm.gather(parts, root=0)
            for r in runners.values():
                r.close()
            if rank == 0:
                rows.append({"P": P, "model": model, "dataset": dataset, "batch_per_worker": batch,
                             "steps_per_block": steps, "times_s": times,
                             "ssgd_parts_by_rank": parts})
    dist.destroy_process_group()
    if rank == 0:
        out.write_text(json.dumps({"rows": rows, "torch": torch.__version__,
                                   "mpi_library": MPI.Get_library_version().strip("\x00 \n").splitlines()[0]}) + "\n")


# ----------------------------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def median_ratio(a: list[float], b: list[float]) -> float:
    """Median over repetitions of a[i] / b[i] (the two were measured in the same repetition)."""
    return statistics.median(x / y for x, y in zip(a, b))


def run_mpi(P: int, args: argparse.Namespace) -> list[dict]:
    from ssgd.launch import mpiexec_path, worker_env

    with tempfile.TemporaryDirectory(prefix="ssgd-peers-") as tmp:
        out = Path(tmp) / "rows.json"
        argv = [mpiexec_path(), "-n", str(P), sys.executable, "-m", "mpi4py", str(Path(__file__).resolve()),
                "--mpi-worker", "--out", str(out), "--port", str(free_port()), "--models", *args.models,
                "--schemes", *args.schemes, "--reps", str(args.reps)] + (["--quick"] if args.quick else [])
        print(f"[peers] mpiexec -n {P}: {', '.join(args.models)} x ({', '.join(args.schemes)}, ddp)",
              file=sys.stderr, flush=True)
        try:
            proc = subprocess.run(argv, env=worker_env(local=True), timeout=MPI_TIMEOUT_S, cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=None, text=True)
        except subprocess.TimeoutExpired:
            print(f"[peers] P={P}: timed out after {MPI_TIMEOUT_S} s", file=sys.stderr)
            return []
        if proc.returncode != 0 or not out.exists():
            print(f"[peers] P={P}: the MPI job failed (exit status {proc.returncode})", file=sys.stderr)
            return []
        job = json.loads(out.read_text())
    rows = job["rows"]
    for row in rows:
        t = row["times_s"]
        row["mpi_library"] = job["mpi_library"]
        row["median_ms"] = {n: 1e3 * statistics.median(v) for n, v in t.items()}
        row["ssgd_dense_over_ddp"] = median_ratio(t["ssgd_dense"], t["ddp"]) if "ssgd_dense" in t else None
        row["scheme_over_dense"] = {n: median_ratio(v, t["ssgd_dense"]) for n, v in t.items()
                                    if n.startswith("ssgd_") and n != "ssgd_dense" and "ssgd_dense" in t}
        row["ssgd_parts_ms_rank0"] = {n: {k.removeprefix("time/").removesuffix("_s"): 1e3 * v for k, v in p.items()}
                                      for n, p in row["ssgd_parts_by_rank"][0].items()}
    return rows


def run_threads(args: argparse.Namespace) -> list[dict]:
    import threads_overhead

    reps, fnn_steps = (3, 5) if args.quick else (args.reps, 10)
    rows = []
    for compressor, model, dataset in THREAD_CASES:
        if model not in args.models:
            continue
        for P in args.P:
            steps = fnn_steps if model == "fnn3" else 2
            print(f"[peers] threads: {model} {compressor} P={P} ...", file=sys.stderr, flush=True)
            rows.append(threads_overhead.measure(compressor, model, dataset, P, reps, steps))
    return rows


def threads_table(rows: list[dict]) -> list[str]:
    """Markdown rows of `threads_overhead.measure` results."""
    out = ["| model | scheme | P | plain loop ms/step | trainer ms/step | trainer / plain |",
           "|---|---|---|---|---|---|"]
    return out + [f"| {r['model']} | {r['compressor']} | {r['P']} | {r['plain_ms']:.1f} | {r['trainer_ms']:.1f} "
                  f"| {r['ratio']:.2f} |" for r in rows]


def markdown(result: dict) -> str:
    lines = [f"Measured on {machine.one_line(result['machine'])}.", ""]
    if result["threads"]:
        lines += ["Threads backend vs a plain single-process loop (same P micro-batches and compression; "
                  f"goal <= {OVERHEAD_GOAL:.2f}):", "", *threads_table(result["threads"]), ""]
    mpi = result["mpi"]
    if mpi:
        lines += ["MPI backend, dense, vs DistributedDataParallel (gloo), 1 thread per rank "
                  f"(goal <= {DDP_GOAL:.2f}):", "",
                  "| model | P | DDP ms/step | ssgd dense ms/step | ssgd dense / DDP "
                  "| ssgd parts ms: compute / comm / update |", "|---|---|---|---|---|---|"]
        for r in mpi:
            p = r["ssgd_parts_ms_rank0"].get("ssgd_dense", {})
            ms = r["median_ms"]
            lines.append(f"| {r['model']} | {r['P']} | {ms['ddp']:.1f} | {ms['ssgd_dense']:.1f} | "
                         f"{r['ssgd_dense_over_ddp']:.2f} | {p.get('compute', 0):.1f} / {p.get('comm', 0):.1f} / "
                         f"{p.get('update', 0):.1f} |")
        schemes = [n for n in mpi[0]["scheme_over_dense"]]
        if schemes:
            lines += ["", "Sparse schemes vs dense, same trainer, same P (step time ratio; density 0.001):", "",
                      "| model | P | dense ms/step | " + " | ".join(s.removeprefix("ssgd_") for s in schemes) + " |",
                      "|---|---|---|" + "---|" * len(schemes)]
            for r in mpi:
                lines.append(f"| {r['model']} | {r['P']} | {r['median_ms']['ssgd_dense']:.1f} | " + " | ".join(
                    f"{r['scheme_over_dense'][s]:.2f} ({r['median_ms'][s]:.1f} ms)" for s in schemes) + " |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", nargs="+", default=list(PARTS), help=f"of {', '.join(PARTS)}")
    ap.add_argument("--P", nargs="+", type=int, default=[2, 4], help="worker counts (default 2 4)")
    ap.add_argument("--models", nargs="+", default=list(CASES), help=f"of {', '.join(CASES)}")
    ap.add_argument("--schemes", nargs="+", default=list(SCHEMES), help=f"of {', '.join(SCHEMES)} (dense always runs)")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions after one warm-up (default 5)")
    ap.add_argument("--quick", action="store_true", help="3 repetitions, shorter blocks")
    ap.add_argument("--out", type=Path, help="JSON output (default bench/results/trainer_vs_peers.json)")
    ap.add_argument("--mpi-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def validate(args: argparse.Namespace) -> None:
    for flag, values, allowed in (("--parts", args.parts, PARTS), ("--models", args.models, CASES),
                                  ("--schemes", args.schemes, SCHEMES)):
        bad = [v for v in values if v not in allowed]
        if bad:
            raise UsageError(f"{flag} {bad[0]}: not one of {', '.join(allowed)}")
    if any(P < 1 for P in args.P) or args.reps < 1:
        raise UsageError("--P values and --reps must be >= 1")
    if "dense" not in args.schemes:
        args.schemes = ["dense", *args.schemes]


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.mpi_worker:
        mpi_worker(args.out, args.port, args.models, args.schemes, args.reps, args.quick)
        return 0
    try:
        validate(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.quick:
        args.reps = min(args.reps, 3)
    start = time.perf_counter()
    info = machine.describe()
    info["cpu_busy_share_at_start"] = machine.warn_if_busy("peers")
    result = {"machine": info, "settings": {"P": args.P, "models": args.models, "schemes": args.schemes,
                                                          "reps": args.reps, "quick": args.quick}}
    result["threads"] = run_threads(args) if "threads" in args.parts else []
    result["mpi"] = [row for P in args.P for row in run_mpi(P, args)] if "mpi" in args.parts else []
    result["settings"]["wall_s"] = time.perf_counter() - start
    out = args.out or RESULTS / "trainer_vs_peers.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    table = markdown(result)
    out.with_suffix(".md").write_text(table)
    print(table)
    print(f"[peers] {result['settings']['wall_s']:.0f} s; wrote {out.name} and {out.with_suffix('.md').name}",
          file=sys.stderr)
    failed = "mpi" in args.parts and len(result["mpi"]) < len(args.P) * len(args.models)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
