"""`make bench-testbed-simgrid`: SimGrid's prediction of every collective on the testbed, beside the measurement,
the token-bucket model and alpha-beta, on points held out of SimGrid's calibration (docs/simgrid-validation.md).

Three steps, each its own command (the first two need the testbed, `make testbed-up P=4 BW=...`):

  1. --measure: for each (P, d), one bench/testbed_comm.py job (the four collectives of the gTop-k paper,
     interleaved rounds, timed from the last rank's entry), with /proc/loadavg read before and after it;
     the rows go to <dir>/measured_<BW>.json.
  2. make simgrid-calibrate (ssgd.tools.simgrid_calibrate): the platform from the ping-pong and the dense
     allreduce at P = 2, d = 4M of step 1 -> outputs/testbed/simgrid_<BW>.yaml.
  3. --measured FILE --platform YAML --csv OUT: every measured point run again, the same collective program
     with the same payloads (bench/comm.py's `payloads`), through `ssgd.comm.executors.simgrid.run_simgrid` on the
     fitted platform, in a subprocess of its own per platform (SimGrid: one platform per process), with each
     rank's CPU measured and charged to its own simulated host (`cpu="measured"`) and without it
     (`cpu="none"`, the network alone). Rows of other bandwidths already in OUT are kept.

    make testbed-up P=4 BW=1gbit && make bench-testbed-simgrid          # steps 1-3 for the testbed's BW
    PYTHONPATH=src python bench/testbed_simgrid.py --measured outputs/testbed/validation/measured_1gbit.json \
        --platform outputs/testbed/simgrid_1gbit.yaml --csv docs/data/simgrid_validation.csv

A point is network-bound (`network_bound`) when the testbed measures its link, not its hosts:
  * the link is at most 1 Gbit/s (at 10 Gbit the hosts' own copies through the veth pair are as slow as the
    link: docs/testbed.md measures 1.01 GB/s at best, and the dense ring paced by its copies and sums);
  * the busiest link carries at least BURSTS x tc's burst, so the bucket's rate, not its burst (which passes
    at the host's copying speed, a term SimGrid has no place for), sets the transfer;
  * the ranks' measured compute between their MPI calls is at most COMPUTE_SHARE of the token-bucket model's
    network time (the testbed's 2 cores are shared by all ranks and by other users' processes).
"""
from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src"))

VALIDATION = ROOT / "outputs" / "testbed" / "validation"
SIZES = ("0.27M", "1M", "4M", "6.5M", "25M", "61M")
CALIBRATION_D = 4 * 2**20           # the dense allreduce at P = 2 fitted by make simgrid-calibrate
BURSTS, COMPUTE_SHARE, MAX_NETWORK_GBPS = 4.0, 0.10, 1.0
GOAL, BETTER_FROM = 0.15, 0.05
CSV_COLUMNS = ("collective", "P", "d", "bandwidth", "measured_s", "simgrid_s", "simgrid_network_s", "token_bucket_s",
               "alphabeta_s", "network_bound", "load_average", "simgrid_ratio", "token_bucket_ratio",
               "alphabeta_ratio", "calibration", "noisy", "other_cores_max", "compute_s", "token_bucket_network_s",
               "busiest_link_bytes", "burst_bytes", "link_bytes_per_s")


