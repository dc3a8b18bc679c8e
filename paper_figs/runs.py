"""Train the short runs the analysis figures read (`make figs-runs`; part of `make figs`).

    python paper_figs/runs.py [--out paper_figs/runs] [--figure histograms|bounds|convergence]
                              [--only NAME ...] [--force]

Each run is `src/train.py` with an experiment file of experiments/ (the laptop variants, on the
embedded real MNIST digits and on synthetic PTB-shaped tokens) and a few overrides, written to
<out>/<name>. A run whose summary.json exists is skipped (rerun with --force), so an interrupted
`make figs` resumes. About 6 minutes in all on 2 cores.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from figlib import ROOT, RUNS, fail

HIST = ["-cn", "topk_histograms_laptop"]
CONV = ["-cn", "topk_paper_convergence_laptop", "hydra.mode=RUN", "trainer.eval_every=1", "trainer.log_every=5"]
LSTM = ["model=lstm", "dataset=synthetic_ptb", "dataset.vocab_size=2000", "trainer.epochs=3",
        "capture.u_steps=[1,8,24]", "trainer.grad_clip=0.25"]
# name -> (experiment and overrides, the figures that read it)
PLAN: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "hist_fnn3_d0.001": ([*HIST, "hydra.mode=RUN"], ("histograms", "bounds")),
    "hist_cnn_d0.001": ([*HIST, "hydra.mode=RUN", "model=cnn"], ("histograms", "bounds")),
    "hist_lstm_d0.001": ([*HIST, "hydra.mode=RUN", *LSTM], ("histograms", "bounds")),
    "bounds_fnn3_d0.01": ([*HIST, "hydra.mode=RUN", "compressor.density=0.01"], ("bounds",)),
    "bounds_fnn3_d0.05": ([*HIST, "hydra.mode=RUN", "compressor.density=0.05"], ("bounds",)),
    "bounds_fnn3_gtopk_d0.001": ([*HIST, "hydra.mode=RUN", "compressor=gtopk"], ("bounds",)),
    **{f"conv_{c}": ([*CONV, f"compressor={c}"], ("convergence",))
       for c in ("dense", "topk", "gtopk", "gaussiank", "randomk")},
}
FIGURES = sorted({f for _, figs in PLAN.values() for f in figs})


def train(name: str, overrides: list[str], out: Path) -> float:
    run_dir = out / name
    if run_dir.exists():
        shutil.rmtree(run_dir)            # an unfinished earlier attempt
    argv = [sys.executable, str(ROOT / "src" / "train.py"), "-cd", str(ROOT / "experiments"), *overrides,
            "wandb.mode=disabled", "trainer.progress=false", f"hydra.run.dir={run_dir}"]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "WANDB_SILENT": "true"})
    if proc.returncode != 0:
        fail(f"run {name} failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(RUNS), help="folder of the run directories")
    ap.add_argument("--only", nargs="+", default=None, help=f"run names among: {', '.join(PLAN)}")
    ap.add_argument("--figure", default=None, help=f"only the runs of one figure: {', '.join(FIGURES)}")
    ap.add_argument("--force", action="store_true", help="retrain runs that already finished")
    args = ap.parse_args(argv)
    if args.figure is not None and args.figure not in FIGURES:
        fail(f"--figure {args.figure}: unknown figure; allowed: {', '.join(FIGURES)}")
    names = args.only or [n for n, (_, figs) in PLAN.items() if args.figure is None or args.figure in figs]
    unknown = [n for n in names if n not in PLAN]
    if unknown:
        fail(f"--only {' '.join(unknown)}: unknown run; allowed: {', '.join(PLAN)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names, 1):
        done = (out / name / "summary.json").exists()
        if done and not args.force:
            print(f"[{i}/{len(names)}] {name}: done earlier, kept", flush=True)
            continue
        print(f"[{i}/{len(names)}] {name} (for: {', '.join(PLAN[name][1])}) ...", end=" ", flush=True)
        print(f"{train(name, PLAN[name][0], out):.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
