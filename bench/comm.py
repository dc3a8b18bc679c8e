"""Time per call of the four aggregation collectives on real MPI ranks, against the alpha-beta model.

For P MPI ranks on this machine (oversubscribed when P > cores) and d float32 elements at density
0.001 (k = max(int(d * 0.001), 1)), every rank builds its own u = randn(d) (seed = rank) and its
payloads once, then runs `ssgd.comm.mpi.run_mpi` of

  * dense allreduce           `DenseAllreduce`,  payload u (float32 [d]);
  * Top-k AllGather           `SparseAllgather`, payload `select_topk(u, k)` (exactly k entries);
  * gTopKAllReduce            `GTopKAllreduce`,  the same top-k payload;
  * Gaussian-k AllGather      `SparseAllgather`, payload `GaussianK().compress(u, 0.001)` (|payload|
                              varies per rank).

Measured: one warm-up call, then `reps` calls (20 for d <= 4M, 10 above), each after a barrier; per rank the median
time of a call (payload selection is NOT included: only the collective, i.e. packing, messages and
the sparse sums / top-k merges it does), reported as the max over ranks (the slowest rank bounds the
step). Fewer reps when a call is slow (slowest warm-up x reps over --budget = 5 s; at least 1).
Modelled: `collective.model_seconds(AlphaBeta(alpha, beta), P, d, counts)` with the network of
`conf/cluster/<--cluster>.yaml` (default `local`: this machine) and counts = entries per rank.
Bytes per rank: counted by the MPI executor (max over ranks) vs `ssgd.perf.cost` (max over ranks).

The script is both driver and worker. The driver (default; never imports mpi4py's MPI) runs, for
each P, `mpiexec -n P python -m mpi4py bench/comm.py --worker --out <tmp json>` under a timeout,
prints a markdown table and writes rows + machine description to bench/results/comm.json
(`--quick`: bench/results/comm_quick.json, so a quick check does not overwrite the full run).

    .venv/bin/python bench/comm.py               # P = 2, 4, 8; d = 1M, 25M   (~4 min on 2 cores)
    .venv/bin/python bench/comm.py --quick       # P = 2, 4;    d = 1M        (~15 s)
    .venv/bin/python bench/comm.py --P 2 4 8 --sizes 1M 25M

Do not run it next to other work: on 2 cores a busy neighbour inflates every time.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DENSITY = 0.001
MiB_ELEMS = 2**20
BUSY_WARNING = 0.25        # warn when this share of the CPUs is busy before a job starts
COLLECTIVES = ("dense_allreduce", "topk_allgather", "gtopk_allreduce", "gaussiank_allgather")
LABELS = {"dense_allreduce": "dense allreduce", "topk_allgather": "Top-k AllGather",
          "gtopk_allreduce": "gTopKAllReduce", "gaussiank_allgather": "Gaussian-k AllGather"}


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


def default_reps(d: int) -> int:
    """Timed calls per case before the --budget cut: 20 for d <= 4M elements, 10 above (sparse calls
    take milliseconds and are noisy on 2 shared cores; slow dense calls are cut by the budget)."""
    return 20 if d <= 4 * MiB_ELEMS else 10


# ----------------------------------------------------------------------------------------------
# worker: one MPI rank (started by the driver through mpiexec)
# ----------------------------------------------------------------------------------------------
def peak_rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024      # KiB on Linux


def worker(out: Path, sizes: list[int], density: float, cluster: str, budget: float) -> None:
    """Measure every collective at every size on this rank; rank 0 writes the rows as JSON."""
    import mpi4py
    import torch
    from mpi4py import MPI
    from omegaconf import OmegaConf

    from ssgd.comm.allgather import SparseAllgather
    from ssgd.comm.base import Collective, Payload
    from ssgd.comm.dense import DenseAllreduce
    from ssgd.comm.gtopk import GTopKAllreduce
    from ssgd.comm.mpi import run_mpi
    from ssgd.compress.gaussiank import GaussianK
    from ssgd.compress.sparse import k_of, select_topk
    from ssgd.perf import cost
    from ssgd.perf.alphabeta import AlphaBeta

    comm = MPI.COMM_WORLD
    rank, P = comm.Get_rank(), comm.Get_size()
    network = OmegaConf.load(ROOT / "conf" / "cluster" / f"{cluster}.yaml").network
    net = AlphaBeta(float(network.alpha), float(network.beta))

    def one_call(coll: Collective, payload: Payload) -> tuple[float, int, int]:
        """Barrier, one call; (seconds on this rank, bytes sent, messages sent). Result dropped."""
        comm.Barrier()
        t0 = time.perf_counter()
        reduced, log = run_mpi(coll, payload, comm)
        seconds = time.perf_counter() - t0
        del reduced
        return seconds, log.stats.bytes, log.stats.messages

    def measure(name: str, coll: Collective, payload: Payload, d: int, k: int, reps: int) -> dict[str, Any]:
        n = d if name == "dense_allreduce" else len(payload)
        counts: list[int] = comm.allgather(n)
        warm, sent_bytes, sent_msgs = one_call(coll, payload)
        slowest_warm = comm.allreduce(warm, op=MPI.MAX)
        reps = max(1, min(reps, int(budget / max(slowest_warm, 1e-9))))     # same on every rank
        times = []
        for _ in range(reps):
            seconds, b, m = one_call(coll, payload)
            times.append(seconds)
            if (b, m) != (sent_bytes, sent_msgs):
                raise RuntimeError(f"{name}: counted bytes/messages changed between calls")
        if name == "dense_allreduce":
            modelled = cost.allreduce_sent(rank, P, d)
        elif name == "gtopk_allreduce":
            modelled = cost.gtopk_sent(rank, P, k)
        else:
            modelled = cost.allgatherv_sent(rank, [cost.SPARSE_ENTRY_BYTES * c for c in counts])
        mine = {"median_s": statistics.median(times), "min_s": min(times), "warmup_s": warm,
                "bytes": sent_bytes, "messages": sent_msgs, "bytes_model": modelled[1],
                "messages_model": modelled[0]}
        every = comm.gather(mine, root=0)
        if rank != 0:
            return {}
        row = {
            "P": P, "d": d, "k": k, "density": density, "collective": name, "reps": reps,
            "time_per_call_s": max(r["median_s"] for r in every),
            "time_per_call_rank_medians_s": [r["median_s"] for r in every],
            "warmup_s_max": max(r["warmup_s"] for r in every),
            "modelled_s": coll.model_seconds(net, P, d, counts),
            "bytes_per_rank_measured": max(r["bytes"] for r in every),
            "bytes_per_rank_modelled": max(r["bytes_model"] for r in every),
            "bytes_by_rank_measured": [r["bytes"] for r in every],
            "bytes_by_rank_modelled": [r["bytes_model"] for r in every],
            "messages_by_rank_measured": [r["messages"] for r in every],
            "messages_by_rank_modelled": [r["messages_model"] for r in every],
            "entries_by_rank": counts,
        }
        if name == "gaussiank_allgather":
            row["achieved_density_by_rank"] = [c / d for c in counts]
            row["achieved_density"] = sum(counts) / (P * d)
        print(f"[comm] P={P} d={size_label(d)} {name}: {1e3 * row['time_per_call_s']:.2f} ms/call "
              f"(reps {reps})", file=sys.stderr, flush=True)
        return row

    rows = []
    for d in sizes:
        k = k_of(d, density)
        u = torch.randn(d, generator=torch.Generator().manual_seed(rank))
        topk = select_topk(u, k)
        gaussk = GaussianK().compress(u, density)
        cases: list[tuple[str, Collective, Payload]] = [
            ("dense_allreduce", DenseAllreduce(), u), ("topk_allgather", SparseAllgather(), topk),
            ("gtopk_allreduce", GTopKAllreduce(), topk), ("gaussiank_allgather", SparseAllgather(), gaussk)]
        for name, coll, payload in cases:
            row = measure(name, coll, payload, d, k, default_reps(d))
            if row:
                rows.append(row)
        del u, topk, gaussk, cases, payload

    rss = comm.gather(peak_rss_bytes(), root=0)
    if rank == 0:
        machine = {"mpi_library": MPI.Get_library_version().strip("\x00 \n"),
                   "mpi_standard": "%d.%d" % MPI.Get_version(), "mpi4py": mpi4py.__version__, "torch": torch.__version__,
                   "torch_threads_per_rank": torch.get_num_threads()}
        job = {"P": P, "network": {"cluster": cluster, "alpha": net.alpha, "beta": net.beta},
               "peak_rss_bytes_by_rank": rss, "machine": machine, "rows": rows}
        out.write_text(json.dumps(job, indent=1) + "\n")


# ----------------------------------------------------------------------------------------------
# driver: no MPI in this process
# ----------------------------------------------------------------------------------------------
def mem_available_bytes() -> int | None:
    """MemAvailable of /proc/meminfo, or None where there is none."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def cpu_busy_fraction(seconds: float = 0.5) -> float | None:
    """Share of all CPUs busy (not idle/iowait) over `seconds` before a job: other work on the
    machine, which inflates every time measured here. None where there is no /proc/stat."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
        return sum(ticks[:8]), ticks[3] + ticks[4]          # total (without guest), idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return 1.0 - (idle1 - idle0) / max(total1 - total0, 1)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_job(P: int, sizes: list[int], args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One `mpiexec -n P` job of this script's worker; returns its JSON plus wall time and memory.

    On timeout the job's process group gets SIGTERM (mpiexec then stops its ranks), SIGKILL after
    10 s; the job is reported as failed, the other P still run.
    """
    from ssgd.launch import mpiexec_path, worker_env

    out = tmp / f"comm_P{P}.json"
    argv = [mpiexec_path(), "-n", str(P), sys.executable, "-m", "mpi4py", str(Path(__file__).resolve()),
            "--worker", "--out", str(out), "--sizes", *map(str, sizes), "--density", repr(args.density),
            "--cluster", args.cluster, "--budget", repr(args.budget)]
    busy = cpu_busy_fraction()
    if busy is not None and busy > BUSY_WARNING:
        print(f"[comm] WARNING: {100 * busy:.0f} % of the CPUs were busy before P={P} started: "
              "the times below are inflated", file=sys.stderr, flush=True)
    base = mem_available_bytes()
    low = base
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=worker_env(local=True), cwd=ROOT, start_new_session=True)
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
        now = mem_available_bytes()
        if now is not None and low is not None:
            low = min(low, now)
    wall = time.perf_counter() - t0
    job: dict[str, Any] = {"P": P, "status": status, "wall_s": wall, "cpu_busy_before": busy, "rows": []}
    if status == "ok":
        job.update(json.loads(out.read_text()))
    if base is not None and low is not None:
        job["memory_used_peak_bytes"] = base - low      # drop of MemAvailable while the job ran
    return job


