"""Our trainer against what a user would otherwise write, side by side in one run, as ratios.

Three comparisons, each interleaved in rounds by bench/harness.py (every variant once per round, in
turn; the ratio is taken inside each round, then the median [min-max] over rounds). During each round
the CPU used by processes outside this benchmark (driver, mpiexec, ranks) is measured; a round above
--noise-threshold cores (default 0.2) is repeated (<= --retries, default 2; --quick 1) and a case
still above it is marked "noisy" in every table. Rounds: --reps (default 5; --quick 3), after one
warm-up round.

1. **threads backend vs a plain loop** (`bench/threads_overhead.py`, imported): `Trainer.step` on a
   `ThreadWorld` of P virtual workers against a single-process loop doing the same P micro-batches
   and the same compression work. Goal: trainer / plain <= 1.15.
2. **MPI backend dense vs DistributedDataParallel**: on P = 2 and 4 MPI ranks of this machine (one
   intra-op thread per rank, as `backend=mpi` runs), `Trainer.step` on an `MPIWorld` with the dense
   scheme (flat gradient, one MPI allreduce after the backward pass, one update) against
   `torch.nn.parallel.DistributedDataParallel` on a gloo process group (bucketed allreduce
   overlapped with the backward pass), the same model, initial weights, per-worker batch (32), data
   shards and SGD settings, in the same processes (the gloo group rendezvouses over 127.0.0.1).
   Time per step = the slowest rank's wall time over a block of steps between two barriers / steps
   (blocks repeated inside a round until it lasts >= 0.3 s).
   Goal: ssgd dense / DDP <= 1.
3. **sparse schemes vs dense** at the same P: the same `Trainer.step` with topk, gtopk, gaussiank,
   randomk (density 0.001, the steady-state value) against dense.
4. **backend=torch** (`--parts torch`): (a) in the same MPI jobs and rounds as part 2, `Trainer.step` on a
   `TorchWorld` (the dense scheme's collective through torch.distributed on the gloo group DDP uses) against
   DDP. Goal: ssgd torch dense / DDP <= 1. (b) one gTop-k call (`GTopKAllreduce`, density 0.001 of a random
   d-vector, Top-k selected once beforehand) through `ssgd.comm.executors.torch_dist` against the same call through
   `ssgd.comm.executors.mpi`, on P = --comm-P (default 2 4 8) ranks of this machine, d = --comm-d (default 1M, 25M);
   time per call = the slowest rank's wall time over a block of calls between two barriers / calls. Both
   executors run the same program; the ratio is the cost of the transport and of each executor's per-op work.

Models: FNN-3 on the embedded MNIST digits and ResNet-20 on synthetic CIFAR-10 (compute-bound).

    .venv/bin/python bench/trainer_vs_peers.py
    .venv/bin/python bench/trainer_vs_peers.py --quick
    .venv/bin/python bench/trainer_vs_peers.py --quick --P 2 --models fnn3 --schemes dense topk
    .venv/bin/python bench/trainer_vs_peers.py --parts mpi --P 2 4 --reps 5
    .venv/bin/python bench/trainer_vs_peers.py --parts mpi torch --models fnn3 --schemes dense --quick   # torch only

Writes <--out-dir>/trainer_vs_peers.json (every round's times and noise, per-part breakdown of our
step, machine) and <--out-dir>/trainer_vs_peers.md (default bench/results). The driver never initialises MPI: it starts
`mpiexec -n P python -m mpi4py bench/trainer_vs_peers.py --mpi-worker ...` (under a timeout).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(HERE))
import harness  # noqa: E402
import machine_info as machine  # noqa: E402
from threads_report import threads_table  # noqa: E402

RESULTS = ROOT / "bench" / "results"
PARTS = ("threads", "mpi", "torch")
COMM_P = (2, 4, 8)
COMM_D = (1_000_000, 25_000_000)
COMM_DENSITY = 0.001
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
    """`Trainer.step` of the package on this rank's `MPIWorld` (or the given world, e.g. a `TorchWorld`),
    cycling through the epoch's batches."""

    def __init__(self, cfg, run_dir: Path, world=None) -> None:
        from ssgd.run import build
        from ssgd.worlds.mpi import MPIWorld

        self.trainer, self.writer, _ = build.trainer(cfg, run_dir, world or MPIWorld())
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
        from ssgd.run import build
        from ssgd.data.loader import ShardedLoader

        data = build.dataset(cfg)
        model = build.model(cfg, data, cfg.seed)                 # same initial weights as our trainer
        self.ddp = torch.nn.parallel.DistributedDataParallel(model)
        self.opt = build.optimizer_factory(cfg)(list(model.parameters()))
        self.loader = ShardedLoader(data.x_train, data.y_train, P, cfg.trainer.batch_size, cfg.seed)
        self.rank, self.epoch, self.it = rank, 0, 0
        self.loader.set_epoch(0)

    def step(self) -> None:
        from ssgd.loop.replica import loss_and_correct

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


