"""Convergence of Top-k with error feedback inside FSDP2 beside the same scheme inside DDP, P = 2 gloo on CPU.

    python bench/fsdp_convergence.py          # make fsdp-convergence: the whole grid (18 min, 2 cores at load 6-17)
    python bench/fsdp_convergence.py --models fnn3 --densities 0.01 --seeds 1 --fnn3-epochs 1   # one quick cell

For every model (FNN-3, SmallCNN), density (0.01, 0.001) and seed (1, 2, 3) two runs, one after the other on
the same two ranks, with the same initial weights, the same batches and the same optimizer:
  * fsdp: every Linear / Conv2d and the whole model `fully_shard`-ed, each given
    `ssgd.fsdp.compress_reduce_scatter(module, "topk", density)`: k = density x n per module, sent to the owners
    of the shards (layer-wise Top-k);
  * ddp: `DistributedDataParallel` (its default buckets: one for FNN-3; two for SmallCNN, its convolutions and its
    classifier) with `ssgd.ddp.register(model, "topk", density)`: k = density x the bucket's size, AllGather.
`--fsdp-units model` shards the model as one unit instead (one reduce-scatter, one selection over all of d);
`--fsdp-units layers-global` keeps the units per layer and gives their Top-k one shared budget
(`ssgd.compress.budget.GlobalBudget`: each layer's k is its share of the previous step's global top-k).
Both keep a residual per rank (error feedback) and average over the P ranks.

Data: the 5,000 embedded MNIST digits (`ssgd.data.embedded.mnist_embedded`, 4,000 train / 1,000 validation,
split seed 0, the same for every run), each rank drawing its batches from its own half. The seed sets the
initial weights and the batch order. The optimizer: SGD, lr with a linear warm-up from lr / P over the first
epoch, momentum 0.9, weight decay 1e-4.

Rank 0 appends one CSV row per run to --out (default bench/results/fsdp_convergence.csv, git-ignored; written
afresh), and the driver prints the summary table (val acc mean [min, max] over seeds) and writes it beside the
CSV as .md. Every run's wall time comes with the 1-minute load average at its start and end.
"""
from __future__ import annotations

import argparse
import csv
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import harness  # noqa: E402

FIELDS = ["model", "d", "system", "fsdp_units", "density", "seed", "epochs", "steps", "val_acc", "train_loss",
          "bytes_rank0", "wall_s", "load_start", "load_end"]
MODELS = ("fnn3", "cnn")
SYSTEMS = ("fsdp", "ddp")
P = 2


def load1() -> float:
    """The 1-minute load average (0.0 where /proc/loadavg is missing)."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def build(model: str, spec: Any, seed: int) -> Any:
    """FNN-3 or SmallCNN with the initial weights of `seed` (the same on every rank)."""
    import torch

    from ssgd.models import FNN3, SmallCNN

    torch.manual_seed(seed)
    return FNN3(spec) if model == "fnn3" else SmallCNN(spec)


def wrap(net: Any, system: str, density: float, seed: int, units: str = "layers") -> tuple[Any, list[Any]]:
    """(the model to train, the objects whose counters give the bytes sent) for `system`; fsdp's `units`: every
    Linear / Conv2d and the model ("layers"; "layers-global": their k from one shared budget), or the model alone
    ("model": one reduce-scatter, one selection)."""
    import torch
    from torch import nn
    from torch.distributed.fsdp import fully_shard

    import ssgd.ddp
    import ssgd.fsdp
    from ssgd.compress.budget import GlobalBudget

    if system == "ddp":
        model = nn.parallel.DistributedDataParallel(net)
        return model, [ssgd.ddp.register(model, "topk", density, seed=seed)]
    comms = []
    leaves = [m for m in net.modules() if isinstance(m, (nn.Linear, nn.Conv2d))] if units != "model" else []
    budget = GlobalBudget(density) if units == "layers-global" else None
    for module in leaves + [net]:
        fully_shard(module)
        comms.append(ssgd.fsdp.compress_reduce_scatter(module, "topk", density, budget=budget))
    torch.distributed.barrier()
    return net, comms


def sent_bytes(system: str, counters: list[Any]) -> int:
    """Bytes this rank sent in its compressed collectives."""
    if system == "ddp":
        return sum(h.stats.bytes_sent for h in counters)
    return sum(c.log.stats.bytes for c in counters)


def batches(n_train: int, rank: int, batch: int, seed: int, epochs: int) -> list[Any]:
    """This rank's index batches for `epochs` epochs: its half of the training set, reshuffled every epoch."""
    import torch

    shard = torch.arange(rank, n_train, P)
    gen = torch.Generator().manual_seed(1000 * seed + rank)
    per_epoch = len(shard) // batch
    out = []
    for _ in range(epochs):
        perm = shard[torch.randperm(len(shard), generator=gen)]
        out += [perm[i * batch:(i + 1) * batch] for i in range(per_epoch)]
    return out


