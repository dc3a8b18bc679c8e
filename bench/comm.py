"""The aggregation collectives on real MPI ranks, interleaved, against the released gTop-k and the alpha-beta model.

For P MPI ranks on this machine (oversubscribed when P > cores; one intra-op thread per rank) and d
float32 elements at density 0.001 (k = max(int(d * 0.001), 1)), every rank builds its own
u = randn(d) (seed = rank) and its payloads once, then times, interleaved in rounds (bench/harness.py):

  * dense allreduce           package `DenseAllreduce`,  payload u;
  * Top-k AllGather           package `SparseAllgather`, payload: the exact top-k of u;
  * Gaussian-k AllGather      package `SparseAllgather`, payload `GaussianK().compress(u, 0.001)`;
  * gTopKAllReduce, ours      package `GTopKAllreduce`,  the same top-k payload;
  * TopkDSA (SparCML)         package `SparseRecursiveDoubling`, the same top-k payload (--items only);
  * Ok-Topk, exact call       package `OkTopkAllreduce(1, 1)`: thresholds and regions recomputed every call
                              (--items only);
  * Ok-Topk, reuse call       package `OkTopkAllreduce(REUSE_TAU, REUSE_TAU)`: the first call (counting's) is
                              exact, every later one reuses its global threshold and regions, checked (--items only);
  * gTopKAllReduce, released  bench/released_gtopk.py: the released `gtopk_sparse_allreduce` of
                              hclhkbu/gtopkssgd (allreducer.py), re-implemented (numpy, float64
                              packing, np.intersect1d merges, a Barrier per round, Bcast from rank 0);
  * both gTop-k "with decode": the collective plus what each trainer does with the result: ours,
    `Trainer.step`'s decode into its persistent gradient buffer, whose views the parameters' .grad
    are (bench/ours.py); released, its decode into a reused buffer (fill 0, write V_g at I_g, / P).

Each call starts after a Barrier; its time is the slowest rank's (max over ranks). A round runs every
item once, or several times (`inner`) so that a round lasts >= --min-round-s; per item the round's
time is the median of its calls; reported: the median over rounds, ratios ours / released per round
with their median and [min-max] over rounds. During each round rank 0 measures the CPU that processes
outside this benchmark (driver, mpiexec and ranks) used; a round above --noise-threshold cores is
repeated (<= --retries times), and a (P, d) whose rounds stay above it is marked "noisy".
Payload selection is not timed. Modelled: `collective.model_seconds(AlphaBeta(alpha, beta), P, d,
counts)` for `conf/cluster/<--cluster>.yaml` (default `local`: this machine). Bytes per rank: counted
by the MPI executor vs `ssgd.perf.cost` (max over ranks): Ok-Topk's `oktopk_sent` from the call's sizes (its
regions, the union of the selections, the result); none for TopkDSA, whose bytes depend on the fill-in (no closed
form; `cost.topkdsa_worst_sent` is the disjoint-support worst case).

The script is both driver and worker. The driver (never imports mpi4py's MPI) runs, for each P,
`mpiexec -n P python -m mpi4py bench/comm.py --worker ...` under a timeout, prints the tables and
writes <--out-dir>/comm.json (`--quick`: comm_quick.json, so a quick check keeps the full run).

    .venv/bin/python bench/comm.py               # P = 2, 4, 8; d = 1M, 25M; 7 rounds
    .venv/bin/python bench/comm.py --quick       # P = 2, 4;    d = 1M;      3 rounds
    .venv/bin/python bench/comm.py --P 2 4 8 --sizes 1M 25M --rounds 9 --noise-threshold 0.2
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import harness  # noqa: E402
import machine_info as machine  # noqa: E402

RESULTS = ROOT / "bench" / "results"
DENSITY = 0.001
MiB_ELEMS = 2**20
ROUNDS, QUICK_ROUNDS = 7, 3
DEFAULT_ITEMS = ("dense_allreduce", "topk_allgather", "gaussiank_allgather", "gtopk_allreduce", "gtopk_released",
                 "gtopk_decode", "gtopk_released_decode")
ZOO = ("topkdsa_allreduce", "oktopk_allreduce", "oktopk_reuse")     # timed only when --items names them
COLLECTIVES = DEFAULT_ITEMS + ZOO
REUSE_TAU = 10**9           # oktopk_reuse's tau and tau': after its first (exact) call, every call reuses
LABELS = {"dense_allreduce": "dense allreduce", "topk_allgather": "Top-k AllGather",
          "gaussiank_allgather": "Gaussian-k AllGather", "gtopk_allreduce": "gTopKAllReduce (ours)",
          "gtopk_released": "gTopKAllReduce (released)", "gtopk_decode": "gTopKAllReduce + decode (ours)",
          "gtopk_released_decode": "gTopKAllReduce + decode (released)", "topkdsa_allreduce": "TopkDSA (SparCML)",
          "oktopk_allreduce": "Ok-Topk, exact call (tau = 1)", "oktopk_reuse": "Ok-Topk, threshold-reuse call"}
PAIRS = {"collective": ("gtopk_allreduce", "gtopk_released"), "with decode": ("gtopk_decode", "gtopk_released_decode")}


def parse_size(text: str) -> int:
    """'1M' -> 2**20 elements, '25M' -> 25 * 2**20, '1000' -> 1000."""
    t = text.strip().upper()
    if t.endswith("M"):
        return int(float(t[:-1]) * MiB_ELEMS)
    if t.endswith("K"):
        return int(float(t[:-1]) * 1024)
    return int(t)


def size_label(d: int) -> str:
    return f"{d // MiB_ELEMS}M" if d % MiB_ELEMS == 0 else str(d)


# ----------------------------------------------------------------------------------------------
# worker: one MPI rank (started by the driver through mpiexec)
# ----------------------------------------------------------------------------------------------
def peak_rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024      # KiB on Linux


def payloads(d: int, rank: int, density: float) -> dict[str, Any]:
    """Rank `rank`'s payload for each collective at d, from u = randn(d) with seed = rank: u itself (dense), the
    exact top-k of u (the Top-k AllGather's, gTop-k's, TopkDSA's and Ok-Topk's), Gaussian-k's selection. The
    worker's inputs, and those of the testbed's model of its calls (bench/testbed_comm.py)."""
    import torch

    import ours
    from ssgd.compress.gaussiank import GaussianK
    from ssgd.compress.sparse import k_of
    from ssgd.payload import Dense

    u = torch.randn(d, generator=torch.Generator().manual_seed(rank))
    topk = ours.select(u, k_of(d, density))
    return {"dense_allreduce": Dense(u), "topk_allgather": topk,
            "gaussiank_allgather": GaussianK().compress(u, density), "gtopk_allreduce": topk,
            **{name: topk for name in ZOO}}


def zoo_collective(name: str) -> Any:
    """A fresh collective of one of ZOO (module docstring); KeyError for any other name."""
    from ssgd.comm.collectives.oktopk import OkTopkAllreduce
    from ssgd.comm.collectives.sparcml import SparseRecursiveDoubling

    return {"topkdsa_allreduce": SparseRecursiveDoubling, "oktopk_allreduce": lambda: OkTopkAllreduce(1, 1),
            "oktopk_reuse": lambda: OkTopkAllreduce(REUSE_TAU, REUSE_TAU)}[name]()


def oktopk_sizes(rank: int, bounds: Any, mine: Any, every: list[Any], result: Any, k: int,
                 exact: bool) -> tuple[int, list[int]]:
    """The sizes `ssgd.perf.cost.oktopk_sent` takes, for rank `rank` after one Ok-Topk call: (`to_others`, the
    entries of its selection `mine` (indices) outside its region [bounds[rank], bounds[rank + 1]), `selected`, per
    region j the entries kept for the result: on an exact call min(k, n_j), n_j the distinct indices of the ranks'
    selections `every` in region j; on a reuse call the entries of `result` (indices) in region j)."""
    import numpy as np

    edges = np.asarray(bounds, dtype=np.int64)
    lo, hi = int(edges[rank]), int(edges[rank + 1])
    mine = np.asarray(mine)
    to_others = int(np.count_nonzero((mine < lo) | (mine >= hi)))
    def per_region(indices: Any) -> list[int]:         # region j: [edges[j], edges[j + 1])
        return [int(n) for n in np.diff(np.searchsorted(np.sort(np.asarray(indices)), edges, side="left"))]

    if exact:
        return to_others, [min(k, n) for n in per_region(np.unique(np.concatenate([np.asarray(e) for e in every])))]
    return to_others, per_region(result)


def kept_medians(share: harness.ClockShare, names: list[str]) -> dict[str, dict[str, float]]:
    """Per item, the median over the kept calls since the last case of the slowest rank's duration and of the ranks'
    entry skew (`harness.ClockShare`), in seconds."""
    kept = share.take()
    return {f"{key}_s": {name: statistics.median(row[j] for row in kept[key]) for j, name in enumerate(names)}
            for key in ("slowest", "skew")}


class RankBench:
    """One rank of the MPI job (`worker`): its communicator, the cluster's alpha-beta constants, how the
    slowest rank's time is shared (`harness.ClockShare` from the last entry, else `harness.MPIShare`), the
    noise meter and the executor's buffer pool. Every rank makes the same MPI calls in the same order."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch
        from mpi4py import MPI
        from omegaconf import OmegaConf

        from ssgd.perf.alphabeta import AlphaBeta

        torch.set_num_threads(1)
        self.args, self.comm = args, MPI.COMM_WORLD
        self.rank, self.P = self.comm.Get_rank(), self.comm.Get_size()
        network = OmegaConf.load(ROOT / "conf" / "cluster" / f"{args.cluster}.yaml").network
        self.net = AlphaBeta(float(network.alpha), float(network.beta))
        self.share = harness.ClockShare(self.comm) if args.from_last_entry else harness.MPIShare(self.comm)
        self.meter = harness.mpi_meter(self.comm, args.tree_root)
        self.pool: dict = {}

    def barrier_timed(self, fn, warm=None) -> float:
        """--warm-calls calls of `warm` (default `fn`), --idle-s of spinning, a Barrier, then one timed call of
        `fn`: its seconds on this rank, or from the last rank's entry (--from-last-entry)."""
        for _ in range(self.args.warm_calls):
            (warm or fn)()
        if self.args.idle_s:                                # busy, as a rank computing its next step is
            until = time.perf_counter() + self.args.idle_s
            while time.perf_counter() < until:
                pass
        self.comm.Barrier()
        if self.args.from_last_entry:
            return self.share.timed(fn)
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def collectives(self, given: dict) -> dict:
        """name -> (collective, this rank's payload) of the package's four collectives, and of those of ZOO
        that --items names."""
        import ours
        from ssgd.comm.collectives.allgather import SparseAllgather
        from ssgd.comm.collectives.dense import DenseAllreduce

        return {"dense_allreduce": (DenseAllreduce(), given["dense_allreduce"]),
                "topk_allgather": (SparseAllgather(), given["topk_allgather"]),
                "gaussiank_allgather": (SparseAllgather(), given["gaussiank_allgather"]),
                "gtopk_allreduce": (ours.gtopk(), given["gtopk_allreduce"]),
                **{name: (zoo_collective(name), given[name]) for name in ZOO if name in self.args.items}}

    def modelled_sent(self, name: str, payload: Any, reduced: Any, counts: list[int], d: int,
                      k: int) -> tuple[int, int] | None:
        """(messages, bytes) this rank sent in the call of `name` that returned `reduced`, by `ssgd.perf.cost`;
        None for TopkDSA (fill-in dependent: no closed form). Ok-Topk's from the call's sizes (`oktopk_sizes`):
        every rank must call this for Ok-Topk (one allgather of the selections)."""
        from ssgd.perf import cost

        rank, P = self.rank, self.P
        if name == "dense_allreduce":
            return cost.allreduce_sent(rank, P, d)
        if name == "gtopk_allreduce":
            return cost.gtopk_sent(rank, P, k)
        if name == "topkdsa_allreduce":
            return None
        if name in ("oktopk_allreduce", "oktopk_reuse"):
            exact = name == "oktopk_allreduce"          # oktopk_reuse's counted call is its second: a reuse call
            every = self.comm.allgather(payload.idx.numpy()) if exact else []
            bounds = self.coll_state(name)["bounds"]
            to_others, selected = oktopk_sizes(rank, bounds, payload.idx.numpy(), every,
                                               reduced.total.idx.numpy(), max(counts), exact)
            return cost.oktopk_sent(rank, P, to_others, selected, exact=exact, regions=exact)
        return cost.allgatherv_sent(rank, [cost.SPARSE_ENTRY_BYTES * c for c in counts])

    def coll_state(self, name: str) -> dict:
        """This rank's state of the Ok-Topk collective `name` (`OkTopkAllreduce.state_dict`)."""
        return self.colls[name][0].state_dict(self.rank)

    def check_reuse(self) -> None:
        """Raise unless oktopk_reuse (when timed) made one exact call, its first: every later call reused the
        threshold and regions (exact calls come at calls = 0, tau, 2 tau, ...; regions at 0, tau', ...)."""
        if "oktopk_reuse" not in self.colls:
            return
        coll, calls = self.colls["oktopk_reuse"][0], self.coll_state("oktopk_reuse")["calls"]
        if not 2 <= calls <= min(coll.tau, coll.tau_prime):
            raise RuntimeError(f"oktopk_reuse: {calls} calls with tau = {coll.tau}, tau' = {coll.tau_prime}: "
                               "not one exact call followed by reuse calls")

    def count(self, colls: dict, d: int, k: int) -> dict:
        """One call of each collective (also a first warm-up; oktopk_reuse: after its exact call): entries, bytes
        and messages by rank, measured by the executor and modelled by `ssgd.perf.cost` (None where it has no
        form), and the modelled seconds (rank 0's; {} elsewhere)."""
        import ours

        comm, rank, P = self.comm, self.rank, self.P
        self.colls, counted = colls, {}
        for name, (coll, payload) in colls.items():
            counts = comm.allgather(payload.count)
            if name == "oktopk_reuse":
                ours.run(coll, payload, comm, self.pool)        # the exact call whose threshold the others reuse
            reduced, log = ours.run(coll, payload, comm, self.pool)
            modelled = self.modelled_sent(name, payload, reduced, counts, d, k) or (None, None)
            every = comm.gather((log.stats.bytes, log.stats.messages, modelled[1], modelled[0]), root=0)
            if rank == 0:
                counted[name] = {"entries_by_rank": counts, "modelled_s": coll.model_seconds(self.net, P, d, counts),
                                 "bytes_by_rank_measured": [e[0] for e in every],
                                 "messages_by_rank_measured": [e[1] for e in every],
                                 "bytes_by_rank_modelled": [e[2] for e in every],
                                 "messages_by_rank_modelled": [e[3] for e in every]}
        return counted

    def ours_items(self, colls: dict, computed: dict[str, list], params) -> list[tuple[str, Any]]:
        """The package's collectives as timed items, and gTop-k with the trainer's decode."""
        import ours

        comm, pool = self.comm, self.pool

        def ours_call(name: str):
            coll, payload = colls[name]
            if not self.args.from_last_entry:
                return lambda: self.barrier_timed(lambda: ours.run(coll, payload, comm, pool))
            # the testbed's model replays each rank's compute between the MPI calls (bench/testbed_comm.py)
            return lambda: self.barrier_timed(
                lambda: computed[name].append(ours.run_timed(coll, payload, comm, pool)[2]),
                warm=lambda: ours.run(coll, payload, comm, pool))

        def ours_decode() -> float:
            coll, payload = colls["gtopk_allreduce"]
            return self.barrier_timed(lambda: ours.decode(ours.run(coll, payload, comm, pool)[0], params))

        return [(name, ours_call(name)) for name in colls] + [("gtopk_decode", ours_decode)]

    def released_call(self, val, idx, buffer, decode: bool):
        """The released gTop-k (and its decode into `buffer`) as a timed item."""
        import released_gtopk as released

        def call() -> float:
            given = val.copy()          # the released code merges into and zeroes its input
            def run() -> None:
                v_g, i_g, _ = released.gtopk_sparse_allreduce(self.comm, given, idx, storage={})
                if decode:
                    released.decode(buffer, v_g, i_g, self.P)
            return self.barrier_timed(run)
        return call

    def items(self, d: int, given: dict, colls: dict, computed: dict[str, list]) -> list[tuple[str, Any]]:
        """Every item of --items at size d, in the order of the tables; the released gTop-k only at a power-of-two P."""
        import torch

        import ours

        idx, val = ours.payload_arrays(given["topk_allgather"])
        params = ours.make_params(d)
        buffer = torch.zeros(d)                       # the released trainer's persistent flat gradient
        mine = self.ours_items(colls, computed, params)
        items = mine[:-1]
        if self.P & (self.P - 1) == 0:                      # the released code needs a power of two
            items += [("gtopk_released", self.released_call(val, idx, buffer, False)), mine[-1],
                      ("gtopk_released_decode", self.released_call(val, idx, buffer, True))]
        else:
            items += [mine[-1]]
        return [(name, fn) for name, fn in items if name in self.args.items]

    def progress(self, d: int):
        """The per-round callback: keeps the clock share's calls, rank 0 prints one line."""
        def on_round(r: harness.Round) -> None:
            if self.args.from_last_entry:
                self.share.keep()
            if self.rank == 0:
                other = "unmeasured" if r.other_cores is None else f"{r.other_cores:.2f} cores"
                print(f"[comm] P={self.P} d={size_label(d)} round {r.index + 1}/{self.args.rounds}: other CPU {other}"
                      + (f" (attempt {r.attempts})" if r.attempts > 1 else "") + (" NOISY" if r.noisy else ""),
                      file=sys.stderr, flush=True)
        return on_round

    def case(self, d: int) -> dict | None:
        """Count, then time every item at size d in interleaved rounds; rank 0's record of the case (None elsewhere)."""
        from ssgd.compress.sparse import k_of

        args = self.args
        k = k_of(d, args.density)
        given = payloads(d, rank=self.rank, density=args.density)
        colls = self.collectives(given)
        counted = self.count(colls, d, k)
        computed: dict[str, list[list[float]]] = {name: [] for name in colls}
        items = self.items(d, given, colls, computed)
        series = harness.interleaved(items, args.rounds, threshold=args.noise_threshold, retries=args.retries,
                                     warmup=1, min_round_s=args.min_round_s, meter=self.meter, share=self.share,
                                     on_round=self.progress(d))
        self.check_reuse()
        medians = {name: [statistics.median(c) for c in zip(*calls)] for name, calls in computed.items() if calls}
        every_rank = self.comm.gather(medians, root=0)
        clocked = kept_medians(self.share, series.names) if args.from_last_entry else {}   # every rank: takes its calls
        if self.rank != 0:
            return None
        extra = {}
        if args.from_last_entry:
            extra = {**clocked, "compute_s": {name: [r[name] for r in every_rank] for name in medians}}
        return {"P": self.P, "d": d, "k": k, "density": args.density, "counted": counted,
                "series": series.to_json(), **extra}

    def write(self, cases: list[dict], out: Path) -> None:
        """Gather the ranks' peak RSS; rank 0 writes the job's JSON."""
        import mpi4py
        import torch
        from mpi4py import MPI

        rss = self.comm.gather(peak_rss_bytes(), root=0)
        if self.rank == 0:
            info = {"mpi_library": MPI.Get_library_version().strip("\x00 \n").splitlines()[0],
                    "mpi_standard": "%d.%d" % MPI.Get_version(), "mpi4py": mpi4py.__version__,
                    "torch_threads_per_rank": torch.get_num_threads()}
            job = {"P": self.P, "network": {"cluster": self.args.cluster, "alpha": self.net.alpha,
                                            "beta": self.net.beta},
                   "peak_rss_bytes_by_rank": rss, "mpi": info, "cases": cases}
            out.write_text(json.dumps(job, indent=1) + "\n")


