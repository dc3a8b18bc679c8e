"""Whole S-SGD iterations of the gTop-k paper's models on a simulated cluster (SimGrid): `make simgrid-scaling`.

One simulated step on P hosts, every host a SimGrid actor running (docs/scaling-model.md, "Simulated iterations"):

  1. forward: `this_actor.sleep_for(io + h2d + forward)` of the shipped profile (`ssgd.perf.profiles`: the
     paper's GPUs, not this CPU);
  2. backward, with wait-free backprop: the layers, in backward order, go into DDP-style buckets of
     `BUCKET_BYTES` (25 MiB, DDP's `bucket_cap_mb` default; a bucket closes once its fp32 gradients reach
     the cap, so a layer larger than the cap is a bucket of its own). Bucket b is ready when the backward of
     its last layer is done (the profile's per-layer backward times, back to back); its collective starts
     once it is ready AND this rank's previous collective has returned (one collective at a time per rank,
     in bucket order). For the sparse schemes the bucket's selection is charged first, on the same stream
     as the collectives (the released gTop-k code selects in its communication thread): the profile's
     select_s scaled by n log2 n / (d log2 d), n the bucket's size (the authors' top-k cost model);
  3. the collective program itself (`ssgd.comm.executors.simgrid.run_rank`, cpu="none": the network alone,
     the merges' CPU is not charged, the selection above stands for it): dense `DenseAllreduce` (a ring
     allreduce; its payload is a `meta` tensor, which travels as its size alone: the time does not depend
     on the values; past PROGRAM_RING_MAX ranks, one ring step simulated x 2(P - 1): `ring_step_seconds`),
     Top-k `SparseAllgather` and gTop-k `GTopKAllreduce` (on request Ok-Topk `OkTopkAllreduce` and TopkDSA
     `SparseRecursiveDoubling`) on synthetic k-sparse payloads, k = max(int(DENSITY x n), 1) random distinct
     indices and values per rank and bucket;
  4. the step ends when the backward and the last collective are done, plus the profile's update_s.

t_iter(P) is the SLOWEST rank's step (max over ranks); efficiency = t_single / t_iter(P), t_single the
profile's plain single-worker step (`Profile.single_worker_seconds`, the paper's P = 1 throughput), as in
`ssgd.perf.iteration`. Per-worker throughput = batch / t_iter; the cluster's = P x that.

    python -m ssgd.tools.simgrid_replay --network 1GbE --out part.csv [--models ...] [--P ...] [--schemes ...]
    python -m ssgd.tools.simgrid_replay --all --out paper_figs/measured/simgrid_scaling.csv   # each network
                                                                                              # in a subprocess
SimGrid keeps one platform per process, so one process simulates one network (`--network`); `--all` starts
one subprocess per network (both at once) and merges their CSVs. The default grid is `default_plan`'s:
every model and scheme at P_SMALL on both networks, gTop-k and dense at P_LARGE on 1 GbE.
"""
from __future__ import annotations

import argparse
import csv
import io
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ssgd.utils.atomic import full_disk_is_one_line, write_text_atomic

BUCKET_BYTES = 25 * 2**20          # DDP's default bucket_cap_mb = 25
DENSITY = 0.001                    # the paper's rho (conf/compressor/topk.yaml, gtopk.yaml)
MODELS = ("vgg16", "resnet20", "alexnet", "resnet50", "lstm_ptb")
SCHEMES = ("dense", "topk", "gtopk")   # the default plan's; `collective` also knows EXTRA_SCHEMES
EXTRA_SCHEMES = ("oktopk", "topkdsa")  # on request: Ok-Topk (tau = 1: every call exact), SparCML's TopkDSA (docs/zoo.md)
NETWORKS = {"1GbE": "32x1gbe", "10GbE": "32x10gbe"}   # label -> conf/cluster/<name>.yaml
P_SMALL = (2, 4, 8, 16, 32)
P_LARGE = (64, 128, 256, 512, 1024)  # dense and gTop-k, 1 GbE only
PROGRAM_RING_MAX = 128     # the dense program's 2P(P - 1) messages per bucket: ~40 s of wall time per bucket at 256
METHODS = ("auto", "program", "ring-step")
COLUMNS = ("network", "profile", "scheme", "P", "method", "buckets", "k_per_step", "t_single_s", "t_iter_s",
           "t_iter_min_s", "comm_s", "select_s", "efficiency", "per_worker_samples_per_s", "samples_per_s", "wall_s")


