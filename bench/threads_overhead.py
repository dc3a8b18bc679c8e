"""Overhead of the in-process (threads) backend against a plain single-process loop.

Both variants do the same work per step: P micro-batches of forward + backward, the same
per-rank compensation and compression, one aggregation and one SGD step. The plain loop is what a
user would write by hand (one model, default intra-op threads, no collectives, no metrics); the
trainer is `ssgd.trainer.Trainer.step` on a `ThreadWorld`. Variants are interleaved and the ratio
is taken inside each repetition (this machine is noisy), then the median over repetitions.

    .venv/bin/python bench/threads_overhead.py               # ~3 min on 2 cores
    .venv/bin/python bench/threads_overhead.py --quick       # ~30 s
Writes bench/results/threads_overhead.json and prints a markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from ssgd import build  # noqa: E402
from ssgd.compress.sparse import k_of, select_topk, sum_sparse  # noqa: E402
from ssgd.data.loader import ShardedLoader  # noqa: E402


def config(compressor: str, model: str, dataset: str, P: int, threads: int | None):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("config", [f"compressor={compressor}", f"model={model}", f"dataset={dataset}",
                                  f"cluster.world_size={P}", "wandb.mode=disabled", "trainer.progress=false",
                                  f"threads={'null' if threads is None else threads}"])


class PlainLoop:
    """The hand-written reference: P micro-batches one after another in the main thread."""

    def __init__(self, cfg, sparse: bool):
        data = build.dataset(cfg)
        self.model = build.model(cfg, data, cfg.seed)
        self.params = list(self.model.parameters())
        self.opt = torch.optim.SGD(self.params, lr=0.01, momentum=0.9, weight_decay=1e-4)
        self.P, self.sparse = cfg.cluster.world_size, sparse
        self.loader = ShardedLoader(data.x_train, data.y_train, self.P, cfg.trainer.batch_size, cfg.seed)
        self.loader.set_epoch(0)
        d = sum(p.numel() for p in self.params)
        self.residuals = [torch.zeros(d) for _ in range(self.P)]
        self.k = k_of(d, cfg.compressor.density)

    def step(self, it: int) -> None:
        parts = []
        for r in range(self.P):
            x, y = self.loader.batch(it, r)
            out = self.model(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
            g = torch.cat([t.reshape(-1) for t in torch.autograd.grad(loss, self.params)])
            if self.sparse:                      # error feedback + exact top-k, as the schemes do
                u = self.residuals[r].add_(g)
                s = select_topk(u, self.k)
                u.index_fill_(0, s.idx, 0.0)
                parts.append(s)
            else:
                parts.append(g)
        if self.sparse:
            total = sum_sparse(parts)
            avg = total.to_dense(scale=self.P)
        else:
            avg = parts[0].clone()
            for g in parts[1:]:
                avg.add_(g)
            avg.div_(self.P)
        for p, g in zip(self.params, avg.split([p.numel() for p in self.params])):
            p.grad = g.view_as(p)
        self.opt.step()


def time_steps(step, steps: int) -> float:
    t = time.perf_counter()
    for i in range(steps):
        step(i)
    return (time.perf_counter() - t) / steps


def measure(compressor: str, model: str, dataset: str, P: int, reps: int, steps: int) -> dict:
    cores = torch.get_num_threads()
    cfg = config(compressor, model, dataset, P, None)
    trainer, writer, world = build.trainer(cfg, Path(tempfile.mkdtemp(prefix="ssgd-bench-")))
    plain = PlainLoop(cfg, sparse=compressor != "dense")
    steps = min(steps, trainer.loader.steps_per_epoch)
    trainer.loader.set_epoch(0)
    density = cfg.compressor.density

    def plain_step(i: int) -> None:
        plain.step(i)

    def trainer_step(i: int) -> None:
        trainer.step(i, density)

    # the plain loop runs with the default intra-op threads, the trainer's main thread with 1
    # (set once per timed block: changing it every step costs more than an FNN step)
    nthreads = {"plain_step": cores, "trainer_step": 1}
    ratios, t_plain, t_trainer = [], [], []
    for rep in range(reps + 1):              # repetition 0 is a warm-up
        order = [(plain_step, t_plain), (trainer_step, t_trainer)][:: 1 if rep % 2 == 0 else -1]
        times = {}
        for fn, sink in order:
            torch.set_num_threads(nthreads[fn.__name__])
            times[fn.__name__] = time_steps(fn, steps)
            if rep:
                sink.append(times[fn.__name__])
        if not rep:
            continue
        ratios.append(times["trainer_step"] / times["plain_step"])
    world.close()
    writer.close()
    torch.set_num_threads(cores)
    return {"compressor": compressor, "model": model, "P": P, "threads": world.K,
            "plain_ms": 1e3 * statistics.median(t_plain), "trainer_ms": 1e3 * statistics.median(t_trainer),
            "ratio": statistics.median(ratios)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer cases and repetitions")
    args = ap.parse_args()
    cases = [("dense", "fnn3", "mnist_embedded"), ("gtopk", "fnn3", "mnist_embedded"),
             ("dense", "resnet20", "synthetic_cifar10")]
    Ps = [4, 8] if args.quick else [4, 8, 32]
    reps, steps = (3, 5) if args.quick else (5, 10)
    rows = []
    for compressor, model, dataset in cases:
        for P in Ps:
            if model == "resnet20" and P > 8 and args.quick:
                continue
            n = steps if model == "fnn3" else 2
            rows.append(measure(compressor, model, dataset, P, reps, n))
            r = rows[-1]
            print(f"| {r['model']} | {r['compressor']} | {r['P']} | {r['threads']} | {r['plain_ms']:.1f} | "
                  f"{r['trainer_ms']:.1f} | {r['ratio']:.2f} |", flush=True)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    meta = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "torch": torch.__version__}
    (out / "threads_overhead.json").write_text(json.dumps({"machine": meta, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    print("| model | scheme | P | pool threads | plain loop ms/step | trainer ms/step | ratio |")
    print("|---|---|---|---|---|---|---|")
    main()
