"""Overhead of the in-process (threads) backend against a plain single-process loop.

Both variants do the same work per step: P micro-batches of forward + backward, the same
per-rank compensation and compression, one aggregation and one SGD step. The plain loop is what a
user would write by hand (one model, default intra-op threads, no collectives, no metrics); the
trainer is `ssgd.loop.trainer.Trainer.step` on a `ThreadWorld`. The two are interleaved in rounds by
bench/harness.py (plain block, trainer block, plain block, ...; one warm-up round; a block is `steps`
steps, repeated inside a round until it lasts >= 0.3 s); the ratio trainer / plain is taken inside
each round, reported as the median [min-max] over rounds (5 rounds; --quick 3). During each round
the CPU used by other processes is measured; a round above --noise-threshold cores (default 0.2:
the plain loop uses every core) is repeated (<= --retries, default 2; --quick 1) and a case still
above it is marked "noisy".

    .venv/bin/python bench/threads_overhead.py
    .venv/bin/python bench/threads_overhead.py --quick       # P = 4, 8; 3 rounds
    .venv/bin/python bench/threads_overhead.py --quick --models fnn3
Writes <--out-dir>/threads_overhead.json (default bench/results) and prints a markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))
import harness  # noqa: E402
from threads_report import threads_table  # noqa: E402
from ssgd.run import build  # noqa: E402
from ssgd.compress.sparse import k_of, select_topk, sum_sparse  # noqa: E402
from ssgd.data.loader import ShardedLoader  # noqa: E402


CASES = (("dense", "fnn3", "mnist_embedded"), ("gtopk", "fnn3", "mnist_embedded"),
         ("dense", "resnet20", "synthetic_cifar10"))
MODELS = ("fnn3", "resnet20")


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


def measure(compressor: str, model: str, dataset: str, P: int, reps: int, steps: int,
            noise: harness.Noise | None = None) -> dict:
    """Interleaved rounds of `steps` plain-loop steps and `steps` trainer steps; returns the row:
    medians over rounds (ms per step), the per-round ratio trainer / plain (median, min, max) and the
    harness series (noise)."""
    noise = noise or harness.Noise()
    cores = torch.get_num_threads()
    cfg = config(compressor, model, dataset, P, None)
    trainer, writer, world = build.trainer(cfg, Path(tempfile.mkdtemp(prefix="ssgd-bench-")))
    plain = PlainLoop(cfg, sparse=compressor != "dense")
    steps = min(steps, trainer.loader.steps_per_epoch)
    trainer.loader.set_epoch(0)
    density = cfg.compressor.density

    # the plain loop runs with the default intra-op threads, the trainer's main thread with 1
    # (set once per timed block: changing it every step costs more than an FNN step)
    def block(step, threads: int):
        def run() -> float:
            torch.set_num_threads(threads)
            return time_steps(step, steps)
        return run

    series = harness.interleaved([("plain", block(plain.step, cores)),
                                  ("trainer", block(lambda i: trainer.step(i, density), 1))],
                                 reps, threshold=noise.threshold, retries=noise.retries, warmup=1,
                                 min_round_s=noise.min_round_s)
    world.close()
    writer.close()
    torch.set_num_threads(cores)
    ratio = series.ratio("trainer", "plain")
    return {"compressor": compressor, "model": model, "P": P, "threads": world.K, "steps_per_block": steps,
            "plain_ms": 1e3 * series.median("plain"), "trainer_ms": 1e3 * series.median("trainer"),
            "ratio": ratio.median, "ratio_spread": ratio.to_json(), "noisy": series.noisy,
            "series": series.to_json()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="P = 4, 8 only, 3 rounds, 1 retry")
    ap.add_argument("--models", nargs="+", default=list(MODELS), help=f"of {', '.join(MODELS)}")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results", help="results folder")
    harness.add_noise_arguments(ap)
    args = ap.parse_args(argv)
    problem = harness.noise_problem(args)
    if bad := [m for m in args.models if m not in MODELS]:
        problem = f"--models {' '.join(bad)}: not among {', '.join(MODELS)}"
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    noise = harness.noise_from_args(args, quick=args.quick)
    cases = [c for c in CASES if c[1] in args.models]
    Ps = [4, 8] if args.quick else [4, 8, 32]
    reps, steps = (3, 5) if args.quick else (5, 10)
    rows = []
    for compressor, model, dataset in cases:
        for P in Ps:
            n = steps if model == "fnn3" else 2
            print(f"[threads] {model} {compressor} P={P} ...", file=sys.stderr, flush=True)
            rows.append(measure(compressor, model, dataset, P, reps, n, noise))
            print(threads_table(rows[-1:])[-1], file=sys.stderr, flush=True)
    print("\n".join(threads_table(rows)))
    print(harness.describe_method(noise.threshold, noise.retries))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    meta = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "torch": torch.__version__}
    (args.out_dir / "threads_overhead.json").write_text(json.dumps(
        {"machine": meta, "settings": {"quick": args.quick, "rounds": reps, "noise_threshold_cores": noise.threshold,
                                       "retries": noise.retries}, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