@dataclass(frozen=True)
class Bucket:
    """One bucket: its layers (profile indices, backward order), its size in elements, the seconds from the
    start of backward until its gradients are ready, and its selection seconds (sparse schemes)."""

    layers: tuple[int, ...]
    numel: int
    ready_s: float
    select_s: float


def bucket_selection_seconds(select_s: float, d: int, n: int) -> float:
    """The profile's exact top-k seconds at d, scaled to n elements by n log2 n / (d log2 d)."""
    if n <= 1 or d <= 1:
        return select_s * n / max(d, 1)
    return select_s * n * math.log2(n) / (d * math.log2(d))


def buckets(profile: Any, bucket_bytes: int = BUCKET_BYTES) -> list[Bucket]:
    """The profile's layers in DDP-style buckets (module docstring); ValueError for bucket_bytes < 1."""
    if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes < 1:
        raise ValueError(f"bucket_bytes={bucket_bytes!r}: must be an int >= 1")
    out: list[Bucket] = []
    layers: list[int] = []
    numel, clock = 0, 0.0
    for i, (n, t) in enumerate(zip(profile.params, profile.backward_s)):
        layers.append(i)
        numel, clock = numel + n, clock + t
        if 4 * numel >= bucket_bytes or i == len(profile.params) - 1:
            sel = bucket_selection_seconds(profile.select_s, profile.d, numel)
            out.append(Bucket(tuple(layers), numel, clock, sel))
            layers, numel = [], 0
    return [b for b in out if b.numel > 0]


def collective(scheme: str) -> Any:
    """A fresh instance of the scheme's collective (one per simulation: gTop-k keeps per-rank buffers)."""
    from ssgd.comm.collectives.allgather import SparseAllgather
    from ssgd.comm.collectives.dense import DenseAllreduce
    from ssgd.comm.collectives.gtopk import GTopKAllreduce
    from ssgd.comm.collectives.oktopk import OkTopkAllreduce
    from ssgd.comm.collectives.sparcml import SparseRecursiveDoubling

    kinds = {"dense": DenseAllreduce, "topk": SparseAllgather, "gtopk": GTopKAllreduce, "oktopk": OkTopkAllreduce,
             "topkdsa": SparseRecursiveDoubling}
    if scheme not in kinds:
        raise ValueError(f"scheme={scheme!r}: allowed: {', '.join(kinds)}")
    return kinds[scheme]()


def payload(scheme: str, numel: int, density: float, seed: int) -> Any:
    """One rank's payload for a bucket of `numel` elements: dense, a `meta` tensor of that size (its size
    alone); sparse, k = max(int(density x numel), 1) distinct increasing indices (one in each of k equal
    strides, at a random offset) with N(0, 1) values."""
    import torch

    from ssgd.compress.sparse import k_of
    from ssgd.payload import Dense, Sparse

    if scheme == "dense":
        return Dense(torch.empty(numel, dtype=torch.float32, device="meta"))
    k = k_of(numel, density)
    stride = numel // k
    gen = torch.Generator().manual_seed(seed)
    idx = torch.arange(k, dtype=torch.int64) * stride + torch.randint(0, stride, (k,), generator=gen)
    return Sparse(idx, torch.randn(k, generator=gen), numel)


def seed_of(rank: int, bucket: int) -> int:
    """The seed of rank `rank`'s payload for bucket `bucket` (distinct per rank and bucket)."""
    return rank * 7919 + bucket