def worker(args: argparse.Namespace) -> None:
    """Measure every item at every size on this rank; rank 0 writes the results as JSON."""
    bench = RankBench(args)
    cases = []
    for d in [parse_size(s) for s in args.sizes]:
        case = bench.case(d)
        if case is not None:
            cases.append(case)
        bench.pool.clear()
    bench.write(cases, Path(args.out))


# ----------------------------------------------------------------------------------------------
# driver: no MPI in this process
# ----------------------------------------------------------------------------------------------
def run_job(P: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One `mpiexec -n P` job of this script's worker; returns its JSON plus wall time and memory.

    On timeout the job's process group gets SIGTERM (mpiexec then stops its ranks), SIGKILL after
    10 s; the job is reported as failed, the other P still run.
    """
    sys.path.insert(0, str(ROOT / "src"))
    from ssgd.run.launch_mpi import mpiexec_path, worker_env

    from omegaconf import OmegaConf

    out = tmp / f"comm_P{P}.json"
    cluster = OmegaConf.load(ROOT / "conf" / "cluster" / f"{args.cluster}.yaml")
    hosts = ["--hostfile", str(cluster.hostfile), *map(str, cluster.get("mpiexec_args") or [])] \
        if cluster.get("hostfile") else []          # e.g. cluster=testbed: one rank per host (docs/testbed.md)
    argv = [mpiexec_path(), "-n", str(P), *hosts, sys.executable, "-m", "mpi4py", str(Path(__file__).resolve()),
            "--worker", "--out", str(out), "--sizes", *args.sizes, "--density", repr(args.density),
            "--cluster", args.cluster, "--rounds", str(args.rounds), "--retries", str(args.retries),
            "--noise-threshold", repr(args.noise_threshold), "--min-round-s", repr(args.min_round_s),
            "--tree-root", str(os.getpid()), "--items", *args.items,
            *(["--from-last-entry"] if getattr(args, "from_last_entry", False) else []),
            "--idle-s", repr(getattr(args, "idle_s", 0.0)), "--warm-calls", str(getattr(args, "warm_calls", 0))]
    base = low = machine.mem_available_bytes()
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=worker_env(local=not hosts), cwd=ROOT, start_new_session=True)
    status: str | None = None
    while status is None:
        try:
            proc.wait(timeout=0.25)
            status = "ok" if proc.returncode == 0 else f"exit status {proc.returncode}"
        except subprocess.TimeoutExpired:
            if time.perf_counter() - t0 > args.timeout:
                status = f"timed out after {args.timeout:.0f} s"
                for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
                    try:
                        os.killpg(proc.pid, sig)
                    except ProcessLookupError:
                        break
                    try:
                        proc.wait(timeout=grace)
                        break
                    except subprocess.TimeoutExpired:
                        continue
        now = machine.mem_available_bytes()
        if now is not None and low is not None:
            low = min(low, now)
    job: dict[str, Any] = {"P": P, "status": status, "wall_s": time.perf_counter() - t0, "cases": []}
    if status == "ok":
        job.update(json.loads(out.read_text()))
    if base is not None and low is not None:
        job["memory_used_peak_bytes"] = base - low      # drop of MemAvailable while the job ran
    return job


def ms(seconds: float) -> str:
    return harness.fmt_num(1e3 * seconds)


def gtopk_table(cases: list[dict[str, Any]]) -> list[str]:
    """ours / released per (P, d), collective only and with decode: ms (median over rounds), ratio
    median [min-max] over rounds; every number of a noisy (P, d) carries the mark."""
    out = ["| P | d | ours ms | released ms | ours / released | ours + decode ms | released + decode ms "
           f"| ours / released, with decode | {harness.NOISE_COLUMN} |", "|---|---|---|---|---|---|---|---|---|"]
    for c in cases:
        s = harness.Series.from_json(c["series"])
        if "gtopk_released" not in s.names:
            continue
        noisy = s.noisy
        cells = []
        for a, b in PAIRS.values():
            cells += [harness.time_cell(s.median(a), noisy), harness.time_cell(s.median(b), noisy),
                      harness.ratio_cell(s.ratio(a, b), noisy, digits=2)]
        out.append(f"| {c['P']} | {size_label(c['d'])} | " + " | ".join(cells) + f" | {harness.noise_cell(s)} |")
    return out


def collectives_table(cases: list[dict[str, Any]], cluster: str) -> list[str]:
    """Every item's time per call with its spread, the modelled time and the counted bytes."""
    out = [f"| P | d | collective | ms per call, median [min-max] | modelled on `{cluster}` ms | bytes/rank measured "
           "| bytes/rank modelled | achieved density |", "|---|---|---|---|---|---|---|---|"]
    for c in cases:
        s = harness.Series.from_json(c["series"])
        for name in s.names:
            counted = c["counted"].get(name)
            model = ms(counted["modelled_s"]) if counted else ""
            b_meas = f"{max(counted['bytes_by_rank_measured']):,}" if counted else ""
            b_model = f"{max(counted['bytes_by_rank_modelled']):,}" \
                if counted and None not in counted["bytes_by_rank_modelled"] else ""
            dens = ""
            if name == "gaussiank_allgather" and counted:
                dens = f"{sum(counted['entries_by_rank']) / (c['P'] * c['d']):.6f}"
            sp = s.spread(name)
            cell = f"{ms(sp.median)} [{ms(sp.lo)}-{ms(sp.hi)}]" + harness.mark(s.noisy)
            out.append(f"| {c['P']} | {size_label(c['d'])} | {LABELS[name]} | {cell} | {model} | {b_meas} "
                       f"| {b_model} | {dens} |")
    return out


def markdown(result: dict[str, Any]) -> str:
    """The tables of one run (also used by bench/summary.py)."""
    cases = result["cases"]
    first = next((c["series"] for c in cases), None)
    lines = [f"Measured on {machine.one_line(result['machine'])}; {result.get('mpi', {}).get('mpi_library', '')}, "
             f"1 intra-op thread per rank, density {result['density']}.",
             f"Settings: {harness.settings_line(first)}; time per call = the slowest rank's." if first else "", "",
             "gTop-k, ours vs the released implementation (hclhkbu/gtopkssgd allreducer.py, re-implemented in "
             "bench/released_gtopk.py); ratio: median [min-max] over rounds:", "", *gtopk_table(cases), "",
             "Every collective:", "", *collectives_table(cases, result["network"]["cluster"] if result.get("network")
                                                        else "local"), "", result.get("noise_method", "")]
    return "\n".join(lines) + "\n"


def mismatches(cases: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    """(case, name) of every counted call whose bytes or messages differ from `ssgd.perf.cost`'s, where it has
    them (TopkDSA: none)."""
    return [(c, name) for c in cases for name, n in c["counted"].items()
            if None not in n["bytes_by_rank_modelled"]
            and (n["bytes_by_rank_measured"] != n["bytes_by_rank_modelled"]
                 or n["messages_by_rank_measured"] != n["messages_by_rank_modelled"])]


def driver(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    info = machine.describe()
    jobs = []
    with tempfile.TemporaryDirectory(prefix="ssgd-bench-comm-") as tmp:
        for P in args.P:
            print(f"[comm] mpiexec -n {P}: d = {', '.join(args.sizes)}, {args.rounds} rounds", file=sys.stderr,
                  flush=True)
            job = run_job(P, args, Path(tmp))
            mem, rss = job.get("memory_used_peak_bytes"), job.get("peak_rss_bytes_by_rank")
            print(f"[comm] P={P}: {job['status']}, {job['wall_s']:.1f} s"
                  + (f", MemAvailable dropped by up to {mem / 2**30:.2f} GiB" if mem is not None else "")
                  + (f", peak RSS per rank up to {max(rss) / 2**30:.2f} GiB" if rss else ""), file=sys.stderr,
                  flush=True)
            jobs.append(job)
    cases = sorted((c for job in jobs for c in job["cases"]), key=lambda c: (c["d"], c["P"]))
    first = next((job for job in jobs if "mpi" in job), {})
    result = {"command": " ".join(["bench/comm.py", *sys.argv[1:]]), "quick": args.quick, "density": args.density,
              "settings": {"rounds": args.rounds, "retries": args.retries,
                           "noise_threshold_cores": args.noise_threshold, "min_round_s": args.min_round_s,
                           "P": args.P, "sizes": args.sizes},
              "noise_method": harness.describe_method(args.noise_threshold, args.retries),
              "network": first.get("network"), "mpi": first.get("mpi", {}), "machine": info,
              "total_runtime_s": time.perf_counter() - start,
              "jobs": [{k: v for k, v in job.items() if k not in ("cases", "mpi", "network")} for job in jobs],
              "cases": cases}
    print(markdown(result))
    mismatched = mismatches(cases)
    for c, name in mismatched:
        print(f"WARNING: P={c['P']} d={size_label(c['d'])} {name}: counted bytes/messages differ from the cost model",
              file=sys.stderr)
    failed = [job for job in jobs if job["status"] != "ok"]
    for job in failed:
        print(f"FAILED: P={job['P']}: {job['status']}", file=sys.stderr)
    print(f"total runtime {result['total_runtime_s']:.1f} s ("
          + ", ".join(f"P={job['P']}: {job['wall_s']:.1f} s" for job in jobs) + ")")
    path = Path(args.json) if args.json else args.out_dir / ("comm_quick.json" if args.quick else "comm.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"[comm] wrote {path}", file=sys.stderr)
    return 1 if failed or mismatched else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"P = 2, 4; d = 1M; {QUICK_ROUNDS} rounds, 1 retry (~30 s)")
    ap.add_argument("--P", type=int, nargs="+", help="numbers of MPI ranks (default 2 4 8)")
    ap.add_argument("--sizes", nargs="+", help="element counts, e.g. 1M 25M (M = 2**20; default 1M 25M)")
    ap.add_argument("--density", type=float, default=DENSITY, help="k = max(int(d * density), 1)")
    ap.add_argument("--cluster", default="local", help="conf/cluster/<name>.yaml whose network is modelled; with a "
                    "hostfile (cluster=testbed) the ranks run on its hosts with its mpiexec arguments")
    ap.add_argument("--rounds", type=int,
                    help=f"interleaved rounds per (P, d) (default {ROUNDS}; --quick {QUICK_ROUNDS})")
    harness.add_noise_arguments(ap)
    ap.add_argument("--items", nargs="+", choices=COLLECTIVES, default=list(DEFAULT_ITEMS),
                    help=f"which collectives to time (default: all but {', '.join(ZOO)})")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per mpiexec job before it is killed")
    ap.add_argument("--out-dir", type=Path, default=RESULTS, help="results folder (default bench/results)")
    ap.add_argument("--json", help="result file (default <out-dir>/comm.json, comm_quick.json with --quick)")
    ap.add_argument("--from-last-entry", action="store_true",
                    help="time each call from the last rank's entry to the last rank's exit (ranks on one machine: "
                         "one clock; harness.ClockShare), not as the slowest rank's duration")
    ap.add_argument("--warm-calls", type=int, default=0,
                    help="untimed calls of the same item right before each timed call (its steady state: on the "
                         "testbed the first small collective after another one's bulk traffic took 1.8x as long)")
    ap.add_argument("--idle-s", type=float, default=0.0,
                    help="seconds every rank computes (spins) before each call's barrier, sending nothing (links shaped "
                         "by a token bucket: long enough for it to refill, so that no call starts behind the previous "
                         "one's traffic)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--tree-root", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rounds is None:
        args.rounds = QUICK_ROUNDS if args.quick else ROUNDS
    problem = harness.noise_problem(args)
    args.retries = harness.noise_from_args(args, quick=args.quick).retries
    if args.worker:
        worker(args)
        return 0
    args.P = args.P or ([2, 4] if args.quick else [2, 4, 8])
    args.sizes = args.sizes or (["1M"] if args.quick else ["1M", "25M"])
    try:
        sizes = [parse_size(s) for s in args.sizes]
    except ValueError:
        sizes, problem = [], problem or (f"--sizes {' '.join(args.sizes)}: sizes are integers, optionally with K or M "
                                         "(2**10, 2**20)")
    if problem is None and any(s < 1 for s in sizes):
        problem = f"--sizes {' '.join(args.sizes)}: must be >= 1"
    elif problem is None and any(P < 1 for P in args.P):
        problem = f"--P {' '.join(map(str, args.P))}: must be >= 1"
    elif problem is None and args.rounds < 1:
        problem = f"--rounds {args.rounds}: must be >= 1"
    elif problem is None and not 0 < args.density <= 1:
        problem = f"--density {args.density}: must be in (0, 1]"
    elif problem is None and (args.warm_calls < 0 or not args.idle_s >= 0):
        problem = f"--warm-calls {args.warm_calls} --idle-s {args.idle_s}: both must be >= 0"
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
