"""`make bench-zoo`: the sparse-allreduce zoo raced on SIMULATED clusters (SimGrid): dense, TopkA, gTop-k, Ok-Topk.

For every network (1 and 10 GbE: conf/cluster/32x1gbe.yaml and 32x10gbe.yaml's `network.simgrid`, widened to P
hosts), d, distribution and P, each scheme's collective program runs once through the SimGrid executor
(`ssgd.comm.executors.simgrid.run_simgrid`, cpu="none": the network alone) on payloads from real selections:

  * every rank r draws its own synthetic gradient u_r of d float32 and keeps its exact local top-k
    (`ssgd.compress.sparse.select_topk`, k = max(int(d x density), 1), density 0.001):
      - `normal`: u_r ~ N(0, 1) i.i.d. (the ranks' selections are independent: their union is about P k);
      - `heavy`:  u_r = s * z_r, z_r ~ N(0, 1) per rank and s = exp(1.5 N(0, 1)) one heavy-tailed (log-normal)
        scale per coordinate shared by every rank (large-gradient coordinates are large everywhere, so the
        selections overlap, as real gradients' do);
    rank r's selection is the same at every P (the first P ranks' payloads serve P);
  * dense: a `meta` tensor of d floats per rank (it travels as its size: the time does not depend on the values).

Schemes (`registry()`, one line each): `dense` (ring allreduce), `topk` (TopkA: `SparseAllgather`), `gtopk`
(`GTopKAllreduce`), `oktopk` (`OkTopkAllreduce(tau=1)`: an exact call), `oktopk_reuse` (the call after an exact
one with tau = 2 on the same selections: the global threshold reused, the regions kept), and `topkdsa` (SparCML's
recursive doubling) when `ssgd.comm.collectives.sparcml` exists. Per call: the slowest and fastest rank's simulated
seconds, bytes and messages each rank sent (max and mean), and the bounds of Ok-Topk's paper in bytes
(`paper_bound_bytes`, `lower_bound_bytes`).

SimGrid keeps one platform per process: the selections are drawn once here (cached in a temporary folder), then
one subprocess per network simulates (both at once) and the CSVs are merged. Progress goes to stderr.

    PYTHONPATH=src python bench/zoo.py                          # the default grid (module constants)
    PYTHONPATH=src python bench/zoo.py --P 2 4 8 --d 1000000    # smaller
    PYTHONPATH=src python bench/zoo.py --P 128 256 --schemes topk gtopk oktopk --out bench/results/zoo_large.csv
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NETWORKS = ("1GbE", "10GbE")          # labels of ssgd.tools.simgrid_replay.NETWORKS
VOLUME = "volume"                     # --networks volume: bytes and messages on the threads executor, no times
NAN = float("nan")
DISTS = ("normal", "heavy")
DENSITY = 0.001
P_DEFAULT = (2, 4, 8, 16, 32, 64)
D_DEFAULT = (1_000_000, 25_000_000)
DENSE_MAX_P = 64                      # the dense ring: 2 P (P - 1) messages per call (wall time, docs/zoo.md)
WORD_BYTES = 4                        # the Ok-Topk paper counts 4-byte words; a sparse entry is 2 words
ENTRY_BYTES = 8                       # our (int32 index, float32 value) entries
OUT = ROOT / "bench" / "results" / "zoo.csv"
COPY = ROOT / "paper_figs" / "measured" / "zoo.csv"
COLUMNS = ("network", "dist", "d", "k", "P", "scheme", "t_max_s", "t_min_s", "bytes_max", "bytes_mean",
           "messages_max", "messages_mean", "entries_mean", "bound_bytes", "lower_bound_bytes", "wall_s")


@dataclass(frozen=True)
class Scheme:
    """A raced scheme: `make()` a fresh collective; `call` is the call measured (2: the second call on the same
    instance and payloads, e.g. Ok-Topk's threshold reuse); `sparse`: it takes the local selections."""

    name: str
    label: str
    make: Callable[[], Any]
    sparse: bool = True
    call: int = 1


def registry() -> dict[str, Scheme]:
    """The raced schemes by name (module docstring); `topkdsa` only where ssgd.comm.collectives.sparcml exists."""
    from ssgd.comm.collectives.allgather import SparseAllgather
    from ssgd.comm.collectives.dense import DenseAllreduce
    from ssgd.comm.collectives.gtopk import GTopKAllreduce
    from ssgd.comm.collectives.oktopk import OkTopkAllreduce

    schemes = [Scheme("dense", "dense (ring allreduce)", DenseAllreduce, sparse=False),
               Scheme("topk", "TopkA (allgather)", SparseAllgather),
               Scheme("gtopk", "gTop-k", GTopKAllreduce),
               Scheme("oktopk", "Ok-Topk, exact call (tau = 1)", lambda: OkTopkAllreduce(1, 1)),
               Scheme("oktopk_reuse", "Ok-Topk, threshold-reuse call", lambda: OkTopkAllreduce(2, 10**9), call=2)]
    if importlib.util.find_spec("ssgd.comm.collectives.sparcml") is not None:
        from ssgd.comm.collectives import sparcml
        schemes.append(Scheme("topkdsa", "TopkDSA (SparCML)", sparcml.SparseRecursiveDoubling))
    return {s.name: s for s in schemes}


@dataclass(frozen=True)
class Case:
    """One measured call: d, the distribution ("-" for dense, whose payload has no values), P and the scheme."""

    d: int
    dist: str
    P: int
    scheme: str


def plan(Ps: Sequence[int], ds: Sequence[int], dists: Sequence[str], schemes: Sequence[str],
         dense_max_P: int = DENSE_MAX_P) -> list[Case]:
    """Every case of the grid, by d, then P, then scheme, then distribution; dense once per (d, P), only up to
    dense_max_P. ValueError naming the bad value (P < 2, d < 1, an unknown distribution)."""
    for P in Ps:
        if isinstance(P, bool) or not isinstance(P, int) or P < 2:
            raise ValueError(f"P={P!r}: worker counts must be integers >= 2")
    for d in ds:
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ValueError(f"d={d!r}: must be an integer >= 1")
    for dist in dists:
        if dist not in DISTS:
            raise ValueError(f"dist={dist!r}: allowed: {', '.join(DISTS)}")
    cases = []
    for d in ds:
        for P in sorted(Ps):
            for s in schemes:
                if s == "dense":
                    cases += [Case(d, "-", P, s)] if P <= dense_max_P else []
                else:
                    cases += [Case(d, dist, P, s) for dist in dists]
    return cases


def k_of(d: int, density: float = DENSITY) -> int:
    """Entries each rank selects: max(int(d x density), 1) (ssgd.compress.sparse.k_of)."""
    return max(int(d * density), 1)


def paper_bound_bytes(k: int, P: int) -> float:
    """Ok-Topk's bandwidth term, 6 k (P - 1) / P words of 4 bytes (the paper's Eq. 3: k entries of 2 words)."""
    return 6 * k * (P - 1) / P * WORD_BYTES


def lower_bound_bytes(k: int, P: int) -> float:
    """The lower bound of a sparse allreduce of a k-entry result, 2 k (P - 1) / P words of 4 bytes."""
    return 2 * k * (P - 1) / P * WORD_BYTES


def gradient(dist: str, d: int, rank: int, scale: Any = None) -> Any:
    """Rank `rank`'s synthetic gradient (module docstring); `scale`: the shared heavy-tailed scale (heavy)."""
    import torch

    z = torch.randn(d, generator=torch.Generator().manual_seed(1000 + rank))
    return z if dist == "normal" else z.mul_(scale)


def shared_scale(d: int) -> Any:
    """The heavy distribution's per-coordinate scale exp(1.5 N(0, 1)), the same on every rank."""
    import torch

    return torch.randn(d, generator=torch.Generator().manual_seed(7)).mul_(1.5).exp_()


def selections(dist: str, d: int, P: int, density: float = DENSITY) -> list[Any]:
    """The first P ranks' exact local top-k of their gradients (`Sparse`, indices increasing)."""
    from ssgd.compress.sparse import select_topk

    scale = shared_scale(d) if dist == "heavy" else None
    return [select_topk(gradient(dist, d, r, scale), k_of(d, density)) for r in range(P)]


def cache_path(cache: Path, dist: str, d: int) -> Path:
    return cache / f"{dist}_{d}.pt"


def build_cache(cache: Path, cases: Sequence[Case], density: float) -> None:
    """Draw every (dist, d)'s selections once, for its largest P, into `cache` (torch.save of idx/val lists)."""
    import torch

    need: dict[tuple[str, int], int] = {}
    for c in cases:
        if c.dist != "-":
            need[(c.dist, c.d)] = max(need.get((c.dist, c.d), 0), c.P)
    for (dist, d), P in sorted(need.items()):
        t0 = time.perf_counter()
        sel = selections(dist, d, P, density)
        torch.save({"idx": [s.idx for s in sel], "val": [s.val for s in sel]}, cache_path(cache, dist, d))
        log(f"selections {dist} d={d:,}: {P} ranks x k={k_of(d, density):,} ({time.perf_counter() - t0:.1f} s)")


def log(msg: str) -> None:
    print(f"[bench-zoo] {msg}", file=sys.stderr, flush=True)


def payloads(case: Case, cache: Path, loaded: dict) -> list[Any]:
    """The case's P payloads: meta tensors for dense, else the cached selections' first P."""
    import torch

    from ssgd.payload import Dense, Sparse

    if case.dist == "-":
        return [Dense(torch.empty(case.d, dtype=torch.float32, device="meta")) for _ in range(case.P)]
    key = (case.dist, case.d)
    if key not in loaded:
        loaded.clear()
        loaded[key] = torch.load(cache_path(cache, *key))
    got = loaded[key]
    return [Sparse(got["idx"][r], got["val"][r], case.d) for r in range(case.P)]


def measure(case: Case, scheme: Scheme, pl: Sequence[Any], platform: Any) -> dict[str, Any]:
    """Run the scheme's call(s) on SimGrid; the measured call's row (COLUMNS, without network and wall_s).
    `platform` None: on the threads executor, bytes and messages only (the same counts as SimGrid's, tested in
    tests/unit/test_simgrid_executor.py), the times NaN."""
    from ssgd.comm.executors.simgrid import run_simgrid
    from ssgd.comm.executors.thread import run_threads

    coll = scheme.make()
    for _ in range(scheme.call):
        _, logs = run_threads(coll, pl) if platform is None else run_simgrid(coll, pl, platform, cpu="none")
    sent = [lg.stats.bytes for lg in logs]
    msgs = [lg.stats.messages for lg in logs]
    k = case.d if case.dist == "-" else k_of(case.d)
    return {"dist": case.dist, "d": case.d, "k": k, "P": case.P, "scheme": case.scheme,
            "t_max_s": NAN if platform is None else max(lg.clock for lg in logs),
            "t_min_s": NAN if platform is None else min(lg.clock for lg in logs),
            "bytes_max": max(sent), "bytes_mean": sum(sent) / len(sent), "messages_max": max(msgs),
            "messages_mean": sum(msgs) / len(msgs), "entries_mean": sum(len(p) for p in pl) / len(pl)
            if case.dist != "-" else case.d, "bound_bytes": paper_bound_bytes(k, case.P),
            "lower_bound_bytes": lower_bound_bytes(k, case.P)}


def run_network(network: str, cases: Sequence[Case], cache: Path, out: Path) -> int:
    """Every case on `network` in this process (one SimGrid platform; VOLUME: the threads executor, no times);
    the CSV `out`."""
    from ssgd.tools.simgrid_replay import platform_of

    platform = None if network == VOLUME else platform_of(network, max(c.P for c in cases))
    reg, loaded, rows = registry(), {}, []
    for i, case in enumerate(cases):
        t0 = time.perf_counter()
        row = measure(case, reg[case.scheme], payloads(case, cache, loaded), platform)
        rows.append({"network": network, **row, "wall_s": time.perf_counter() - t0})
        log(f"{network} [{i + 1}/{len(cases)}] d={case.d:,} {case.dist} P={case.P} {case.scheme}: "
            f"{'no time' if platform is None else format(row['t_max_s'] * 1e3, '.2f') + ' ms simulated'}, "
            f"{row['bytes_max'] / 1e6:.3f} MB sent (max rank) "
            f"({rows[-1]['wall_s']:.1f} s)")
    write_csv(out, rows)
    return 0


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """rows (COLUMNS; floats with 6 significant digits) to `path`, its folder created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: f"{v:.6g}" if isinstance(v, float) else v for k, v in r.items()})


def read_csv(path: Path) -> list[dict[str, str]]:
    """The rows of a zoo CSV; ValueError naming the file when its header is not COLUMNS."""
    with Path(path).open(newline="") as f:
        rows = csv.DictReader(f)
        if tuple(rows.fieldnames or ()) != COLUMNS:
            raise ValueError(f"{path}: header {rows.fieldnames} is not the zoo CSV's ({', '.join(COLUMNS)})")
        return list(rows)


def run_all(args: argparse.Namespace, cases: Sequence[Case]) -> int:
    """Selections once, then one subprocess per network (both at once); their CSVs merged into args.out."""
    with tempfile.TemporaryDirectory(prefix="bench-zoo-") as tmp:
        build_cache(Path(tmp), cases, DENSITY)
        parts = {net: Path(tmp) / f"{net}.csv" for net in args.networks}
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        procs = {net: subprocess.Popen([sys.executable, __file__, "--worker", net, "--cache", tmp,
                                        "--out", str(part), *grid_args(args)], env=env)
                 for net, part in parts.items()}
        try:
            codes = [p.wait() for p in procs.values()]
        finally:                                    # stopped (SIGTERM, Ctrl-C): no worker outlives the driver
            for p in procs.values():
                if p.poll() is None:
                    p.terminate()
                    p.wait()
        if any(codes):
            return next(c for c in codes if c)
        rows = [r for part in parts.values() for r in read_csv(part)]
    write_csv(args.out, rows)
    return 0


def grid_args(args: argparse.Namespace) -> list[str]:
    return ["--P", *map(str, args.P), "--d", *map(str, args.d), "--dists", *args.dists,
            "--schemes", *args.schemes, "--dense-max-P", str(args.dense_max_P)]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--P", type=int, nargs="+", default=list(P_DEFAULT), help="worker counts (>= 2)")
    ap.add_argument("--d", type=int, nargs="+", default=list(D_DEFAULT), help="gradient sizes")
    ap.add_argument("--dists", nargs="+", default=list(DISTS), help=f"u's distributions: {', '.join(DISTS)}")
    ap.add_argument("--schemes", nargs="+", help="schemes (default: every one of the registry)")
    ap.add_argument("--dense-max-P", type=int, default=DENSE_MAX_P, help="dense only up to this P")
    ap.add_argument("--networks", nargs="+", default=list(NETWORKS), choices=[*NETWORKS, VOLUME],
                    help=f"simulated networks; {VOLUME}: bytes and messages only, on the threads executor "
                         "(no SimGrid: for P where a simulation takes hours)")
    ap.add_argument("--out", type=Path, default=OUT, help="CSV to write")
    ap.add_argument("--copy", type=Path, default=None,
                    help=f"also copy the CSV there (default: {COPY.relative_to(ROOT)} when --out is the default)")
    ap.add_argument("--worker", choices=[*NETWORKS, VOLUME], help=argparse.SUPPRESS)
    ap.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    reg = registry()
    args.schemes = args.schemes or list(reg)
    bad = [s for s in args.schemes if s not in reg]
    try:
        if bad:
            raise ValueError(f"--schemes {bad[0]}: allowed: {', '.join(reg)}")
        cases = plan(args.P, args.d, args.dists, args.schemes, args.dense_max_P)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.worker:
        return run_network(args.worker, cases, args.cache, args.out)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))     # unwinds run_all, which stops the workers
    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    log(f"{len(cases)} cases x {len(args.networks)} networks (load average {load0:.1f})")
    code = run_all(args, cases)
    copy = args.copy or (COPY if args.out == OUT else None)
    if code == 0 and copy is not None:
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(args.out, copy)
    log(f"done in {time.perf_counter() - t0:.0f} s (load average {load0:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end): {args.out}" + (f", copied to {copy}" if copy else ""))
    return code


if __name__ == "__main__":
    sys.exit(main())
