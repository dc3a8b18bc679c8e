"""FSDP's gradient reduce-scatter on SimGrid: dense fp32 (FSDP's own volume), dense16 and the sparse one of
`ssgd.fsdp`, through the same collective programs `ssgd.fsdp` runs (`ssgd.comm.collectives.reduce_scatter`).

For each P, one reduce-scatter of a d-element gradient (default d = 8M: a 32 MB fp32 layer group, large enough that
sharding matters on this machine's 24 GiB at P = 64), every rank's payload from its own normal u (sparse: its exact
top-k at `--density`), on `--cluster`'s simulated platform widened to P hosts; the merges' CPU is charged
(`cpu="measured"`). Prints and writes <out-dir>/fsdp_simgrid.json: simulated seconds (slowest rank) and bytes sent
per rank (max). All times SIMULATED.

    .venv/bin/python bench/fsdp_simgrid.py                       # P = 8, 16, 32, 64; ~2 min
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(P: int, d: int, density: float, cluster: str) -> list[dict]:
    import torch
    import yaml

    from ssgd.comm.collectives.reduce_scatter import DenseReduceScatter, SparseReduceScatter
    from ssgd.comm.executors.simgrid import run_simgrid
    from ssgd.compress.sparse import k_of, select_topk
    from ssgd.payload import Dense
    from ssgd.perf.platform import from_cluster

    sg = yaml.safe_load((ROOT / "conf" / "cluster" / f"{cluster}.yaml").read_text())["network"]["simgrid"]
    platform = from_cluster(sg, P)
    g = torch.Generator().manual_seed(0)
    us = [torch.randn(d, generator=g) for _ in range(P)]
    rows = []
    for name, coll, make in (("dense fp32", DenseReduceScatter(), lambda u: Dense(u)),
                             ("dense bf16", DenseReduceScatter("bf16"), None),
                             (f"top-k {density}", SparseReduceScatter(), lambda u: select_topk(u, k_of(d, density)))):
        payloads = [coll.encode(Dense(u)) if make is None else make(u) for u in us]
        _, logs = run_simgrid(coll, payloads, platform)
        rows.append({"P": P, "d": d, "scheme": name, "simulated_s": max(l.clock for l in logs),
                     "bytes_per_rank": max(l.stats.bytes for l in logs)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--P", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--d", type=int, default=8_000_000)
    ap.add_argument("--density", type=float, default=0.01)
    ap.add_argument("--cluster", default="32x1gbe")
    ap.add_argument("--out-dir", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.d, args.density, args.cluster)))
        return
    rows = []
    print(f"FSDP reduce-scatter on SimGrid ({args.cluster}), d={args.d:,} (load {os.getloadavg()[0]:.1f})")
    for P in args.P:
        proc = subprocess.run([sys.executable, __file__, "--worker", str(P), "--d", str(args.d), "--density",
                               str(args.density), "--cluster", args.cluster], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=900)
        if proc.returncode:
            raise SystemExit(f"fsdp_simgrid: P={P}: {proc.stderr.strip().splitlines()[-1:]}")
        for row in json.loads(proc.stdout.strip().splitlines()[-1]):
            rows.append(row)
            print(f"  P={P:>3} {row['scheme']:<12} {1e3 * row['simulated_s']:9.1f} ms simulated  "
                  f"{row['bytes_per_rank']:>12,} bytes per rank", flush=True)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fsdp_simgrid.json").write_text(json.dumps({"load_average": os.getloadavg(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