def fmt_ms(seconds: float) -> str:
    ms = 1e3 * seconds
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def table(rows: list[dict[str, Any]], cluster: str) -> str:
    lines = [f"| P | d | collective | time per call (ms) | modelled on `{cluster}` (ms) | bytes/rank measured "
             "| bytes/rank modelled | achieved density (Gaussian-k) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        dens = f"{r['achieved_density']:.6f}" if "achieved_density" in r else ""
        lines.append(f"| {r['P']} | {size_label(r['d'])} | {LABELS[r['collective']]} | {fmt_ms(r['time_per_call_s'])} "
                     f"| {fmt_ms(r['modelled_s'])} | {r['bytes_per_rank_measured']:,} | {r['bytes_per_rank_modelled']:,} "
                     f"| {dens} |")
    return "\n".join(lines)


def driver(args: argparse.Namespace) -> int:
    Ps = args.P or ([2, 4] if args.quick else [2, 4, 8])
    sizes = [parse_size(s) for s in args.sizes] if args.sizes else ([MiB_ELEMS] if args.quick else
                                                                     [MiB_ELEMS, 25 * MiB_ELEMS])
    t0 = time.perf_counter()
    jobs = []
    with tempfile.TemporaryDirectory(prefix="ssgd-bench-comm-") as tmp:
        for P in Ps:
            job = run_job(P, sizes, args, Path(tmp))
            mem, rss = job.get("memory_used_peak_bytes"), job.get("peak_rss_bytes_by_rank")
            print(f"[comm] P={P}: {job['status']}, {job['wall_s']:.1f} s"
                  + (f", MemAvailable dropped by up to {mem / 2**30:.2f} GiB" if mem is not None else "")
                  + (f", peak RSS summed over ranks {sum(rss) / 2**30:.2f} GiB" if rss else ""),
                  file=sys.stderr, flush=True)
            jobs.append(job)
    total = time.perf_counter() - t0
    rows = [r for job in jobs for r in job["rows"]]
    order = {c: i for i, c in enumerate(COLLECTIVES)}
    rows.sort(key=lambda r: (r["d"], r["P"], order[r["collective"]]))
    print(table(rows, args.cluster))
    mismatched = [r for r in rows if r["bytes_by_rank_measured"] != r["bytes_by_rank_modelled"]
                  or r["messages_by_rank_measured"] != r["messages_by_rank_modelled"]]
    for r in mismatched:
        print(f"WARNING: P={r['P']} d={size_label(r['d'])} {r['collective']}: counted bytes/messages "
              "differ from the cost model", file=sys.stderr)
    failed = [job for job in jobs if job["status"] != "ok"]
    for job in failed:
        print(f"FAILED: P={job['P']}: {job['status']}", file=sys.stderr)
    per_job = ", ".join(f"P={job['P']}: {job['wall_s']:.1f} s" for job in jobs)
    print(f"\ntotal runtime {total:.1f} s ({per_job})")

    first = next((job for job in jobs if "machine" in job), {})
    machine = {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
               "platform": platform.platform(), **first.get("machine", {})}
    result = {"command": " ".join(["bench/comm.py", *sys.argv[1:]]), "quick": args.quick, "density": args.density,
              "network": first.get("network"), "total_runtime_s": total, "machine": machine,
              "jobs": [{k: v for k, v in job.items() if k not in ("rows", "machine", "network")} for job in jobs],
              "rows": rows}
    path = Path(args.json) if args.json else RESULTS / ("comm_quick.json" if args.quick else "comm.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", file=sys.stderr)
    return 1 if failed or mismatched else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="only d = 1M and P = 2, 4 (well under a minute)")
    ap.add_argument("--P", type=int, nargs="+", help="numbers of MPI ranks (default 2 4 8)")
    ap.add_argument("--sizes", nargs="+", help="element counts, e.g. 1M 25M (M = 2**20; default 1M 25M)")
    ap.add_argument("--density", type=float, default=DENSITY, help="k = max(int(d * density), 1)")
    ap.add_argument("--cluster", default="local", help="conf/cluster/<name>.yaml whose network is modelled")
    ap.add_argument("--budget", type=float, default=5.0,
                    help="seconds per case: reps are lowered so that reps x warm-up stays under it")
    ap.add_argument("--timeout", type=float, default=480.0, help="seconds per mpiexec job before it is killed")
    ap.add_argument("--json", help="result file (default bench/results/comm.json, comm_quick.json with --quick)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        if args.out is None or not args.sizes:
            ap.error("--worker needs --out and --sizes")
        worker(args.out, [parse_size(s) for s in args.sizes], args.density, args.cluster, args.budget)
        return 0
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