def loadavg() -> str:
    """/proc/loadavg's three load averages ('1.20 0.95 0.80'), or '' where there is none."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return ""


def network_bound(link_bytes_per_s: float, busiest_link_bytes: float, burst_bytes: float, compute_s: float,
                  network_s: float) -> bool:
    """Whether a point measures the link rather than the hosts (module docstring): the link's rate, the bytes on
    its busiest link, tc's burst (payload bytes), the ranks' measured compute and the token-bucket model's network
    time of the call."""
    return (link_bytes_per_s * 8 / 1e9 <= MAX_NETWORK_GBPS and busiest_link_bytes >= BURSTS * burst_bytes
            and compute_s <= COMPUTE_SHARE * network_s)


def measure(args: argparse.Namespace) -> int:
    """Step 1 (module docstring): one testbed_comm.py job per (P, d); rows with the load averages around it."""
    import testbed_comm

    env = testbed_comm.testbed_env()
    bw, rows = env["SSGD_TESTBED_BW"], []
    with tempfile.TemporaryDirectory(prefix="ssgd-testbed-simgrid-") as tmp:
        for P in args.P:
            for size in args.sizes:
                before = loadavg()
                argv = [sys.executable, str(HERE / "testbed_comm.py"), "--P", str(P), "--sizes", size, "--rounds",
                        str(args.rounds), "--out-dir", tmp]
                argv += [] if args.retries is None else ["--retries", str(args.retries)]
                if subprocess.run(argv, cwd=ROOT).returncode:
                    print(f"error: bench/testbed_comm.py --P {P} --sizes {size} failed", file=sys.stderr)
                    return 1
                got = json.loads((Path(tmp) / f"testbed_{bw}.json").read_text())["rows"]
                rows += [{**r, "load_before": before, "load_after": loadavg()} for r in got]
    out = args.out_dir / f"measured_{bw}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"bw": bw, "command": " ".join(sys.argv), "rows": rows}, indent=1) + "\n")
    print(f"wrote {out} ({len(rows)} rows)")
    return 0


def predict_worker(platform_yaml: Path, points_json: Path, out_json: Path) -> int:
    """In its own process (one SimGrid platform per process): every point of `points_json` ([collective, P, d])
    through run_simgrid on the platform, CPU charged and not; {"collective,P,d": [seconds, network seconds]}."""
    import torch

    import comm
    import testbed_comm
    from ssgd.comm.executors.simgrid import run_simgrid
    from ssgd.tools.simgrid_calibrate import load_platform

    torch.set_num_threads(1)
    points = json.loads(points_json.read_text())
    platform = load_platform(platform_yaml, hosts=max(p[1] for p in points))
    out: dict[str, list[float]] = {}
    for P, d in sorted({(p[1], p[2]) for p in points}):
        given = [comm.payloads(d, rank, comm.DENSITY) for rank in range(P)]
        for name in [p[0] for p in points if (p[1], p[2]) == (P, d)]:
            payloads = [g[name] for g in given]
            times = []
            for cpu in ("measured", "none"):
                _, logs = run_simgrid(testbed_comm.collective(name), payloads, platform, cpu=cpu)
                times.append(max(log.clock for log in logs))
            out[f"{name},{P},{d}"] = times
            print(f"[simgrid] {name} P={P} d={d}: {times[0] * 1e3:.3f} ms ({times[1] * 1e3:.3f} ms network)",
                  file=sys.stderr, flush=True)
        del given
    out_json.write_text(json.dumps(out) + "\n")
    return 0


def predictions(platform_yaml: Path, rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    """predict_worker's answer for `rows`, run in a subprocess of its own."""
    with tempfile.TemporaryDirectory(prefix="ssgd-simgrid-predict-") as tmp:
        points, out = Path(tmp) / "points.json", Path(tmp) / "out.json"
        points.write_text(json.dumps([[r["collective"], r["P"], r["d"]] for r in rows]))
        argv = [sys.executable, str(Path(__file__).resolve()), "--predict-worker", str(platform_yaml), str(points),
                str(out)]
        if subprocess.run(argv, cwd=ROOT).returncode or not out.is_file():
            raise SystemExit(f"error: the SimGrid predictions on {platform_yaml} failed")
        return json.loads(out.read_text())


