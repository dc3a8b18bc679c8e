"""`make bench-testbed`: every scheme's collective on the 1 GbE testbed, against a model of its links and the floor.

On the hosts of `make testbed-up` (docs/testbed.md), for each P and d, bench/comm.py's MPI worker times, in
interleaved noise-measured rounds (bench/harness.py), the four aggregation collectives of the gTop-k paper
(Shi et al., ICDCS 2019, arXiv:1901.04359, Sec. III-IV) as the trainer runs them, one rank per host, btl tcp:

  * dense allreduce (ring), the Top-k and Gaussian-k allgathers (ring), gTopKAllReduce (binomial trees),
    at density 0.001 (k = max(int(d * 0.001), 1));
  * with --zoo, the zoo's race instead (docs/zoo.md): dense, Top-k AllGather ("TopkA"), TopkDSA (SparCML's
    recursive doubling), gTop-k, Ok-Topk's exact call (tau = 1) and its threshold-reuse call (the steady state
    between exact calls: one instance whose first call, untimed, is exact; every timed call reuses its global
    threshold and regions, checked by the worker), all but dense on the same exact local top-k; or any --items.

Each timed call follows an untimed one of the same collective and IDLE_MS of every host computing (its token
buckets refill), and is timed from the last rank's entry to the last rank's exit (`harness.ClockShare`: the
namespaces share one clock). Each measured time is set against three numbers, none fitted to any collective:

  * modelled: the collective's program on `ssgd.perf.shaped.ShapedLink` (the ping-pong between hosts 1 and 2,
    with full buckets, and tc's rate and burst) through `ssgd.comm.executors.thread.run_threads`, plus each rank's compute
    between its MPI calls measured in the same timed calls (`ours.run_timed`); error = modelled / measured - 1;
  * alpha-beta: `Collective.model_seconds(AlphaBeta(alpha, beta), P, d, counts)`, alpha and beta of the same
    ping-pong fitted by regime (`make alphabeta-testbed`; run first when missing, older than the testbed, or
    of another protocol); TopkDSA's is its worst case (disjoint supports), Ok-Topk's the reuse call's (balanced
    regions, nothing to move); empty for Ok-Topk's exact call, which has no closed form (NO_CLOSED_FORM);
  * floor: the bytes on the busiest link at the link's rate (the tbf rate, BW) plus the critical path's
    messages (alpha-beta's with alpha = 1, beta = 0) at the measured one-way latency (alpha); ratio = measured
    / floor; empty where alpha-beta is.

Writes <out-dir>/testbed_<BW>.csv (--zoo: testbed_<BW>_zoo; other --items: testbed_<BW>_items; one row per P,
d, collective) and .json, and prints the table and a summary (points within 15 % of the model; the largest floor
ratio of dense and gTop-k at d >= 1M). Exit status 1 when a job failed or a call's counted bytes or messages
differ from `ssgd.perf.cost`'s (bench/comm.py's `mismatches`).

    make testbed-up P=4 && make bench-testbed            # P = 2, 4; d = 0.27M 1M 4M 25M
    PYTHONPATH=src python bench/testbed_comm.py --quick       # P = 2 and the testbed's P, d = 1M, 2 rounds
    PYTHONPATH=src python bench/testbed_comm.py --P 2 4 8 16 --sizes 0.27M 25M 61M --rounds 5
    PYTHONPATH=src python bench/testbed_comm.py --zoo --P 2 4 --sizes 1000000 25000000 --rounds 5
"""
from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src"))
import comm  # noqa: E402
import harness  # noqa: E402
import machine_info as machine  # noqa: E402

TESTBED = ROOT / "outputs" / "testbed"
ITEMS = ("dense_allreduce", "topk_allgather", "gaussiank_allgather", "gtopk_allreduce")
ZOO_ITEMS = ("dense_allreduce", "topk_allgather", "topkdsa_allreduce", "gtopk_allreduce", "oktopk_allreduce",
             "oktopk_reuse")
