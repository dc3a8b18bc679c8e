"""Validate the iteration-time model against real local runs: predicted vs measured, side by side.

    python paper_figs/validate_model.py [--model resnet20 --dataset synthetic_cifar10 --P 2 --steps 20]

1. Profiles the model here (`ssgd.perf.measure`, one intra-op thread, as one worker).
2. Runs `src/train.py backend=mpi cluster=local` with P ranks (P <= cores, so each rank has a core,
   as each worker has its own machine in the model) for every scheme, density warm-up off.
3. Prints, per scheme, the model's iteration time (`ssgd.perf.iteration` with the profile and the
   `local` alpha-beta constants) next to the measured mean step time from summary.json, part by part,
   and writes paper_figs/out/validation_<model>.csv.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from ssgd import build  # noqa: E402
from ssgd.perf.iteration import iteration_time  # noqa: E402
from ssgd.perf.measure import measure_profile  # noqa: E402


def run(scheme: str, args: argparse.Namespace, out: Path) -> dict:
    argv = [sys.executable, str(ROOT / "src" / "train.py"), "backend=mpi", "cluster=local",
            f"cluster.world_size={args.P}", f"compressor={scheme}", "compressor.density_warmup=[]",
            f"model={args.model}", f"dataset={args.dataset}", f"trainer.batch_size={args.batch}",
            f"trainer.max_steps={args.steps}", "trainer.log_every=1000", "trainer.progress=false",
            "wandb.mode=disabled", f"hydra.run.dir={out}"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, env={**os.environ, "WANDB_SILENT": "true"})
    if proc.returncode != 0:
        raise SystemExit(f"error: the {scheme} run failed:\n{proc.stderr[-2000:]}")
    return json.loads((out / "summary.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--dataset", default="synthetic_cifar10")
    ap.add_argument("--P", type=int, default=2, help="MPI ranks (<= cores)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--schemes", nargs="+", default=["dense", "topk", "gtopk", "gaussiank"])
    ap.add_argument("--out", default=str(ROOT / "paper_figs" / "out"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", [f"model={args.model}", f"dataset={args.dataset}", f"trainer.batch_size={args.batch}"])
    data = build.dataset(cfg)
    model = build.model(cfg, data, cfg.seed)
    profile = measure_profile(model, data.x_train[:args.batch], data.y_train[:args.batch], args.model)
    net = build.network(cfg)
    rows = []
    print(f"{args.model}, P = {args.P} MPI ranks on this machine, batch {args.batch}, density 0.001, {args.steps} steps")
    print("| scheme | part | predicted ms | measured ms |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for scheme in args.schemes:
            summary = run(scheme, args, Path(tmp) / scheme)
            factor = summary.get("density/achieved", 0.001) / 0.001 if scheme == "gaussiank" else 1.0
            pred = iteration_time(profile, scheme, net, args.P, 0.001, gaussian_factor=factor)
            parts = {"compute": (pred.forward_s + pred.backward_s, summary["time/compute_s"]),
                     "compress": (pred.compress_s, summary["time/compress_s"]),
                     "comm": (pred.comm_s, summary["time/comm_s"]),
                     "update": (pred.update_s, summary["time/update_s"]),
                     "iteration": (pred.total_s, summary["time/step_s"])}
            for part, (p, m) in parts.items():
                rows.append({"scheme": scheme, "part": part, "predicted_s": p, "measured_s": m})
                print(f"| {scheme} | {part} | {p * 1e3:.2f} | {m * 1e3:.2f} |", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"validation_{args.model}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
