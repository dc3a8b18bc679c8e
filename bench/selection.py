"""Selection cost on this CPU: exact Top-k vs Gaussian-k vs Random-k (Top-k paper's motivation).

For d in {1e5, 1e6, 1e7, 2.5e7} and density 0.001, times `compress(u, density)` of each compressor
on u ~ N(0, 1) (median of repetitions, all variants interleaved), and reports Gaussian-k's achieved
density and its speed-up over exact Top-k.

    .venv/bin/python bench/selection.py            # ~1 min on 2 cores
    .venv/bin/python bench/selection.py --threads 1
Writes bench/results/selection.json and prints a markdown table.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from ssgd.compress.gaussiank import GaussianK  # noqa: E402
from ssgd.compress.randomk import RandomK  # noqa: E402
from ssgd.compress.topk import TopK  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(), help="intra-op threads")
    ap.add_argument("--density", type=float, default=0.001)
    ap.add_argument("--sizes", type=float, nargs="+", default=[1e5, 1e6, 1e7, 2.5e7])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    compressors = {"topk": TopK(), "gaussiank": GaussianK(), "randomk": RandomK(torch.Generator().manual_seed(0))}
    rows = []
    print(f"| d | topk ms | gaussiank ms | randomk ms | topk / gaussiank | gaussiank density / target |  ({args.threads} threads)")
    print("|---|---|---|---|---|---|")
    for d in (int(x) for x in args.sizes):
        u = torch.randn(d, generator=torch.Generator().manual_seed(d))
        reps = 20 if d <= 1_000_000 else 5
        times: dict[str, list[float]] = {name: [] for name in compressors}
        for name, c in compressors.items():
            c.compress(u, args.density)                       # warm-up
        for _ in range(reps):
            for name, c in compressors.items():
                start = time.perf_counter()
                c.compress(u, args.density)
                times[name].append(time.perf_counter() - start)
        med = {name: 1e3 * statistics.median(t) for name, t in times.items()}
        achieved = len(compressors["gaussiank"].compress(u, args.density)) / d
        rows.append({"d": d, "ms": med, "gaussiank_density": achieved, "threads": args.threads})
        print(f"| {d:,} | {med['topk']:.2f} | {med['gaussiank']:.2f} | {med['randomk']:.2f} | "
              f"{med['topk'] / med['gaussiank']:.1f}x | {achieved / args.density:.3f} |", flush=True)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "selection.json").write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