KNOWN = ITEMS + comm.ZOO
NO_CLOSED_FORM = ("oktopk_allreduce",)      # no alpha-beta time or critical path in (P, k): those cells stay empty
WARM_EXACT = {"oktopk_reuse": 1}            # untimed calls before the modelled one: Ok-Topk's exact call
SIZES = {"0.27M": 269_722, "1M": 2**20, "4M": 4 * 2**20, "25M": 25_557_032, "61M": 61_100_840}   # ResNet-20, 50, AlexNet
IDLE_MS = 4.0          # before every ping-pong round trip and every timed call: full token buckets (2.1 ms refill them)
TOLERANCE = 0.15
FLOOR_GOAL, FLOOR_FROM_D = 1.25, 2**20
COLUMNS = ("bw", "P", "d", "k", "collective", "measured_ms", "measured_lo_ms", "measured_hi_ms", "slowest_rank_ms",
           "entry_skew_ms", "noisy", "other_cores_max", "modelled_ms", "model_error", "network_ms", "compute_ms",
           "alphabeta_ms", "alphabeta_error", "floor_ms", "ratio_to_floor", "busiest_link_bytes", "critical_messages",
           "alpha_s", "beta_s_per_byte", "link_bytes_per_s", "burst_bytes", "host_beta_s_per_byte")
BURST = "256kb"         # scripts/testbed/testbed.sh's tbf burst, where its env file does not say (older testbeds)


def check_hosts(Ps: list[int], hosts: int) -> str | None:
    """None when every P of `--P` fits the testbed's `hosts`, else the one-line problem naming them."""
    if all(2 <= p <= hosts for p in Ps):
        return None
    return f"--P {' '.join(map(str, Ps))}: the testbed has {hosts} hosts; each P must be in 2..{hosts}"


def write_results(stem: Path, rows: list[dict[str, Any]], fields: list[str] | tuple[str, ...],
                  meta: dict[str, Any], start: float) -> None:
    """Write `rows` to <stem>.csv (columns `fields`) and <stem>.json: the command line, `meta`, the rows and
    the runtime since `start` (a time.perf_counter()); print where, to stderr."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(fields))
        w.writeheader()
        w.writerows(rows)
    runtime = time.perf_counter() - start
    stem.with_suffix(".json").write_text(json.dumps(
        {"command": " ".join([f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]]), **meta, "rows": rows,
         "total_runtime_s": runtime}, indent=1) + "\n")
    print(f"[{stem.name}] wrote {stem.with_suffix('.csv')} and .json ({runtime:.0f} s)", file=sys.stderr)


def rate_bytes_per_s(bw: str) -> float:
    """A tc rate ('1gbit', '100mbit', '10gbit', '125mbps') in bytes per second (tc: bit = bits, bps = bytes)."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([kmgt]?)(bit|bps)", bw.strip().lower())
    if not m:
        raise ValueError(f"BW={bw!r}: not a tc rate such as 1gbit, 10gbit, 100mbit")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
    return float(m.group(1)) * scale / (8 if m.group(3) == "bit" else 1)


def parse_size(text: str) -> int:
    return SIZES.get(text, None) or comm.parse_size(text)


def testbed_env() -> dict[str, str]:
    env_file = TESTBED / "env"
    if not env_file.is_file():
        raise SystemExit("error: the testbed is down: run `make testbed-up P=4` (docs/testbed.md) first")
    out = dict(line.split("=", 1) for line in env_file.read_text().split() if "=" in line)
    if subprocess.run([str(ROOT / "scripts" / "testbed" / "testbed.sh"), "status"], capture_output=True).returncode:
        raise SystemExit("error: the testbed is not healthy (`make testbed-status`): run `make testbed-down` and "
                         "`make testbed-up`")
    return out


def calibrated(refit: bool) -> dict[str, Any]:
    """alpha, beta of the ping-pong between hosts 1 and 2 (outputs/testbed/pingpong.json), measured now when
    missing, older than the testbed, or when `refit`."""
    points, env_file = TESTBED / "pingpong.json", TESTBED / "env"
    stale = not points.is_file() or points.stat().st_mtime < env_file.stat().st_mtime \
        or json.loads(points.read_text()).get("idle_ms") != IDLE_MS          # another protocol (older files: none)
    if refit or stale:
        print("[testbed] alpha/beta: ping-pong between hosts 1 and 2 (make alphabeta-testbed, ~1 min)",
              file=sys.stderr, flush=True)
        argv = [sys.executable, "-m", "ssgd.tools.calibrate", "--from-cluster", "testbed", "--name", "testbed",
                "--out", str(TESTBED / "alphabeta.yaml"), "--fit", "regimes", "--points", str(points), "--idle-ms",
                repr(IDLE_MS), "--force"]
        if subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL).returncode:
            raise SystemExit("error: the ping-pong (make alphabeta-testbed) failed")
    return json.loads(points.read_text())