def join(args: argparse.Namespace) -> tuple:
    """This MPI rank, joined to a gloo group over the same ranks: (comm, rank, P, share, meter, noise)."""
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, P = comm.Get_rank(), comm.Get_size()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=P)
    return (comm, rank, P, harness.MPIShare(comm), harness.mpi_meter(comm, args.tree_root),
            harness.noise_from_args(args, quick=args.quick))


def mpi_worker(args: argparse.Namespace) -> None:
    """Every rank builds every variant, then runs interleaved rounds of blocks of steps (bench/harness.py)."""
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    comm, rank, P, share, meter, noise = join(args)
    rows = []
    with tempfile.TemporaryDirectory(prefix=f"ssgd-peers-{rank}-") as tmp:
        for model in args.models:
            dataset, batch, steps, quick_steps = CASES[model]
            steps = quick_steps if args.quick else steps
            base = [f"model={model}", f"dataset={dataset}", f"trainer.batch_size={batch}", "backend=mpi",
                    f"cluster.world_size={P}", "wandb.mode=disabled", "trainer.progress=false"]
            runners: dict = {f"ssgd_{c}": Ours(compose(base + [f"compressor={c}"]), Path(tmp) / c)
                             for c in args.schemes}
            if args.torch:                      # backend=torch's trainer on the gloo group DDP uses
                from ssgd.worlds.torch_dist import TorchWorld

                runners["ssgd_torch_dense"] = Ours(compose(base + ["compressor=dense"]), Path(tmp) / "torch_dense",
                                                   TorchWorld.joined())
            runners["ddp"] = DDP(compose(base + ["compressor=dense"]), rank, P)

            def block(runner):
                def run() -> float:
                    comm.Barrier()
                    t0 = time.perf_counter()
                    for _ in range(steps):
                        runner.step()
                    comm.Barrier()
                    return (time.perf_counter() - t0) / steps
                return run

            def progress(r: harness.Round) -> None:
                if rank == 0:
                    print(f"[peers] P={P} {model} round {r.index + 1}/{args.reps}: " + ", ".join(
                        f"{n} {1e3 * t:.1f} ms" for n, t in r.times.items()) + f"; other CPU "
                        + ("unmeasured" if r.other_cores is None else f"{r.other_cores:.2f} cores")
                        + (" NOISY" if r.noisy else ""), file=sys.stderr, flush=True)

            series = harness.interleaved([(n, block(r)) for n, r in runners.items()], args.reps,
                                         threshold=noise.threshold, retries=noise.retries, warmup=1,
                                         min_round_s=noise.min_round_s, meter=meter, share=share, on_round=progress)
            parts = {n: {k: v / r.steps for k, v in r.parts.items()} for n, r in runners.items() if isinstance(r, Ours)}
            parts = comm.gather(parts, root=0)
            for r in runners.values():
                r.close()
            if rank == 0:
                rows.append({"P": P, "model": model, "dataset": dataset, "batch_per_worker": batch,
                             "steps_per_block": steps, "series": series.to_json(), "ssgd_parts_by_rank": parts})
    dist.barrier()                  # leave gloo together (an early teardown can abort a peer)
    dist.destroy_process_group()
    if rank == 0:
        Path(args.out).write_text(json.dumps({"rows": rows, "torch": torch.__version__, "mpi_library":
                                              MPI.Get_library_version().strip("\x00 \n").splitlines()[0]}) + "\n")