@dataclass
class _Step:
    """One simulation's shared state: the plan, the ranks of every bucket's call, and what the actors report."""

    profile: Any
    scheme: str
    P: int
    plan: list[Bucket]
    density: float
    coll: Any
    ranks: list[list[Any]]
    ring_step: bool
    clocks: list[float | None]
    comm: list[float]
    errors: list[tuple[int, BaseException]] = field(default_factory=list)


def _rank(step: _Step, r: int) -> None:
    """Rank r's step inside its SimGrid actor (module docstring); errors go to step.errors, never raised."""
    from ssgd.comm.executors.simgrid import run_rank

    try:
        prof, sg = step.profile, step.ranks[0][r].sg
        sleep, t0 = sg.this_actor.sleep_for, sg.Engine.clock
        pre = prof.io_s + prof.h2d_s + prof.t_f
        sleep(pre)
        for b, bucket in enumerate(step.plan):
            wait = t0 + pre + bucket.ready_s - sg.Engine.clock
            if wait > 0:
                sleep(wait)
            if step.scheme != "dense" and bucket.select_s > 0:
                sleep(bucket.select_s)
            rank, out = step.ranks[b][r], {"results": {}, "errors": step.errors}
            if step.ring_step:
                step.comm[r] += ring_step_seconds(rank, bucket.numel)
                continue
            run_rank(rank, step.coll, payload(step.scheme, bucket.numel, step.density, seed_of(r, b)), "none", out)
            step.ranks[b][r] = None                   # the call's slots go once every rank has left it
            if r not in out["results"]:
                return
            step.comm[r] += rank.log.clock
        tail = t0 + pre + prof.t_b - sg.Engine.clock
        if tail > 0:
            sleep(tail)
        if prof.update_s > 0:
            sleep(prof.update_s)
        step.clocks[r] = sg.Engine.clock - t0
    except Exception as err:                          # an exception leaving an actor aborts the process
        step.errors.append((r, err))


