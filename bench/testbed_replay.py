"""`make bench-testbed-replay`: the gTop-k paper's scaling efficiency, measured on the testbed's links.

Each run is the real trainer (`backend=mpi cluster=testbed`, one rank per testbed host) with `model=replay`
(`ssgd.models.Replay`): the paper model's layer sizes, its per-layer GPU compute replayed by sleeping, real
gradients of d floats handed to the real compressor and collective, over the tbf-shaped links. Five paper
models x dense / Top-k / gTop-k x P (Shi et al., ICDCS 2019, arXiv:1901.04359, scaling efficiency on
32 x 1 GbE; P is limited by this machine's cores and memory: docs/testbed.md).

Per run, the median over the measured steps (the first `--warmup` excluded) of the trainer's logged
compute, compress, comm and update times, and three scaling efficiencies eff(P) = t_single / t_iter(P),
t_single the profile's single-worker step (`ssgd.perf.iteration`):

  * ``eff_testbed``: t_iter = the profile's compute and selection + the measured communication: the paper's
    GPU workers with this testbed's network (the figure's measured points). The communication is the
    SLOWEST rank's, `time/comm_max_s` (the most any rank spent in it), where the run logged it, else
    `time/comm_s`: t_iter is the slowest rank's step, as in the SimGrid replay (`ssgd.tools.simgrid_replay`).
    On this machine that time also holds a rank's wait for the other ranks' CPU selection (4 ranks on
    2 cores), so it is an upper bound of the network's share;
  * ``eff_raw``: t_iter = the measured step, this machine's CPU selection and update included;
  * ``eff_model``: the alpha-beta model with the testbed's ping-pong alpha/beta (outputs/testbed/pingpong.json).

Writes <out-dir>/testbed_replay_<BW>.csv (one row per run) and .json; `make fig-scaling` draws the
eff_testbed points beside the model and the paper when the CSV is there.

    make testbed-up P=4 && make bench-testbed-replay        # 5 models x 3 schemes x P = 2, 4, 7 steps
    PYTHONPATH=src python bench/testbed_replay.py --profiles resnet20 resnet50 --P 4 --steps 10
    PYTHONPATH=src python bench/testbed_replay.py --schemes oktopk topkdsa   # the zoo's other two (docs/zoo.md)
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import testbed_comm as testbed  # noqa: E402
import testbed_e2e as e2e  # noqa: E402

PROFILES = ("resnet20", "vgg16", "alexnet", "resnet50", "lstm_ptb")
SCHEMES = e2e.SCHEMES                       # --schemes' choices: the zoo's five
PAPER_SCHEMES = ("dense", "topk", "gtopk")   # the default: the paper's three curves (docs/zoo.md runs the other two)
TIMES = ("compute", "compress", "comm", "update", "step")
SPLIT = ("comm_min", "comm_max")   # the least / most any rank spent in the collective: its own cost / with the wait


def overrides(profile: str, batch_size: int) -> list[str]:
    """The replay run's overrides on top of bench/testbed_e2e.py's (scheme, P, seed, steps)."""
    return ["model=replay", f"model.profile={profile}", "dataset=synthetic_cifar10", f"trainer.batch_size={batch_size}",
            "compressor.density_warmup=[]", "trainer.log_every=1", "trainer.eval_every=1000"]


def step_medians(records: list[dict[str, Any]], warmup: int) -> dict[str, float]:
    """Median over the steps after `warmup` of each time/<part>_s (TIMES, and SPLIT where every step logged it), in
    seconds; ValueError if none is left."""
    steps = [r for r in records if "time/step_s" in r and r["step"] > warmup]
    if not steps:
        raise ValueError(f"no logged step after the {warmup} warm-up steps")
    parts = [*TIMES, *(part for part in SPLIT if all(f"time/{part}_s" in r for r in steps))]
    return {part: statistics.median(r[f"time/{part}_s"] for r in steps) for part in parts} | {"n": len(steps)}


def efficiencies(profile: Any, scheme: str, P: int, measured: dict[str, float], net: Any) -> dict[str, float]:
    """eff_testbed, eff_raw, eff_model (module docstring) of one run."""
    from ssgd.perf.iteration import iteration_time
    from ssgd.tools import scheme_costs as schemes

    model = iteration_time(profile, schemes.scheme(scheme, profile.d), net, P)
    single = profile.single_worker_seconds()
    own = measured.get("comm_max", measured["comm"])          # the slowest rank's (module docstring)
    return {"eff_testbed": single / (model.total_s - model.comm_s + own),
            "eff_raw": single / measured["step"], "eff_model": single / model.total_s,
            "comm_model_ms": 1e3 * model.comm_s, "single_ms": 1e3 * single,
            "compute_profile_ms": 1e3 * model.compute_s, "select_profile_ms": 1e3 * model.compress_s}


def paper_point(profile: str, scheme: str, P: int) -> float | None:
    """The gTop-k paper's scaling efficiency of `scheme` at P; None where it has none (another P, or a scheme after
    the paper: Ok-Topk, TopkDSA)."""
    from ssgd.perf.paper import P_SCALING, SCALING_SCHEMES, paper_model

    if P not in P_SCALING or scheme not in SCALING_SCHEMES:
        return None
    return float(list(paper_model(profile).efficiency(scheme))[list(P_SCALING).index(P)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profiles", nargs="+", choices=PROFILES, default=list(PROFILES))
    ap.add_argument("--schemes", nargs="+", choices=SCHEMES, default=list(PAPER_SCHEMES))
    ap.add_argument("--P", type=int, nargs="+", help="hosts per run (default 2 and the testbed's P)")
    ap.add_argument("--steps", type=int, default=7, help="trainer.max_steps per run (default 7)")
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out of the medians (default 2)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run before it is stopped")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    env = testbed.testbed_env()
    hosts, bw = int(env["SSGD_TESTBED_P"]), env["SSGD_TESTBED_BW"]
    Ps = args.P or sorted({2, hosts})
    problem = testbed.check_hosts(Ps, hosts)
    if problem is None and not 0 <= args.warmup < args.steps:
        problem = f"--warmup {args.warmup}: must be in 0..{args.steps - 1} (--steps {args.steps})"
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from ssgd.perf import profiles
    from ssgd.perf.alphabeta import AlphaBeta

    fit = testbed.calibrated(refit=False)
    net = AlphaBeta(fit["alpha"], fit["beta"])
    start, rows = time.perf_counter(), []
    plan = [(name, P, scheme) for name in args.profiles for P in Ps for scheme in args.schemes]
    with tempfile.TemporaryDirectory(prefix="ssgd-testbed-replay-") as tmp:
        for i, (name, P, scheme) in enumerate(plan, 1):
            prof = profiles.load(name)
            run_dir = Path(tmp) / f"{name}-P{P}-{scheme}"
            t0 = time.perf_counter()
            status = e2e.run_one(run_dir, P, scheme, 1, args.steps, args.timeout,
                                 extra=overrides(name, prof.batch_size))
            row: dict[str, Any] = {"bw": bw, "profile": name, "d": prof.d, "P": P, "scheme": scheme,
                                   "steps": args.steps, "warmup": args.warmup, "status": status,
                                   "paper_eff": paper_point(name, scheme, P)}
            if status == "ok":
                try:
                    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                               if line.strip()]
                    med = step_medians(records, args.warmup)
                except (OSError, ValueError) as err:
                    row["status"] = f"unreadable metrics: {err}"
                else:
                    row.update({f"{part}_ms": 1e3 * med[part] for part in (*TIMES, *SPLIT) if part in med},
                               measured_steps=med["n"])
                    row.update(efficiencies(prof, scheme, P, med, net))
            rows.append(row)
            print(f"[replay] {i}/{len(plan)} {name} P={P} {scheme}: {row['status']}"
                  + (f", comm {row.get('comm_min_ms', row['comm_ms']):.0f} ms (rank 0 {row['comm_ms']:.0f}, model "
                     f"{row['comm_model_ms']:.0f}), eff {row['eff_testbed']:.3f}"
                     if "comm_ms" in row else "") + f", {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    print("\n".join(table(rows)))
    fields = sorted({k for r in rows for k in r}, key=lambda k: (k not in ("bw", "profile", "P", "scheme"), k))
    testbed.write_results(args.out_dir / f"testbed_replay_{bw}", rows, fields,
                          {"testbed": {"hosts": hosts, "bw": bw}, "alpha_s": net.alpha, "beta_s_per_byte": net.beta},
                          start)
    return 1 if any(r["status"] != "ok" for r in rows) else 0


def table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| model | P | scheme | comm ms: own / rank 0 / model | eff testbed | eff model | eff paper | eff raw (CPU) |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "comm_ms" not in r:
            out.append(f"| {r['profile']} | {r['P']} | {r['scheme']} | {r['status']} | | | | |")
            continue
        paper = "-" if r["paper_eff"] is None else f"{r['paper_eff']:.3f}"
        own = f"{r['comm_min_ms']:.1f}" if "comm_min_ms" in r else "-"
        out.append(f"| {r['profile']} | {r['P']} | {r['scheme']} | {own} / {r['comm_ms']:.1f} / {r['comm_model_ms']:.1f} "
                   f"| {r['eff_testbed']:.3f} | {r['eff_model']:.3f} | {paper} | {r['eff_raw']:.3f} |")
    return out


if __name__ == "__main__":
    sys.exit(main())