def collective(name: str) -> Any:
    """A fresh collective of KNOWN's `name`, as bench/comm.py's worker times it."""
    from ssgd.comm.collectives.allgather import SparseAllgather
    from ssgd.comm.collectives.dense import DenseAllreduce
    from ssgd.comm.collectives.gtopk import GTopKAllreduce

    if name in comm.ZOO:
        return comm.zoo_collective(name)
    return {"dense_allreduce": DenseAllreduce, "topk_allgather": SparseAllgather,
            "gaussiank_allgather": SparseAllgather, "gtopk_allreduce": GTopKAllreduce}[name]()


def check_items(names: list[str]) -> str | None:
    """None when every name of `--items` is a KNOWN collective, named once, else the one-line problem."""
    bad = [n for n in names if n not in KNOWN]
    if bad:
        return f"--items {' '.join(bad)}: unknown; choose from {', '.join(KNOWN)}"
    if len(set(names)) != len(names):
        return f"--items {' '.join(names)}: each collective at most once"
    return None


def size_bytes(size: str) -> float:
    """A tc size ('256kb', '1mb', '32kbit', '1500') in bytes (tc: b = bytes, bit = bits; k, m, g = 1024^n)."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([kmg]?)(b|bit|)", size.strip().lower())
    if not m:
        raise ValueError(f"burst {size!r}: not a tc size such as 256kb")
    scale = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[m.group(2)]
    return float(m.group(1)) * scale / (8 if m.group(3) == "bit" else 1)


def shaped_link(fit: dict[str, Any], bw: str, burst: str = BURST) -> Any:
    """The testbed's links as `ssgd.perf.shaped.ShapedLink`: the ping-pong (full buckets) and tc's rate and burst."""
    from ssgd.perf.shaped import ShapedLink

    return ShapedLink.from_pingpong(fit["nbytes"], fit["seconds"], size_bytes(burst), rate_bytes_per_s(bw))


def model_ms(name: str, given: list[Any], link: Any, compute: list[list[float]]) -> tuple[float, float]:
    """(modelled ms, of it the network's) of one call: the collective's real program (`prepared`) run in this
    process on the modelled links (`ssgd.comm.executors.thread.run_threads(net=link)`) with every rank's payload
    `given`, and `compute`,
    each rank's measured compute between its MPI calls (the medians over the timed calls of bench/comm.py's
    worker)."""
    import torch

    from ssgd.comm.executors.thread import run_threads

    torch.set_num_threads(1)
    _, logs = run_threads(prepared(name, given), given, net=link, compute=compute)
    total = max(log.clock for log in logs)
    _, logs = run_threads(prepared(name, given), given, net=link)
    return 1e3 * total, 1e3 * max(log.clock for log in logs)


def prepared(name: str, given: list[Any]) -> Any:
    """A fresh collective `name` in the state of its timed calls: after WARM_EXACT's untimed calls on `given`."""
    from ssgd.comm.executors.thread import run_threads

    coll = collective(name)
    for _ in range(WARM_EXACT.get(name, 0)):
        run_threads(coll, given)
    return coll


def scaled(x: float | None, by: float) -> float | None:
    """x * by; None stays None (a cell without a model)."""
    return None if x is None else x * by


