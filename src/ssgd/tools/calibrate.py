"""`make alphabeta`: measure alpha and beta of your network and write a cluster config.

    python -m ssgd.tools.calibrate --name mylab --world-size 16 [--hostfile hosts.txt] [--force]
    python -m ssgd.tools.calibrate --from-cluster testbed --out outputs/testbed/alphabeta.yaml --force

`--from-cluster NAME` takes the hostfile, world size and mpiexec arguments of conf/cluster/NAME.yaml (the
testbed's agent and btl tcp, docs/testbed.md), so the ping-pong runs between that cluster's first two hosts.

Runs `ssgd.tools.pingpong` on 2 MPI ranks (on 2 hosts of the hostfile, or on this machine), fits
t = alpha + n beta by relative least squares (`fit_alpha_beta`; `--fit regimes`: by regime,
`fit_alpha_beta_regimes`, for token-bucket links), prints the points and the fit,
and writes conf/cluster/<name>.yaml, usable as `python src/train.py cluster=<name>`. An existing
file is kept unless --force. This process stays MPI-free (it launches mpiexec).
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from ssgd.run.launch_mpi import mpiexec_path, worker_env
from ssgd.config import conf_dir
from ssgd.perf.alphabeta import AlphaBeta, fit_alpha_beta, fit_alpha_beta_regimes
from ssgd.utils.atomic import full_disk_is_one_line, write_text_atomic

CONF = conf_dir() / "cluster"


def cluster_yaml(name: str, world_size: int, net: AlphaBeta, meta: dict, hostfile: str | None,
                 fit: str = "relative") -> str:
    today = datetime.date.today().isoformat()
    hosts = ", ".join(sorted(set(meta["hosts"])))
    how = ("relative least squares (ssgd.perf.alphabeta.fit_alpha_beta)" if fit == "relative"
           else "by regime (ssgd.perf.alphabeta.fit_alpha_beta_regimes)")
    return (f"# {name}: alpha/beta fitted by `make alphabeta` on {today}: mpi4py ping-pong between 2 ranks on\n"
            f"# {hosts} ({meta['mpi']}), {len(meta['nbytes'])} sizes from {meta['nbytes'][0]} B to "
            f"{meta['nbytes'][-1]} B, {how}.\n"
            f"name: {name}\nworld_size: {world_size}\nnetwork:\n"
            f"  alpha: {net.alpha:.4g}          # seconds per message\n"
            f"  beta: {net.beta:.4g}          # seconds per byte ({1 / net.beta / 1e9 if net.beta else float('inf'):.2f} GB/s)\n"
            f"hostfile: {hostfile or 'null'}\nmpiexec_args: []\n")


@full_disk_is_one_line
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Fit alpha/beta by an MPI ping-pong and write conf/cluster/NAME.yaml")
    ap.add_argument("--name", default="measured", help="cluster config name (default: measured)")
    ap.add_argument("--world-size", type=int, default=4, help="workers of the cluster the file describes")
    ap.add_argument("--hostfile", default=None, help="mpiexec hostfile; the ping-pong uses its first 2 slots")
    ap.add_argument("--force", action="store_true", help="overwrite an existing conf/cluster/NAME.yaml")
    ap.add_argument("--from-cluster", default=None,
                    help="take --hostfile, --world-size and the mpiexec arguments from conf/cluster/NAME.yaml")
    ap.add_argument("--out", default=None, help="write here instead of conf/cluster/NAME.yaml")
    ap.add_argument("--fit", choices=("relative", "regimes"), default="relative",
                    help="relative: one line through every size, relative residuals; regimes: alpha from the "
                    "messages <= 8 KiB, beta from the slope of those >= 2 MiB (token-bucket links, docs/testbed.md)")
    ap.add_argument("--points", default=None, help="also write the ping-pong's sizes and times here (JSON)")
    ap.add_argument("--idle-ms", type=float, default=0.0,
                    help="both ranks sleep this long before each round trip (token-bucket links: every message finds "
                         "its bucket full; ssgd.tools.pingpong)")
    args = ap.parse_args(argv)
    extra: list[str] = []
    if args.from_cluster:
        from omegaconf import OmegaConf

        source = CONF / f"{args.from_cluster}.yaml"
        if not source.is_file():
            print(f"error: --from-cluster={args.from_cluster}: no {source.name} in conf/cluster/", file=sys.stderr)
            return 2
        cluster = OmegaConf.load(source)
        args.hostfile, args.world_size = cluster.get("hostfile"), int(cluster.world_size)
        extra = [str(a) for a in cluster.get("mpiexec_args") or []]
    out = Path(args.out) if args.out else CONF / f"{args.name}.yaml"
    if args.idle_ms < 0:
        print(f"error: --idle-ms={args.idle_ms}: must be >= 0", file=sys.stderr)
        return 2
    if args.world_size < 1:
        print(f"error: --world-size={args.world_size}: must be >= 1", file=sys.stderr)
        return 2
    if out.exists() and not args.force:
        print(f"error: {out} exists; pass --force (FORCE=1 with make) to overwrite it", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "pingpong.json"
        argv_mpi = [mpiexec_path(), "-n", "2"] + (["--hostfile", args.hostfile] if args.hostfile else []) + extra
        argv_mpi += [sys.executable, "-m", "mpi4py", "-m", "ssgd.tools.pingpong", str(result), repr(args.idle_ms)]
        status = subprocess.run(argv_mpi, env=worker_env(local=args.hostfile is None), timeout=600).returncode
        if status != 0 or not result.exists():
            print(f"error: the ping-pong job failed (exit status {status})", file=sys.stderr)
            return 1
        meta = json.loads(result.read_text())
    fit = fit_alpha_beta_regimes if args.fit == "regimes" else fit_alpha_beta
    net = fit(meta["nbytes"], meta["seconds"])
    if args.points:
        write_text_atomic(Path(args.points), json.dumps({**meta, "fit": args.fit, "alpha": net.alpha,
                                                          "beta": net.beta}, indent=1) + "\n", "the ping-pong's points")
    print(f"{'bytes':>12} {'measured us':>12} {'fit us':>10}")
    for n, t in zip(meta["nbytes"], meta["seconds"]):
        print(f"{n:>12} {t * 1e6:>12.2f} {net.message(n) * 1e6:>10.2f}")
    print(f"alpha = {net.alpha:.4g} s, beta = {net.beta:.4g} s/byte ({args.fit} fit)")
    write_text_atomic(out, cluster_yaml(args.name, args.world_size, net, meta, args.hostfile, args.fit),
                      "the cluster config")
    print(f"wrote {out}: use it with `python src/train.py cluster={args.name}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