def comm_worker(args: argparse.Namespace) -> None:
    """Every rank times one gTop-k call through torch.distributed (gloo) and through MPI, interleaved."""
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    from ssgd.comm.collectives.gtopk import GTopKAllreduce
    from ssgd.comm.executors.mpi import run_mpi
    from ssgd.comm.executors.torch_dist import TorchExecutor, run_torch
    from ssgd.compress.topk import TopK

    comm, rank, P, share, meter, noise = join(args)
    collective, executor, rows = GTopKAllreduce(), TorchExecutor(), []
    for d in args.comm_d:
        u = torch.randn(int(d), generator=torch.Generator().manual_seed(1000 + rank))
        payload = TopK().compress(u, COMM_DENSITY)
        del u
        calls = 5 if args.quick else 20

        def block(call):
            def run() -> float:
                comm.Barrier()
                t0 = time.perf_counter()
                for _ in range(calls):
                    call()
                comm.Barrier()
                return (time.perf_counter() - t0) / calls
            return run

        def progress(r: harness.Round) -> None:
            if rank == 0:
                print(f"[peers] gtopk call P={P} d={int(d):,} round {r.index + 1}/{args.reps}: " + ", ".join(
                    f"{n} {1e3 * t:.2f} ms" for n, t in r.times.items()) + (" NOISY" if r.noisy else ""),
                    file=sys.stderr, flush=True)

        series = harness.interleaved(
            [("mpi", block(lambda: run_mpi(collective, payload, comm))),
             ("torch", block(lambda: run_torch(collective, payload, executor=executor)))], args.reps,
            threshold=noise.threshold, retries=noise.retries, warmup=1, min_round_s=noise.min_round_s, meter=meter,
            share=share, on_round=progress)
        if rank == 0:
            rows.append({"P": P, "d": int(d), "k": len(payload), "calls_per_block": calls,
                         "series": series.to_json()})
    dist.barrier()                  # leave gloo together (an early teardown can abort a peer)
    dist.destroy_process_group()
    if rank == 0:
        Path(args.out).write_text(json.dumps({"rows": rows}) + "\n")


# ----------------------------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mpi_job(P: int, args: argparse.Namespace, role: list[str], what: str) -> dict | None:
    """Run this file under `mpiexec -n P` with `role` (the worker flag and its arguments) and the common noise
    and round settings; the JSON rank 0 wrote, or None (said on stderr) when the job failed or timed out."""
    from ssgd.run.launch_mpi import mpiexec_path, worker_env

    with tempfile.TemporaryDirectory(prefix="ssgd-peers-") as tmp:
        out = Path(tmp) / "rows.json"
        argv = [mpiexec_path(), "-n", str(P), sys.executable, "-m", "mpi4py", str(Path(__file__).resolve()),
                *role, "--out", str(out), "--port", str(free_port()), "--reps", str(args.reps),
                "--tree-root", str(os.getpid()), "--noise-threshold", repr(args.noise_threshold),
                "--retries", str(args.retries), "--min-round-s", repr(args.min_round_s)] \
            + (["--quick"] if args.quick else [])
        print(f"[peers] mpiexec -n {P}: {what}", file=sys.stderr, flush=True)
        try:
            proc = subprocess.run(argv, env=worker_env(local=True), timeout=MPI_TIMEOUT_S, cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=None, text=True)
        except subprocess.TimeoutExpired:
            print(f"[peers] P={P}: timed out after {MPI_TIMEOUT_S} s", file=sys.stderr)
            return None
        if proc.returncode != 0 or not out.exists():
            print(f"[peers] P={P}: the MPI job failed (exit status {proc.returncode})", file=sys.stderr)
            return None
        return json.loads(out.read_text())


