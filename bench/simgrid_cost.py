"""`make bench-simgrid`: what simulating a collective on SimGrid costs this machine, against P.

For each P, one subprocess (its own SimGrid engine; memory measured per process) builds P sparse payloads of
k = d x density entries (distinct random indices, normal values: what gTop-k receives after each rank's local
top-k) and runs one gTop-k call (`GTopKAllreduce`, the lab's program) through the SimGrid executor on the
cluster's simulated platform (default `32x1gbe`'s `network.simgrid`, widened to P hosts), the CPU of every
merge measured and charged to its host. Printed and written to <out-dir>/simgrid_cost.json per P: seconds to
build the inputs, wall seconds of the simulation, the simulated seconds of the call (slowest rank), and the
process's peak resident memory.

The payload of a dense allreduce does not depend on the data for its timing: its messages travel as their sizes,
but its result (the rank-order sum, bitwise that of the other executors) needs every rank's d floats in memory, so
a dense call at P = 1,024, d = 25M (100 GB of inputs) is out of this benchmark's reach; the sparse collectives'
payloads are k entries each.

    .venv/bin/python bench/simgrid_cost.py                           # P = 32 ... 1,024, d = 25M, density 0.001
    .venv/bin/python bench/simgrid_cost.py --P 32 256 --d 1000000    # smaller
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(P: int, d: int, density: float, cluster: str) -> dict:
    """One simulated gTop-k call at P ranks in this process; its costs."""
    import torch
    import yaml

    from ssgd.comm.collectives.gtopk import GTopKAllreduce
    from ssgd.comm.executors.simgrid import run_simgrid
    from ssgd.payload import Sparse
    from ssgd.perf.platform import from_cluster

    sg = yaml.safe_load((ROOT / "conf" / "cluster" / f"{cluster}.yaml").read_text())["network"]["simgrid"]
    platform = from_cluster(sg, P)
    k, g, t0 = max(1, int(d * density)), torch.Generator().manual_seed(0), time.perf_counter()
    payloads = []
    for _ in range(P):
        idx = torch.randint(0, d, (k + k // 8 + 16,), generator=g).unique()[:k]
        payloads.append(Sparse(idx, torch.randn(len(idx), generator=g), d))
    t1 = time.perf_counter()
    _, logs = run_simgrid(GTopKAllreduce(), payloads, platform)
    wall = time.perf_counter() - t1
    return {"P": P, "d": d, "k": k, "inputs_s": t1 - t0, "wall_s": wall,
            "simulated_s": max(log.clock for log in logs),
            "max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}


def drive(args: argparse.Namespace) -> list[dict]:
    rows = []
    print(f"gTop-k on SimGrid, d={args.d:,}, density {args.density}, cluster {args.cluster} "
          f"(load average {os.getloadavg()[0]:.1f})")
    print(f"{'P':>6} {'inputs s':>9} {'wall s':>8} {'simulated ms':>13} {'peak GB':>8}", flush=True)
    for P in args.P:
        cmd = [sys.executable, __file__, "--worker", str(P), "--d", str(args.d), "--density", str(args.density),
               "--cluster", args.cluster]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        if proc.returncode != 0:
            raise SystemExit(f"bench-simgrid: P={P} failed: {proc.stderr.strip().splitlines()[-1:]}")
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{P:>6} {row['inputs_s']:>9.1f} {row['wall_s']:>8.1f} {1e3 * row['simulated_s']:>13.2f} "
              f"{row['max_rss_gb']:>8.2f}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--P", type=int, nargs="+", default=[32, 64, 128, 256, 512, 1024])
    ap.add_argument("--d", type=int, default=25_000_000)
    ap.add_argument("--density", type=float, default=0.001)
    ap.add_argument("--cluster", default="32x1gbe")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per P")
    ap.add_argument("--out-dir", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.d, args.density, args.cluster)))
        return
    rows = drive(args)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "simgrid_cost.json").write_text(json.dumps({"load_average": os.getloadavg(), "rows": rows}, indent=1))
    print(f"wrote {out / 'simgrid_cost.json'}")


if __name__ == "__main__":
    main()