def csv_row(r: dict[str, Any], sim: list[float]) -> dict[str, Any]:
    """One CSV row of bench/testbed_comm.py's row `r` (with its load averages) and SimGrid's [seconds, network]."""
    measured = r["measured_ms"] / 1e3
    return {"collective": r["collective"], "P": r["P"], "d": r["d"], "bandwidth": r["bw"], "measured_s": measured,
            "simgrid_s": sim[0], "simgrid_network_s": sim[1], "token_bucket_s": r["modelled_ms"] / 1e3,
            "alphabeta_s": r["alphabeta_ms"] / 1e3,
            "network_bound": network_bound(r["link_bytes_per_s"], r["busiest_link_bytes"], r["burst_bytes"],
                                           r["compute_ms"] / 1e3, r["network_ms"] / 1e3),
            "load_average": f"{r.get('load_before', '')} -> {r.get('load_after', '')}",
            "simgrid_ratio": sim[0] / measured, "token_bucket_ratio": r["modelled_ms"] / r["measured_ms"],
            "alphabeta_ratio": r["alphabeta_ms"] / r["measured_ms"],
            "calibration": r["collective"] == "dense_allreduce" and r["P"] == 2 and r["d"] == CALIBRATION_D,
            "noisy": r["noisy"], "other_cores_max": r["other_cores_max"], "compute_s": r["compute_ms"] / 1e3,
            "token_bucket_network_s": r["network_ms"] / 1e3, "busiest_link_bytes": r["busiest_link_bytes"],
            "burst_bytes": r["burst_bytes"], "link_bytes_per_s": r["link_bytes_per_s"]}


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write `rows` to `path`, keeping the rows of other bandwidths already there; sorted by bandwidth, P, d."""
    mine = {r["bandwidth"] for r in rows}
    kept = []
    if path.is_file():
        with open(path, newline="") as f:
            kept = [r for r in csv.DictReader(f) if r["bandwidth"] not in mine]
    order = ("dense_allreduce", "topk_allgather", "gaussiank_allgather", "gtopk_allreduce")
    every = sorted(kept + rows, key=lambda r: (r["bandwidth"], int(r["P"]), int(r["d"]), order.index(r["collective"])))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(CSV_COLUMNS))
        w.writeheader()
        for r in every:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    print(f"wrote {path} ({len(every)} rows)")


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The rows as a Markdown table (docs/simgrid-validation.md): ms and each model's ratio to the measurement."""
    out = ["| BW | P | d | collective | network-bound | measured ms | SimGrid ms (/ measured) | token bucket | "
           "alpha-beta | load average (1, 5, 15 min) before -> after |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mark = " (fitted)" if r["calibration"] else ""
        out.append(f"| {r['bandwidth']} | {r['P']} | {r['d']:,} | {r['collective']} | "
                   f"{'yes' if r['network_bound'] else 'no'}{mark} | {1e3 * r['measured_s']:.4g} | "
                   f"{1e3 * r['simgrid_s']:.4g} ({r['simgrid_ratio']:.2f}) | {r['token_bucket_ratio']:.2f} | "
                   f"{r['alphabeta_ratio']:.2f} | {r['load_average']} |")
    return out


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """The goal's verdict (docs/simgrid-validation.md) over the held-out network-bound rows, and the misses."""
    held = [r for r in rows if r["network_bound"] and not r["calibration"]]
    within = [r for r in held if abs(r["simgrid_ratio"] - 1) <= GOAL]
    differ = [r for r in held if abs(r["simgrid_s"] / r["alphabeta_s"] - 1) > BETTER_FROM]
    better = [r for r in differ if abs(r["simgrid_ratio"] - 1) < abs(r["alphabeta_ratio"] - 1)]
    out = [f"SimGrid within {GOAL:.0%} of the measurement: {len(within)} of {len(held)} held-out network-bound points; "
           f"better than alpha-beta at {len(better)} of the {len(differ)} where the two differ by > {BETTER_FROM:.0%}"]
    for r in held:
        if r not in within:
            out.append(f"  miss: {r['bandwidth']} P={r['P']} d={r['d']} {r['collective']}: SimGrid / measured = "
                       f"{r['simgrid_ratio']:.3f} (token bucket {r['token_bucket_ratio']:.3f}, alpha-beta "
                       f"{r['alphabeta_ratio']:.3f})")
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--measure", action="store_true", help="step 1: measure on the testbed (module docstring)")
    ap.add_argument("--P", type=int, nargs="+", default=[2, 4], help="hosts per job (default 2 4)")
    ap.add_argument("--sizes", nargs="+", default=list(SIZES), help=f"d (default {' '.join(SIZES)})")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per (P, d) (default %(default)s)")
    ap.add_argument("--retries", type=int, help="repeats of a noisy round (bench/harness.py; default its own)")
    ap.add_argument("--out-dir", type=Path, default=VALIDATION, help="where --measure writes (default %(default)s)")
    ap.add_argument("--measured", type=Path, nargs="+", default=[], help="step 3: --measure's files, one per BW")
    ap.add_argument("--platform", type=Path, nargs="+", default=[], help="step 3: the fitted platform of each")
    ap.add_argument("--csv", type=Path, default=ROOT / "docs" / "data" / "simgrid_validation.csv",
                    help="step 3: the CSV to write (default %(default)s)")
    ap.add_argument("--predict-worker", nargs=3, type=Path, help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.predict_worker:
        return predict_worker(*args.predict_worker)
    if args.measure:
        return measure(args)
    if not args.measured or len(args.measured) != len(args.platform):
        print(f"error: --measured ({len(args.measured)} files) and --platform ({len(args.platform)}) must pair up, "
              "one per bandwidth (or pass --measure)", file=sys.stderr)
        return 2
    missing = [f"--{flag} {path}" for flag, paths in (("measured", args.measured), ("platform", args.platform))
               for path in paths if not path.is_file()]
    if missing:
        print(f"error: {missing[0]}: no such file (--measure and make simgrid-calibrate write them)", file=sys.stderr)
        return 2
    rows = []
    for measured, platform in zip(args.measured, args.platform):
        got = json.loads(measured.read_text())["rows"]
        sim = predictions(platform, got)
        rows += [csv_row(r, sim[f"{r['collective']},{r['P']},{r['d']}"]) for r in got]
    write_csv(args.csv, rows)
    print("\n".join(table(rows)) + "\n")
    print("\n".join(summary(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