def run_mpi(P: int, args: argparse.Namespace) -> list[dict]:
    torch_part = "torch" in args.parts
    job = mpi_job(P, args, ["--mpi-worker", "--models", *args.models, "--schemes", *args.schemes]
                  + (["--torch"] if torch_part else []),
                  f"{', '.join(args.models)} x ({', '.join(args.schemes)}{', ssgd_torch_dense' if torch_part else ''}, ddp)")
    if job is None:
        return []
    rows = job["rows"]
    for row in rows:
        s = harness.Series.from_json(row["series"])
        row["mpi_library"] = job["mpi_library"]
        row["noisy"] = s.noisy
        row["median_ms"] = {n: 1e3 * s.median(n) for n in s.names}
        row["ssgd_dense_over_ddp"] = s.ratio("ssgd_dense", "ddp").to_json() if "ssgd_dense" in s.names else None
        row["ssgd_torch_dense_over_ddp"] = (s.ratio("ssgd_torch_dense", "ddp").to_json()
                                            if "ssgd_torch_dense" in s.names else None)
        row["scheme_over_dense"] = {n: s.ratio(n, "ssgd_dense").to_json() for n in s.names
                                    if n.startswith("ssgd_") and n not in ("ssgd_dense", "ssgd_torch_dense")
                                    and "ssgd_dense" in s.names}
        row["ssgd_parts_ms_rank0"] = {n: {k.removeprefix("time/").removesuffix("_s"): 1e3 * v for k, v in p.items()}
                                      for n, p in row["ssgd_parts_by_rank"][0].items()}
    return rows


def run_comm(P: int, args: argparse.Namespace) -> list[dict]:
    """gTop-k call over torch.distributed vs over MPI on P ranks (`comm_worker` under mpiexec)."""
    job = mpi_job(P, args, ["--comm-worker", "--comm-d", *[str(int(d)) for d in args.comm_d]],
                  "gTop-k call, torch.distributed vs MPI, d = " + ", ".join(f"{int(d):,}" for d in args.comm_d))
    if job is None:
        return []
    rows = job["rows"]
    for row in rows:
        s = harness.Series.from_json(row["series"])
        row["noisy"] = s.noisy
        row["median_ms"] = {n: 1e3 * s.median(n) for n in s.names}
        row["torch_over_mpi"] = s.ratio("torch", "mpi").to_json()
    return rows


def run_threads(args: argparse.Namespace) -> list[dict]:
    import threads_overhead

    noise = harness.noise_from_args(args, quick=args.quick)
    reps, fnn_steps = args.reps, (5 if args.quick else 10)        # --quick has already capped reps at 3
    rows = []
    for compressor, model, dataset in THREAD_CASES:
        if model not in args.models:
            continue
        for P in args.P:
            steps = fnn_steps if model == "fnn3" else 2
            print(f"[peers] threads: {model} {compressor} P={P} ...", file=sys.stderr, flush=True)
            rows.append(threads_overhead.measure(compressor, model, dataset, P, reps, steps, noise))
    return rows


def markdown(result: dict) -> str:
    """The report of a trainer_vs_peers.json: one section per part that has results."""
    lines = [f"Measured on {machine.one_line(result['machine'])}.", ""]
    settings = result.get("settings", {})
    lines += [harness.describe_method(settings.get("noise_threshold_cores", harness.DEFAULT_THRESHOLD_CORES),
                                      settings.get("retries", harness.DEFAULT_RETRIES)), ""]
    if result["threads"]:
        lines += ["Threads backend vs a plain single-process loop (same P micro-batches and compression; "
                  f"goal <= {OVERHEAD_GOAL:.2f}; {harness.settings_line(result['threads'][0]['series'])}):", "",
                  *threads_table(result["threads"]), ""]
    mpi = result["mpi"]
    if mpi:
        lines += mpi_section(mpi) + sparse_section(mpi)
    torch_rows = [r for r in mpi if r.get("ssgd_torch_dense_over_ddp")]
    if torch_rows:
        lines += torch_section(torch_rows)
    comm = result.get("comm", [])
    if comm:
        lines += comm_section(comm)
    return "\n".join(lines) + "\n"