def ring_step_seconds(rank: Any, numel: int) -> float:
    """Inside rank `rank.r`'s actor: a dense ring allreduce of `numel` fp32 elements over `rank.P` ranks as ONE
    ring step simulated (send a chunk of ceil(numel / P) elements to rank r + 1, receive one from r - 1, as
    `SimRank.ring` does) and the rest slept: the call takes 2(P - 1) x that step. Returns those seconds.

    Exact where every rank starts the call at one instant on a platform whose ranks are alike (a star, with or
    without a backbone; the replay's dense ranks share one profile): every step then finds the links as the
    first did. The largest chunk stands for every chunk, an upper bound by at most 4 bytes per message when P
    does not divide numel (tests/unit/test_simgrid_replay.py checks it against the whole program)."""
    P, sg = rank.P, rank.sg
    if P == 1:
        return 0.0
    t0, size = sg.Engine.clock, 4 * -(-numel // P)
    comm = rank.box(f"ring>{(rank.r + 1) % P}").put_async(None, size)
    rank.box(f"ring>{rank.r}").get()
    comm.wait()
    sg.this_actor.sleep_for((sg.Engine.clock - t0) * (2 * (P - 1) - 1))
    rank.log.stats.add((2 * (P - 1), 2 * (P - 1) * size))
    return sg.Engine.clock - t0


def uses_ring_step(scheme: str, P: int, method: str) -> bool:
    """Whether `simulate_step` times `scheme` at P by `ring_step_seconds` (dense only; `auto`: past
    PROGRAM_RING_MAX). ValueError for a method outside METHODS or `ring-step` for a sparse scheme."""
    if method not in METHODS:
        raise ValueError(f"method={method!r}: allowed: {', '.join(METHODS)}")
    if method == "ring-step" and scheme != "dense":
        raise ValueError(f"method='ring-step': dense only, not scheme={scheme!r}")
    return scheme == "dense" and (method == "ring-step" or (method == "auto" and P > PROGRAM_RING_MAX))


@dataclass(frozen=True)
class StepTime:
    """One simulated step: the slowest and fastest rank's step and the slowest rank's collective seconds."""

    t_iter_s: float
    t_iter_min_s: float
    comm_s: float
    buckets: int
    k_per_step: int
    method: str = "program"


def simulate_step(profile: Any, scheme: str, P: int, platform: Any, bucket_bytes: int = BUCKET_BYTES,
                  density: float = DENSITY, method: str = "auto") -> StepTime:
    """One step of `scheme` on P hosts of `platform` (module docstring); dense collectives by the program or
    by `ring_step_seconds` (`uses_ring_step`). ValueError for a bad scheme, P or method; a rank's error is
    raised; RuntimeError when a rank did not finish."""
    from ssgd.comm.executors.simgrid import SimRank
    from ssgd.comm.executors.simgrid_engine import session
    from ssgd.compress.sparse import k_of

    if isinstance(P, bool) or not isinstance(P, int) or not 1 <= P <= platform.hosts:
        raise ValueError(f"P={P!r}: must be an int in 1..{platform.hosts} (the platform's hosts)")
    ring_step = uses_ring_step(scheme, P, method)
    s, plan = session(platform), buckets(profile, bucket_bytes)
    ranks = []
    for _ in plan:
        call, slots = s.next_call(), {}
        ranks.append([SimRank(s, call, r, P, slots) for r in range(P)])
    step = _Step(profile, scheme, P, plan, density, collective(scheme), ranks, ring_step, [None] * P, [0.0] * P)
    for r in range(P):
        s.sg.Actor.create(f"step{ranks[0][0].call}r{r}", s.hosts[r], _rank, step, r)
    s.engine.run()
    raised = sorted((e for e in step.errors if not isinstance(e[1], s.sg.ActorKilled)), key=lambda e: e[0])
    if raised:
        raise raised[0][1]
    if any(c is None for c in step.clocks):
        raise RuntimeError(f"{profile.name} {scheme} P={P}: a rank never finished its step on SimGrid")
    k = sum(b.numel if scheme == "dense" else k_of(b.numel, density) for b in plan)
    return StepTime(max(step.clocks), min(step.clocks), max(step.comm), len(plan), k,
                    "ring-step" if ring_step else "program")


def platform_of(network: str, hosts: int) -> Any:
    """The SimGrid `Platform` of conf/cluster/<NETWORKS[network]>.yaml's network.simgrid with `hosts` hosts."""
    from omegaconf import OmegaConf

    from ssgd.perf.platform import from_cluster

    path = Path(__file__).resolve().parents[1] / "conf" / "cluster" / f"{NETWORKS[network]}.yaml"
    return from_cluster(OmegaConf.to_container(OmegaConf.load(path).network.simgrid), hosts)


def default_plan(network: str) -> list[tuple[str, str, int]]:
    """(profile, scheme, P) of `make simgrid-scaling` on `network` (module docstring)."""
    plan = [(m, s, P) for m in MODELS for s in SCHEMES for P in P_SMALL]
    if network == "1GbE":
        plan += [(m, s, P) for s in ("gtopk", "dense") for m in MODELS for P in P_LARGE]
    return plan


def row(network: str, profile: Any, scheme: str, P: int, st: StepTime, wall_s: float) -> dict[str, Any]:
    """One CSV row (COLUMNS) of a simulated step."""
    single = profile.single_worker_seconds()
    select = 0.0 if scheme == "dense" else sum(b.select_s for b in buckets(profile))
    return {"network": network, "profile": profile.name, "scheme": scheme, "P": P, "method": st.method,
            "buckets": st.buckets,
            "k_per_step": st.k_per_step, "t_single_s": single, "t_iter_s": st.t_iter_s,
            "t_iter_min_s": st.t_iter_min_s, "comm_s": st.comm_s, "select_s": select,
            "efficiency": single / st.t_iter_s, "per_worker_samples_per_s": profile.batch_size / st.t_iter_s,
            "samples_per_s": P * profile.batch_size / st.t_iter_s, "wall_s": wall_s}


def run_network(network: str, plan: Sequence[tuple[str, str, int]], out: Path, method: str = "auto") -> int:
    """Simulate every (profile, scheme, P) of `plan` on `network` in this process (dense by `method`,
    `uses_ring_step`); write the CSV `out`."""
    from ssgd.perf import profiles

    platform = platform_of(network, max(P for _, _, P in plan))
    rows = []
    for name, scheme, P in plan:
        prof, t0 = profiles.load(name), time.perf_counter()
        st = simulate_step(prof, scheme, P, platform, method=method if scheme == "dense" else "auto")
        rows.append(row(network, prof, scheme, P, st, time.perf_counter() - t0))
        print(f"[simgrid-scaling] {network} {name} {scheme} P={P}: t_iter {st.t_iter_s * 1e3:.1f} ms, "
              f"eff {rows[-1]['efficiency']:.3f} ({st.method}, {rows[-1]['wall_s']:.1f} s)", file=sys.stderr, flush=True)
    write_csv(out, rows)
    return 0


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """rows (COLUMNS; floats with 6 significant digits) to `path`, its folder created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = io.StringIO(newline="")
    w = csv.DictWriter(text, fieldnames=COLUMNS)
    w.writeheader()
    for r in rows:
        w.writerow({k: f"{v:.6g}" if isinstance(v, float) else v for k, v in r.items()})
    write_text_atomic(path, text.getvalue(), "the replay's table")


def run_all(out: Path, extra: Sequence[str]) -> int:
    """One subprocess per network (both at once), their CSVs merged into `out`; the first failure's code."""
    with tempfile.TemporaryDirectory(prefix="simgrid-scaling-") as tmp:
        parts = {net: Path(tmp) / f"{net}.csv" for net in NETWORKS}
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                            os.environ.get("PYTHONPATH", "")])}
        procs = {net: subprocess.Popen([sys.executable, "-m", "ssgd.tools.simgrid_replay", "--network", net,
                                        "--out", str(part), *extra], env=env) for net, part in parts.items()}
        codes = {net: p.wait() for net, p in procs.items()}
        bad = [code for code in codes.values() if code]
        if bad:
            return bad[0]
        rows: list[dict[str, Any]] = []
        for part in parts.values():
            with part.open(newline="") as f:
                rows += list(csv.DictReader(f))
    write_csv(out, rows)
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m ssgd.tools.simgrid_replay", description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--network", choices=sorted(NETWORKS), help="simulate this network in this process")
    where.add_argument("--all", action="store_true", help="every network, each in its own subprocess")
    ap.add_argument("--out", type=Path, required=True, help="CSV to write")
    ap.add_argument("--models", nargs="+", choices=MODELS, help="profiles (default: all five)")
    ap.add_argument("--schemes", nargs="+", choices=SCHEMES + EXTRA_SCHEMES,
                    help="schemes (default: dense, topk, gtopk; oktopk and topkdsa on request)")
    ap.add_argument("--P", type=int, nargs="+", help="worker counts (default: the plan of the module docstring)")
    ap.add_argument("--dense-method", choices=METHODS, default="auto",
                    help=f"dense collectives: the program, one ring step x 2(P - 1), or auto (the program up to "
                         f"P = {PROGRAM_RING_MAX})")
    return ap


@full_disk_is_one_line
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    bad = [P for P in args.P or [] if P < 1]
    if bad:
        print(f"error: --P {bad[0]}: worker counts must be >= 1", file=sys.stderr)
        return 2
    if args.all:
        extra = [*(["--models", *args.models] if args.models else []),
                 *(["--schemes", *args.schemes] if args.schemes else []),
                 *(["--P", *map(str, args.P)] if args.P else []), "--dense-method", args.dense_method]
        return run_all(args.out, extra)
    plan = [(m, s, P) for m, s, P in default_plan(args.network)
            if (not args.models or m in args.models) and (not args.schemes or s in args.schemes)]
    if args.P:
        plan = [(m, s, P) for m in args.models or MODELS for s in args.schemes or SCHEMES for P in args.P]
    from ssgd.comm.executors.simgrid_engine import SimGridMissing

    try:
        return run_network(args.network, plan, args.out, args.dense_method)
    except SimGridMissing as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
