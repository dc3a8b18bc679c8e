"""FSDP2 step time and reduce-scatter bytes on the testbed's shaped links: FSDP's own reduce-scatter against
`ssgd.fsdp`'s compressed ones (dense16, Top-k, Ok-Topk), one gloo rank per testbed host (docs/testbed.md).

Each job trains an MLP 784-2048-2048-10 (d = 5,824,522 parameters, 23.3 MB in fp32: large enough that its
reduce-scatter is tens of milliseconds on 1 Gbit/s) on random inputs, every Linear and the whole model
`fully_shard`-ed (parameters re-gathered in the backward, FSDP's default), SGD with momentum, 32 samples per
rank and step. A step is timed from a `dist.barrier()` to the end of `opt.step()` on every rank, the slowest
rank's time counts; the median over the timed steps (after the warm-up ones) is the job's. The jobs of one
P run interleaved in rounds (none, dense16, topk, ..., none, dense16, ...), each a fresh process group.
Only the gradient reduce-scatter is compressed: FSDP's two parameter all-gathers per step stay fp32.

    make testbed-up P=4 && PYTHONPATH=src python bench/fsdp_testbed.py            # P = 2, 4; ~6 min
    PYTHONPATH=src python bench/fsdp_testbed.py --P 2 --rounds 1 --steps 10       # a quick look

Prints a table and writes <out-dir>/fsdp_testbed_<BW>.json. Times MEASURED on the testbed (its hosts share this
machine's cores: the selection and the Python exchange measure the shared CPU too; the load average is printed).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import ddp as ddp_bench  # noqa: E402  (the testbed's hosts, read as the DDP benchmark reads them)
import harness  # noqa: E402
MODES = {"none": ("none", None), "dense16": ("dense16", None), "topk 0.01": ("topk", 0.01),
         "topk 0.001": ("topk", 0.001), "oktopk 0.01": ("oktopk", 0.01)}
WIDTH, BATCH, PORT = 2048, 32, 29571


def rank_main(mode: str, steps: int, warmup: int) -> None:
    """One rank of one job (env RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); rank 0 prints one JSON line."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn
    from torch.distributed.fsdp import fully_shard

    sys.path.insert(0, str(ROOT / "src"))
    import ssgd.fsdp

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, P = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 10))
    d = sum(p.numel() for p in model.parameters())
    scheme, density = MODES[mode]
    comms = []
    for module in [m for m in model if isinstance(m, nn.Linear)] + [model]:
        fully_shard(module)
        if scheme != "none":
            given = {} if density is None else {"density": density}     # dense16 has no density
            comms.append(ssgd.fsdp.compress_reduce_scatter(module, scheme, **given))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(rank)
    x, y = torch.randn(BATCH, 784, generator=gen), torch.randint(0, 10, (BATCH,), generator=gen)
    times = []
    for _ in range(warmup + steps):
        dist.barrier()
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    slowest = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    sent = sum(c.log.stats.bytes for c in comms)
    if rank == 0:
        print(json.dumps({"mode": mode, "P": P, "d": d, "step_s": statistics.median(slowest[warmup:].tolist()),
                          "rs_bytes_per_step": sent / (warmup + steps) if comms else None}), flush=True)
    dist.destroy_process_group()


def job(mode: str, P: int, steps: int, warmup: int, timeout: float, testbed: tuple[list[str], str, str],
        tmp: Path) -> dict[str, Any]:
    """One job on the testbed's first P hosts, each rank entered through its agent (`remote_command`, the lab's
    own multi-host launch); rank 0's record, or {'error': ...}."""
    from ssgd.run.launch_torch import remote_command

    hosts, agent, _ = testbed
    argv = [sys.executable, str(Path(__file__).resolve()), "--rank", mode, "--steps", str(steps), "--warmup", str(warmup)]
    procs, logs = [], [tmp / f"rank{r}.txt" for r in range(P)]
    for r in range(P):
        env = {"RANK": str(r), "WORLD_SIZE": str(P), "MASTER_ADDR": hosts[0], "MASTER_PORT": str(PORT),
               "PYTHONPATH": str(ROOT / "src")}
        with logs[r].open("w") as log:
            procs.append(subprocess.Popen(remote_command(agent, hosts[r], env, argv), cwd=ROOT, stdout=log,
                                          stderr=subprocess.STDOUT, text=True))
    status = harness.wait_ranks(procs, timeout, time.perf_counter())
    if status != "ok":
        bad = next((r for r, p in enumerate(procs) if p.returncode), 0)
        return {"error": f"{status} (rank {bad}: {logs[bad].read_text().strip()[-300:]})"}
    return json.loads(logs[0].read_text().strip().splitlines()[-1])


def table(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown: per P and mode, median [min-max] step ms over rounds, and reduce-scatter bytes vs FSDP's own."""
    out = ["| P | reduce-scatter | step ms, median [min-max] over rounds | vs FSDP's own | reduce-scatter bytes "
           "per step, rank 0 |", "|---|---|---|---|---|"]
    for P in sorted({r["P"] for r in rows}):
        base = [r["step_s"] for r in rows if r["P"] == P and r["mode"] == "none"]
        for mode in MODES:
            mine = [r for r in rows if r["P"] == P and r["mode"] == mode]
            if not mine:
                continue
            t = [1e3 * r["step_s"] for r in mine]
            ratio = f"{statistics.median(t) / (1e3 * statistics.median(base)):.2f}x" if base else "-"
            own = 4 * mine[0]["d"] * (P - 1) / P        # a ring reduce-scatter of d fp32 values: (P - 1)/P x 4 d bytes
            sent = mine[0]["rs_bytes_per_step"]
            rs = f"{own:,.0f} (computed)" if sent is None else f"{sent:,.0f}"
            out.append(f"| {P} | {mode} | {statistics.median(t):.1f} [{min(t):.1f}-{max(t):.1f}] | {ratio} | {rs} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--P", type=int, nargs="+", help="hosts per job (default 2 and the testbed's P)")
    ap.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per job (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed first steps per job (default 3)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per job")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--rank", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rank:
        rank_main(args.rank, args.steps, args.warmup)
        return 0
    testbed = ddp_bench.testbed_hosts()
    Ps = args.P or sorted({2, 2 if isinstance(testbed, str) else len(testbed[0])})
    problem = "--P: at least 2 hosts per job" if min(Ps) < 2 else ddp_bench.testbed_problem(Ps, testbed)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    bw = testbed[2]
    rows, load0 = [], os.getloadavg()[0]
    for P in Ps:
        for rnd in range(args.rounds):
            for mode in args.modes:
                with tempfile.TemporaryDirectory(prefix="fsdp-testbed-") as tmp:
                    rec = job(mode, P, args.steps, args.warmup, args.timeout, testbed, Path(tmp))
                if "error" in rec:
                    print(f"error: P={P} {mode}: {rec['error']}", file=sys.stderr)
                    return 1
                rows.append({**rec, "round": rnd})
                print(f"[fsdp-testbed] P={P} round {rnd + 1}/{args.rounds} {mode}: {1e3 * rec['step_s']:.1f} ms "
                      f"(load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
    lines = table(rows) + [f"\n{bw} links, load average {load0:.1f} at the start, "
                           f"{os.getloadavg()[0]:.1f} at the end (MEASURED)"]
    print("\n".join(lines))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"fsdp_testbed_{bw}.json"
    out.write_text(json.dumps({"bw": bw, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