def rows_of(case: dict[str, Any], bw: str, fit: dict[str, Any], burst: str = BURST) -> list[dict[str, Any]]:
    """One CSV row per collective of one (P, d) case of bench/comm.py's worker, on links of tc rate `bw` and burst."""
    from ssgd.perf.alphabeta import AlphaBeta

    net, unit = AlphaBeta(fit["alpha"], fit["beta"]), AlphaBeta(1.0, 0.0)
    link = shaped_link(fit, bw, burst)
    rate = rate_bytes_per_s(bw)
    s = harness.Series.from_json(case["series"])
    other = [r.other_cores for r in s.rounds]
    given = [comm.payloads(case["d"], rank, comm.DENSITY) for rank in range(case["P"])]   # the worker's inputs
    rows = []
    for name in s.names:
        counted = case["counted"][name]
        coll, P, d, counts = collective(name), case["P"], case["d"], counted["entries_by_rank"]
        sp = s.spread(name)
        modelled, network = model_ms(name, [g[name] for g in given], link, case["compute_s"][name])
        busiest = max(counted["bytes_by_rank_measured"])
        alphabeta = messages = floor = None
        if name not in NO_CLOSED_FORM:
            alphabeta = coll.model_seconds(net, P, d, counts)
            messages = round(coll.model_seconds(unit, P, d, counts))    # alpha = 1, beta = 0: the message count
            floor = busiest / rate + messages * net.alpha
        rows.append({"bw": bw, "P": P, "d": d, "k": case["k"], "collective": name, "measured_ms": 1e3 * sp.median,
                     "measured_lo_ms": 1e3 * sp.lo, "measured_hi_ms": 1e3 * sp.hi,
                     "slowest_rank_ms": 1e3 * case["slowest_s"][name], "entry_skew_ms": 1e3 * case["skew_s"][name],
                     "noisy": s.noisy,
                     "other_cores_max": max((o for o in other if o is not None), default=None),
                     "modelled_ms": modelled, "model_error": modelled / (1e3 * sp.median) - 1,
                     "network_ms": network, "compute_ms": modelled - network, "alphabeta_ms": scaled(alphabeta, 1e3),
                     "alphabeta_error": None if alphabeta is None else alphabeta / sp.median - 1,
                     "floor_ms": scaled(floor, 1e3), "ratio_to_floor": None if floor is None else sp.median / floor,
                     "busiest_link_bytes": busiest, "critical_messages": messages,
                     "alpha_s": net.alpha, "beta_s_per_byte": net.beta, "link_bytes_per_s": rate,
                     "burst_bytes": link.burst, "host_beta_s_per_byte": link.host_beta})
    return rows


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The rows as a markdown table; "-" where a collective has no closed form (alpha-beta, floor)."""
    out = ["| BW | P | d | collective | measured ms, median [min-max] | modelled ms (network + compute) | model error "
           "| alpha-beta ms (error) | floor ms | measured / floor |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        m = harness.mark(r["noisy"])
        ab = "-" if r["alphabeta_ms"] is None else \
            f"{harness.fmt_num(r['alphabeta_ms'])} ({r['alphabeta_error']:+.0%})"
        floor = "- | -" if r["floor_ms"] is None else f"{harness.fmt_num(r['floor_ms'])} | {r['ratio_to_floor']:.2f}{m}"
        out.append(f"| {r['bw']} | {r['P']} | {comm.size_label(r['d'])} | {comm.LABELS[r['collective']]} "
                   f"| {harness.fmt_num(r['measured_ms'])} [{harness.fmt_num(r['measured_lo_ms'])}-"
                   f"{harness.fmt_num(r['measured_hi_ms'])}]{m} | {harness.fmt_num(r['modelled_ms'])} "
                   f"({harness.fmt_num(r['network_ms'])} + {harness.fmt_num(r['compute_ms'])}) "
                   f"| {r['model_error']:+.0%}{m} | {ab} | {floor} |")
    return out


def summary(rows: list[dict[str, Any]]) -> list[str]:
    within = [r for r in rows if abs(r["model_error"]) <= TOLERANCE]
    big = [r for r in rows if r["collective"] in ("dense_allreduce", "gtopk_allreduce") and r["d"] >= FLOOR_FROM_D]
    worst = max(big, key=lambda r: r["ratio_to_floor"], default=None)
    noisy = sum(1 for r in rows if r["noisy"] is not False)
    alphabeta = sum(r["alphabeta_error"] is not None and abs(r["alphabeta_error"]) <= TOLERANCE for r in rows)
    out = [f"model within {TOLERANCE:.0%} of the measurement: {len(within)} of {len(rows)} (P, d, collective) points, "
           "every one held out: the network modelled from the ping-pong and tc's burst (ssgd.perf.shaped), each rank's "
           f"compute between its MPI calls measured in the same calls; the alpha-beta model: {alphabeta} of {len(rows)}"]
    for name in dict.fromkeys(r["collective"] for r in rows):
        mine = [r for r in rows if r["collective"] == name]
        if mine:
            errs = sorted(r["model_error"] for r in mine)
            out.append(f"  {comm.LABELS[name]}: {sum(abs(e) <= TOLERANCE for e in errs)} of {len(mine)} within; "
                       f"error from {errs[0]:+.0%} to {errs[-1]:+.0%}")
    if worst:
        ok = sum(r["ratio_to_floor"] <= FLOOR_GOAL for r in big)
        out.append(f"measured / floor, dense and gTop-k at d >= 1M: at most {worst['ratio_to_floor']:.2f} "
                   f"(P={worst['P']}, d={comm.size_label(worst['d'])}, {comm.LABELS[worst['collective']]}); "
                   f"{ok} of {len(big)} within the goal {FLOOR_GOAL}")
    if noisy:
        out.append(f"{noisy} of {len(rows)} points were measured while other processes used more than the noise "
                   "threshold: marked (noisy), upper bounds")
    return out


def parser() -> argparse.ArgumentParser:
    """The command line of the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="P = 2 and the testbed's P, d = 1M, 2 rounds (~1 min)")
    ap.add_argument("--P", type=int, nargs="+", help="hosts per job (default: 2, 4, 8, ... up to the testbed's P)")
    ap.add_argument("--sizes", nargs="+", help="d: 0.27M (ResNet-20), 1M, 4M, 25M (ResNet-50), 61M (AlexNet), or any "
                    "count with K/M (default 0.27M 1M 4M 25M)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds per (P, d) (default 3; --quick 2)")
    ap.add_argument("--warm-calls", type=int, default=1,
                    help="untimed calls of the same collective right before each timed one (default %(default)s)")
    ap.add_argument("--idle-ms", type=float, default=IDLE_MS,
                    help="ms every host computes (spins) after the warm call, before each timed call: its token buckets "
                         "refill, as during a training step's compute (default %(default)s; 2.1 ms refill them at 1gbit)")
    ap.add_argument("--refit", action="store_true", help="measure alpha/beta again even when a fresh fit exists")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--zoo", action="store_true", help=f"time the zoo's race: {' '.join(ZOO_ITEMS)} (docs/zoo.md)")
    which.add_argument("--items", nargs="+", metavar="NAME",
                       help=f"the collectives to time, of {' '.join(KNOWN)} (default {' '.join(ITEMS)})")
    ap.add_argument("--out-dir", type=Path, default=comm.RESULTS, help="results folder (default bench/results)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per mpiexec job before it is killed")
    harness.add_noise_arguments(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring): 2 with a one-line error for bad arguments, checked before the testbed
    (except --P, checked against its hosts); else `measure`'s status."""
    args = parser().parse_args(argv)
    args.items = list(ZOO_ITEMS if args.zoo else args.items or ITEMS)
    problem = harness.noise_problem(args) or check_items(args.items)
    try:
        sizes = [parse_size(s) for s in (args.sizes or (["1M"] if args.quick else ["0.27M", "1M", "4M", "25M"]))]
    except ValueError:
        sizes, problem = [], problem or f"--sizes {' '.join(args.sizes)}: sizes are 0.27M, 1M, 4M, 25M, 61M or " \
                                        "integers with K or M"
    if problem is None and any(s < 1 for s in sizes):
        problem = "--sizes: must be >= 1"
    if problem is None and (args.warm_calls < 0 or not args.idle_ms >= 0):
        problem = f"--warm-calls {args.warm_calls} --idle-ms {args.idle_ms}: both must be >= 0"
    if problem is None:
        env = testbed_env()
        hosts = int(env["SSGD_TESTBED_P"])
        default_P = sorted({p for p in (2, 4, 8, 16, 32, 64) if p <= hosts} | {hosts})
        Ps = args.P or (sorted({2, hosts}) if args.quick else default_P)
        problem = check_hosts(Ps, hosts)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return measure(args, sizes, Ps, env)