def mpi_section(mpi: list[dict]) -> list[str]:
    """MPI backend, dense, vs DDP: one row per (model, P)."""
    lines = ["MPI backend, dense, vs DistributedDataParallel (gloo), 1 thread per rank "
             f"(goal <= {DDP_GOAL:.2f}; {harness.settings_line(mpi[0]['series'])}):", "",
             "| model | P | DDP ms/step | ssgd dense ms/step | ssgd dense / DDP, median [min-max] "
             f"| ssgd parts ms: compute / comm / update | {harness.NOISE_COLUMN} |",
             "|---|---|---|---|---|---|---|"]
    for r in mpi:
        p = r["ssgd_parts_ms_rank0"].get("ssgd_dense", {})
        ms, noisy = r["median_ms"], r["noisy"]
        lines.append(f"| {r['model']} | {r['P']} | {harness.time_cell(ms['ddp'] / 1e3, noisy)} "
                     f"| {harness.time_cell(ms['ssgd_dense'] / 1e3, noisy)} "
                     f"| {harness.ratio_cell(r['ssgd_dense_over_ddp'], noisy, digits=2)} "
                     f"| {p.get('compute', 0):.1f} / {p.get('comm', 0):.1f} / {p.get('update', 0):.1f}"
                     f"{harness.mark(noisy)} | {harness.noise_cell(r['series'])} |")
    return lines


def sparse_section(mpi: list[dict]) -> list[str]:
    """The sparse schemes' step time over dense's, same trainer and P (empty without sparse schemes)."""
    schemes = [n for n in mpi[0]["scheme_over_dense"]]
    if not schemes:
        return []
    lines = ["", "Sparse schemes vs dense, same trainer, same P (step time ratio per round, median "
             "[min-max]; ms in brackets; density 0.001):", "",
             "| model | P | dense ms/step | " + " | ".join(s.removeprefix("ssgd_") for s in schemes)
             + f" | {harness.NOISE_COLUMN} |", "|---|---|---|" + "---|" * (len(schemes) + 1)]
    for r in mpi:
        noisy = r["noisy"]
        dense = harness.time_cell(r["median_ms"]["ssgd_dense"] / 1e3, noisy)
        lines.append(f"| {r['model']} | {r['P']} | {dense} | "
                     + " | ".join(f"{harness.ratio_cell(r['scheme_over_dense'][s], noisy, digits=2)} "
                                  f"({r['median_ms'][s]:.1f} ms)" for s in schemes)
                     + f" | {harness.noise_cell(r['series'])} |")
    return lines


def torch_section(torch_rows: list[dict]) -> list[str]:
    """backend=torch, dense, vs DDP on the same gloo group."""
    lines = ["", "backend=torch, dense, vs DistributedDataParallel on the same gloo group, 1 thread per rank "
             f"(goal <= {DDP_GOAL:.2f}; same rounds as the MPI table):", "",
             f"| model | P | DDP ms/step | ssgd torch dense ms/step | ssgd torch dense / DDP, median [min-max] "
             f"| ssgd MPI dense / DDP | {harness.NOISE_COLUMN} |", "|---|---|---|---|---|---|---|"]
    for r in torch_rows:
        ms, noisy = r["median_ms"], r["noisy"]
        lines.append(f"| {r['model']} | {r['P']} | {harness.time_cell(ms['ddp'] / 1e3, noisy)} "
                     f"| {harness.time_cell(ms['ssgd_torch_dense'] / 1e3, noisy)} "
                     f"| {harness.ratio_cell(r['ssgd_torch_dense_over_ddp'], noisy, digits=2)} "
                     f"| {harness.ratio_cell(r['ssgd_dense_over_ddp'], noisy, digits=2)} "
                     f"| {harness.noise_cell(r['series'])} |")
    return lines