def warmup(per_epoch: int) -> Any:
    """The LR factor of step s: linear from 1 / P at step 0 to 1 at step `per_epoch`, then 1."""
    return lambda s: min(1.0, (1 + s * (P - 1) / per_epoch) / P)


def train(model: Any, data: Any, picks: list[Any], per_epoch: int, args: argparse.Namespace) -> float:
    """SGD over `picks`; returns the mean training loss of the last epoch on this rank."""
    import torch
    import torch.nn.functional as F

    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    warm = torch.optim.lr_scheduler.LambdaLR(opt, warmup(per_epoch))
    losses = []
    for pick in picks:
        loss = F.cross_entropy(model(data.x_train[pick]), data.y_train[pick])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        warm.step()
        losses.append(loss.item())
    return statistics.fmean(losses[-per_epoch:])


def accuracy(model: Any, data: Any) -> float:
    """Validation accuracy of `model` on all 1,000 validation digits (every rank computes it)."""
    import torch

    with torch.no_grad():
        return (model(data.x_val).argmax(1) == data.y_val).float().mean().item()


def run_one(cell: dict[str, Any], data: Any, args: argparse.Namespace, rank: int) -> dict[str, Any]:
    """Train one (model, system, density, seed) cell; returns its CSV row (rank 0's numbers)."""
    import torch.distributed as dist

    from ssgd.models import count_parameters

    dist.barrier()
    t0, load_start = time.perf_counter(), load1()
    net = build(cell["model"], data.spec, cell["seed"])
    d = count_parameters(net)
    model, counters = wrap(net, cell["system"], cell["density"], cell["seed"], args.fsdp_units)
    per_epoch = (len(data.y_train) // P) // args.batch
    picks = batches(len(data.y_train), rank, args.batch, cell["seed"], cell["epochs"])
    loss = train(model, data, picks, per_epoch, args)
    acc = accuracy(model, data)
    if cell["system"] == "ddp":
        counters[0].close()
    dist.barrier()
    units = args.fsdp_units if cell["system"] == "fsdp" else ""
    return {**cell, "d": d, "fsdp_units": units, "steps": len(picks), "val_acc": round(acc, 4),
            "train_loss": round(loss, 4), "bytes_rank0": sent_bytes(cell["system"], counters),
            "wall_s": round(time.perf_counter() - t0, 2), "load_start": load_start, "load_end": load1()}


def cells(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The grid in run order: fsdp and ddp of one (model, density, seed) run back to back."""
    epochs = {"fnn3": args.fnn3_epochs, "cnn": args.cnn_epochs}
    return [{"model": m, "system": s, "density": rho, "seed": seed, "epochs": epochs[m]}
            for m in args.models for rho in args.densities for seed in args.seeds for s in SYSTEMS]


def worker(args: argparse.Namespace) -> int:
    """One rank: every cell of the grid; rank 0 appends each row to args.out as soon as it is done."""
    import torch
    import torch.distributed as dist

    from ssgd.data.embedded import mnist_embedded

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank, world_size=P)
    data = mnist_embedded(val_size=1000, seed=0)
    for cell in cells(args):
        row = run_one(cell, data, args, args.rank)
        if args.rank == 0:
            with open(args.out, "a", newline="") as f:
                csv.DictWriter(f, FIELDS).writerow(row)
            print(", ".join(f"{k} {row[k]}" for k in FIELDS), flush=True)
    dist.destroy_process_group()
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args: argparse.Namespace, argv: list[str]) -> str:
    """Start the P ranks and wait for them; returns "ok" or what went wrong (one line)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    common = [sys.executable, str(Path(__file__).resolve()), *argv, "--worker", "--port", str(free_port())]
    procs = [subprocess.Popen([*common, "--rank", str(r)], env=env) for r in range(P)]
    return harness.wait_ranks(procs, args.timeout, time.perf_counter(), " (--timeout)")


def spread(values: list[float]) -> str:
    """'mean [min, max]' with 3 decimals."""
    return f"{statistics.fmean(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def summary(rows: list[dict[str, str]]) -> str:
    """The markdown table: one line per (model, density, system), over its seeds."""
    head = ["| model (d) | density | system | seeds | epochs (steps) | final val acc, mean [min, max] "
            "| final-epoch train loss | bytes rank 0 sent per step | wall s per run, mean [min, max] | load 1-min |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str, str], list[dict[str, str]]] = {}
    for r in rows:
        system = r["system"] + {"model": ", one unit", "layers-global": ", global k"}.get(r.get("fsdp_units") or "", "")
        groups.setdefault((r["model"], r["density"], system), []).append(r)
    lines = []
    for (model, rho, system), rs in groups.items():
        col = lambda k: [float(r[k]) for r in rs]   # noqa: E731
        steps = int(rs[0]["steps"])
        per_step = statistics.fmean(col("bytes_rank0")) / steps
        loads = col("load_start") + col("load_end")
        wall = col("wall_s")
        lines.append(f"| {model} ({int(rs[0]['d']):,}) | {rho} | {system} | {len(rs)} | {rs[0]['epochs']} ({steps}) "
                     f"| {spread(col('val_acc'))} | {statistics.fmean(col('train_loss')):.4f} | {per_step:,.0f} "
                     f"| {statistics.fmean(wall):.1f} [{min(wall):.1f}, {max(wall):.1f}] "
                     f"| {min(loads):.1f}-{max(loads):.1f} |")
    return "\n".join(head + lines) + "\n"


def driver(args: argparse.Namespace, argv: list[str]) -> int:
    """Write the CSV header, run the ranks, print and save the summary."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        csv.DictWriter(f, FIELDS).writeheader()
    t0, load_start = time.perf_counter(), load1()
    status = launch(args, argv + ["--out", str(args.out)])
    with open(args.out, newline="") as f:
        rows = list(csv.DictReader(f))
    text = summary(rows) if rows else "no run finished\n"
    text += (f"\n{len(rows)} of {len(cells(args))} runs, {time.perf_counter() - t0:.0f} s in all, 1-minute load "
             f"{load_start:.1f} at the start and {load1():.1f} at the end; CSV: {args.out}\n")
    args.out.with_suffix(".md").write_text(text)
    print(text, end="")
    if status != "ok":
        print(f"fsdp_convergence: {status}", file=sys.stderr)
        return 1
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--densities", nargs="+", type=float, default=[0.01, 0.001])
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--fnn3-epochs", type=int, default=12, help="epochs of 62 steps per FNN-3 run (default 12)")
    ap.add_argument("--cnn-epochs", type=int, default=10, help="epochs of 62 steps per SmallCNN run (default 10)")
    ap.add_argument("--fsdp-units", default="layers", choices=["layers", "layers-global", "model"],
                    help="fsdp: fully_shard every Linear / Conv2d and the model (default; layers-global: their k "
                         "from one shared budget), or the model alone")
    ap.add_argument("--batch", type=int, default=32, help="samples per rank per step (default 32)")
    ap.add_argument("--lr", type=float, default=0.05, help="learning rate after the warm-up (default 0.05)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fsdp_convergence.csv")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds for the whole grid (default 3600)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    bad = [f"--densities {r}" for r in args.densities if not 0 < r <= 1]
    bad += [f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
            if k in ("fnn3_epochs", "cnn_epochs", "batch") and v < 1]
    if bad or args.lr <= 0:
        ap.error(f"{(bad or ['--lr ' + str(args.lr)])[0]}: must be positive (densities in (0, 1])")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    return worker(args) if args.worker else driver(args, [a for a in argv])


if __name__ == "__main__":
    sys.exit(main())