def results_stem(out_dir: Path, bw: str, items: list[str], quick: bool) -> Path:
    """Where the results go (module docstring): testbed_<bw>[_zoo | _items][_quick] under `out_dir`."""
    kind = "" if list(items) == list(ITEMS) else "_zoo" if list(items) == list(ZOO_ITEMS) else "_items"
    return out_dir / f"testbed_{bw}{kind}{'_quick' if quick else ''}"


def status(jobs: list[dict[str, Any]]) -> int:
    """1 (each reason printed to stderr) when a job failed or a counted call differs from `ssgd.perf.cost`; else 0."""
    failed = [j for j in jobs if j["status"] != "ok"]
    for j in failed:
        print(f"FAILED: P={j['P']}: {j['status']}", file=sys.stderr)
    mismatched = comm.mismatches([c for j in jobs for c in j.get("cases", [])])
    for c, name in mismatched:
        print(f"FAILED: P={c['P']} d={comm.size_label(c['d'])} {name}: counted bytes/messages differ from "
              "ssgd.perf.cost's", file=sys.stderr)
    return 1 if failed or mismatched else 0


def measure(args: argparse.Namespace, sizes: list[int], Ps: list[int], env: dict[str, str]) -> int:
    """One mpiexec job per P over the testbed's hosts, the table and summary, the results files; `status`."""
    hosts, bw, burst = int(env["SSGD_TESTBED_P"]), env["SSGD_TESTBED_BW"], env.get("SSGD_TESTBED_BURST", BURST)
    rounds = args.rounds or (2 if args.quick else 3)
    fit = calibrated(args.refit)
    print(f"[testbed] {hosts} hosts on {bw}; alpha = {fit['alpha'] * 1e6:.1f} us, beta = {fit['beta']:.4g} s/B "
          f"({1 / fit['beta'] / 1e6:.1f} MB/s; link {rate_bytes_per_s(bw) / 1e6:.1f} MB/s)", file=sys.stderr)
    job_args = argparse.Namespace(sizes=[str(s) for s in sizes], density=comm.DENSITY, cluster="testbed",
                                  rounds=rounds, retries=harness.noise_from_args(args, quick=args.quick).retries,
                                  noise_threshold=args.noise_threshold, min_round_s=args.min_round_s,
                                  timeout=args.timeout, items=args.items, from_last_entry=True,
                                  idle_s=args.idle_ms / 1e3, warm_calls=args.warm_calls)
    start, rows, jobs = time.perf_counter(), [], []
    with tempfile.TemporaryDirectory(prefix="ssgd-bench-testbed-") as tmp:
        for P in Ps:
            print(f"[testbed] P={P}: d = {', '.join(comm.size_label(s) for s in sizes)}, {rounds} rounds",
                  file=sys.stderr, flush=True)
            job = comm.run_job(P, job_args, Path(tmp))
            rss = job.get("peak_rss_bytes_by_rank")
            print(f"[testbed] P={P}: {job['status']}, {job['wall_s']:.1f} s"
                  + (f", peak RSS per host up to {max(rss) / 2**30:.2f} GiB" if rss else ""), file=sys.stderr)
            jobs.append(job)
            rows += [row for case in job["cases"] for row in rows_of(case, bw, fit, burst)]
    rows.sort(key=lambda r: (r["d"], r["P"], args.items.index(r["collective"])))
    print("\n".join(table(rows)) + "\n")
    print("\n".join(summary(rows)))
    write_results(results_stem(args.out_dir, bw, args.items, args.quick), rows, COLUMNS,
                  {"testbed": {"hosts": hosts, "bw": bw, "burst": burst}, "items": args.items,
                   "fit": {k: fit[k] for k in ("alpha", "beta", "fit")}, "machine": machine.describe(),
                   "jobs": [{k: v for k, v in j.items() if k != "cases"} for j in jobs]}, start)
    return status(jobs)


if __name__ == "__main__":
    sys.exit(main())