def comm_section(comm: list[dict]) -> list[str]:
    """One gTop-k call, torch.distributed vs MPI."""
    lines = ["", f"One gTop-k call (density {COMM_DENSITY}), torch.distributed (gloo) vs MPI, same program, "
             f"ranks of this machine ({harness.settings_line(comm[0]['series'])}):", "",
             f"| P | d | k | MPI ms/call | torch ms/call | torch / MPI, median [min-max] | {harness.NOISE_COLUMN} |",
             "|---|---|---|---|---|---|---|"]
    for r in comm:
        ms, noisy = r["median_ms"], r["noisy"]
        lines.append(f"| {r['P']} | {r['d']:,} | {r['k']:,} | {harness.time_cell(ms['mpi'] / 1e3, noisy)} "
                     f"| {harness.time_cell(ms['torch'] / 1e3, noisy)} "
                     f"| {harness.ratio_cell(r['torch_over_mpi'], noisy, digits=2)} "
                     f"| {harness.noise_cell(r['series'])} |")
    return lines


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", nargs="+", default=list(PARTS), help=f"of {', '.join(PARTS)}")
    ap.add_argument("--P", nargs="+", type=int, default=[2, 4], help="worker counts (default 2 4)")
    ap.add_argument("--models", nargs="+", default=list(CASES), help=f"of {', '.join(CASES)}")
    ap.add_argument("--schemes", nargs="+", default=list(SCHEMES), help=f"of {', '.join(SCHEMES)} (dense always runs)")
    ap.add_argument("--reps", type=int, default=5, help="interleaved rounds after one warm-up round (default 5)")
    ap.add_argument("--quick", action="store_true", help="3 rounds, shorter blocks, 1 retry")
    harness.add_noise_arguments(ap)
    ap.add_argument("--out-dir", type=Path, default=RESULTS, help="results folder (default bench/results)")
    ap.add_argument("--out", type=Path, help="JSON output (default <out-dir>/trainer_vs_peers.json)")
    ap.add_argument("--comm-P", nargs="+", type=int, default=list(COMM_P),
                    help="--parts torch: ranks of the gTop-k call comparison (default 2 4 8)")
    ap.add_argument("--comm-d", nargs="+", type=float, default=list(COMM_D),
                    help="--parts torch: vector sizes of the gTop-k call comparison (default 1e6 2.5e7)")
    ap.add_argument("--mpi-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--comm-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--torch", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--tree-root", type=int, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def validate(args: argparse.Namespace) -> None:
    for flag, values, allowed in (("--parts", args.parts, PARTS), ("--models", args.models, CASES),
                                  ("--schemes", args.schemes, SCHEMES)):
        bad = [v for v in values if v not in allowed]
        if bad:
            raise UsageError(f"{flag} {bad[0]}: not one of {', '.join(allowed)}")
    if any(P < 1 for P in args.P) or args.reps < 1:
        raise UsageError("--P values and --reps must be >= 1")
    if any(P < 1 for P in args.comm_P) or any(d < 1 for d in args.comm_d):
        raise UsageError("--comm-P and --comm-d values must be >= 1")
    if (problem := harness.noise_problem(args)) is not None:
        raise UsageError(problem)
    if "dense" not in args.schemes:
        args.schemes = ["dense", *args.schemes]


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.mpi_worker:
        mpi_worker(args)
        return 0
    if args.comm_worker:
        comm_worker(args)
        return 0
    try:
        validate(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.quick:
        args.reps = min(args.reps, 3)
    args.retries = harness.noise_from_args(args, quick=args.quick).retries
    start = time.perf_counter()
    info = machine.describe()
    result = {"machine": info, "settings": {"P": args.P, "models": args.models, "schemes": args.schemes,
                                            "reps": args.reps, "quick": args.quick, "retries": args.retries,
                                            "noise_threshold_cores": args.noise_threshold,
                                            "comm_P": args.comm_P, "comm_d": [int(d) for d in args.comm_d],
                                            "min_round_s": args.min_round_s}}
    result["threads"] = run_threads(args) if "threads" in args.parts else []
    result["mpi"] = [row for P in args.P for row in run_mpi(P, args)] if {"mpi", "torch"} & set(args.parts) else []
    result["comm"] = [row for P in args.comm_P for row in run_comm(P, args)] if "torch" in args.parts else []
    result["settings"]["wall_s"] = time.perf_counter() - start
    out = args.out or args.out_dir / "trainer_vs_peers.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    table = markdown(result)
    out.with_suffix(".md").write_text(table)
    print(table)
    print(f"[peers] {result['settings']['wall_s']:.0f} s; wrote {out.name} and {out.with_suffix('.md').name}",
          file=sys.stderr)
    failed = ({"mpi", "torch"} & set(args.parts) and len(result["mpi"]) < len(args.P) * len(args.models)) \
        or ("torch" in args.parts and len(result["comm"]) < len(args.comm_P) * len(args.comm_d))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
