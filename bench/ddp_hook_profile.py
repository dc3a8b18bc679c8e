"""Where one training step of the `ssgd.ddp` hook spends its time, beside plain DDP allreduce and a no-op hook.

    torchrun --standalone --nproc-per-node 2 bench/ddp_hook_profile.py                 # 3 rounds of 60 steps
    torchrun --standalone --nproc-per-node 2 bench/ddp_hook_profile.py --rounds 6 --hooks allreduce gtopk

A user's loop, as issue 45 timed it: 2 gloo ranks (one intra-op thread each), MLP 784-512-512-10 (d = 669,706) on
the embedded MNIST digits (`mnist_embedded`, normalised), batch 32, SGD with momentum. Each step is `dist.barrier()`,
then forward, backward and `opt.step()` timed; a round takes --steps steps of each model in turn (interleaved), the
step time is the median of steps 5 to the end. Models: `allreduce` (DDP without a hook), `noop` (a hook that returns
the bucket as it is: the compute alone), `gtopk` / `topk` (`ssgd.ddp.register`, asynchronous, DDP's default buckets)
and `gtopk_blocking`; `fsdp` (FSDP2, every Linear and the whole model `fully_shard`-ed) and `fsdp_topk` (the same
with `ssgd.fsdp`'s Top-k reduce-scatter at --density), each fsdp* step beside plain `fsdp`'s.

For the hook, rank 0 prints per round the milliseconds per step spent in each part, summed over buckets, measured
by wrapping the hook's own functions (the same code runs; the wrappers add two clock reads each):
  queue_wait_bN  from the hook call (DDP hands bucket N over) to the communication thread starting on it;
  compress       u = g + e and the selection (`RankCompression.compress`);
  collective_bN  the collective program on torch.distributed, bucket N (sends, receives, merges, waiting for
                 the peer);
  settle         e = u - what counted as sent (`RankCompression.settle`);
  decode         the sparse average written into DDP's bucket (`_Bucket.decode_into`);
and per model fwd / bwd / opt, the medians of the three parts of the step (bwd includes DDP's wait for the hook's
futures), with the 1-minute load average at the end. Per model and round rank 0 also prints the CPU each of its
threads used per step (`cpu ms per step`, from /proc/self/task/*/schedstat over the whole round): `main` (forward,
backward, the optimizer), `comm` (the hook's communication thread), `gloo` (gloo's own threads) and `other`.
CPU time does not count waiting, so it stays meaningful on a busy machine where the step times do not.
"""
from __future__ import annotations

import argparse
import collections
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))   # run from a checkout
import ssgd.ddp as hook_module  # noqa: E402
from ssgd.loop.sync import RankCompression  # noqa: E402

HOOKS = ("allreduce", "noop", "gtopk", "topk", "gtopk_blocking", "fsdp", "fsdp_topk")
SPENT: dict[str, list[float]] = collections.defaultdict(list)   # part -> seconds, one entry per call
HANDED: collections.deque = collections.deque()                  # hook-call times of buckets not yet started


def timed(name: str, fn: Callable) -> Callable:
    """`fn`, adding each call's seconds to SPENT[name]."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT[name].append(time.perf_counter() - t0)
    return wrapper


def instrument(buckets_per_step: int) -> None:
    """Wrap the hook's parts (module docstring); bucket N of a step is the call's number modulo buckets_per_step."""
    RankCompression.compress = timed("compress", RankCompression.compress)
    RankCompression.settle = timed("settle", RankCompression.settle)
    hook_module._Bucket.decode_into = timed("decode", hook_module._Bucket.decode_into)
    hook_module.run_torch = timed("collective", hook_module.run_torch)
    reduce, call, calls = hook_module.SparseHook._reduce, hook_module.SparseHook.__call__, [0]

    def reduce_timed(self: Any, job: Any) -> None:
        n, calls[0] = calls[0] % buckets_per_step, calls[0] + 1
        SPENT[f"queue_wait_b{n}"].append(time.perf_counter() - HANDED.popleft())
        before = len(SPENT["collective"])
        reduce(self, job)
        SPENT[f"collective_b{n}"].append(SPENT["collective"][before])

    def call_timed(self: Any, bucket: Any) -> Any:
        HANDED.append(time.perf_counter())
        return call(self, bucket)

    hook_module.SparseHook._reduce, hook_module.SparseHook.__call__ = reduce_timed, call_timed


def thread_cpu_ns() -> dict[int, tuple[str, int]]:
    """This process's threads: native id -> (name, nanoseconds on a CPU so far), from /proc/self/task."""
    out = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            out[int(task.name)] = ((task / "comm").read_text().strip(), int((task / "schedstat").read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            continue                                  # a thread that ended meanwhile
    return out


def cpu_per_step(before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]], steps: int, main: int,
                 comm: set[int]) -> dict[str, float]:
    """Milliseconds of CPU per step between two `thread_cpu_ns` snapshots, by kind of thread: `main` (native id
    `main`), `comm` (ids in `comm`), `gloo` (threads whose name starts with gloo or pt_gloo), `other`. A thread that
    started in between counts from zero; one that ended in between is not seen (its CPU is lost, not misassigned)."""
    spent = {"main": 0.0, "comm": 0.0, "gloo": 0.0, "other": 0.0}
    for tid, (name, ns) in after.items():
        kind = ("main" if tid == main else "comm" if tid in comm
                else "gloo" if name.startswith(("gloo", "pt_gloo")) else "other")
        spent[kind] += (ns - before.get(tid, (name, 0))[1]) / 1e6 / steps
    return spent


def noop(state, bucket):            # unannotated: DDP compares the annotations, and this module's are strings
    """The bucket as it is: what a step costs without communication."""
    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


def mlp() -> nn.Module:
    """784-512-512-10: d = 669,706."""
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10))


def build_fsdp(name: str, net: nn.Module, density: float) -> dict[str, Any]:
    """`net` with every Linear and the whole model `fully_shard`-ed; `fsdp_topk`: each with `ssgd.fsdp`'s Top-k
    reduce-scatter at `density` (examples/fsdp_topk.py's two lines)."""
    from torch.distributed.fsdp import fully_shard

    import ssgd.fsdp

    for module in [m for m in net if isinstance(m, nn.Linear)] + [net]:
        fully_shard(module)
        if name == "fsdp_topk":
            ssgd.fsdp.compress_reduce_scatter(module, "topk", density)
    return {"model": net, "opt": torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9), "state": None}


def build(name: str, init: dict, density: float) -> dict[str, Any]:
    """The DDP (or FSDP2, names fsdp*) model of `name` from the weights `init`, with its optimizer and hook state."""
    net = mlp()
    net.load_state_dict(init)
    if name.startswith("fsdp"):
        return build_fsdp(name, net, density)
    model, state = nn.parallel.DistributedDataParallel(net), None
    if name == "noop":
        model.register_comm_hook(None, noop)
    elif name != "allreduce":
        state = hook_module.register(model, name.split("_")[0], density, overlap=not name.endswith("blocking"))
    return {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), "state": state}


def one_round(m: dict[str, Any], x: torch.Tensor, y: torch.Tensor, gen: torch.Generator, steps: int) -> list[tuple]:
    """`steps` timed steps of one model: (total, fwd, bwd, opt) seconds of steps 5 on."""
    out = []
    for s in range(steps):
        pick = torch.randint(len(y), (32,), generator=gen)
        dist.barrier()
        t0 = time.perf_counter()
        loss = F.cross_entropy(m["model"](x[pick]), y[pick])
        t1 = time.perf_counter()
        m["opt"].zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        m["opt"].step()
        t3 = time.perf_counter()
        if s >= 5:
            out.append((t3 - t0, t1 - t0, t2 - t1, t3 - t2))
    return out


def report(name: str, r: int, rows: list[tuple], steps: int, base: float | None) -> float:
    """Print rank 0's line for one model and round (beside `base`: plain DDP's step, or plain FSDP's for fsdp_*);
    returns its median step."""
    total, fwd, bwd, opt = (statistics.median(c) for c in zip(*rows))
    ratio = f", {total / base:.2f}x {'fsdp' if name.startswith('fsdp') else 'allreduce'}" if base else ""
    parts = ", ".join(f"{k} {1e3 * sum(v) / steps:.2f}" for k, v in sorted(SPENT.items()) if k != "collective")
    print(f"round {r} {name}: step {1e3 * total:.2f} ms{ratio} (fwd {1e3 * fwd:.2f} / bwd {1e3 * bwd:.2f} / "
          f"opt {1e3 * opt:.2f})" + (f"; hook ms per step: {parts}" if SPENT else ""), flush=True)
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hooks", nargs="+", default=["allreduce", "gtopk", "noop"], choices=HOOKS)
    ap.add_argument("--density", type=float, default=0.01, help="k / d per bucket (default 0.01, as make bench-ddp)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60, help="steps per model and round; steps 5 on are timed")
    args = ap.parse_args(argv)
    if args.steps <= 5 or args.rounds < 1 or not 0 < args.density <= 1:
        ap.error(f"--steps {args.steps} --rounds {args.rounds} --density {args.density}: need steps > 5, rounds >= 1, "
                 "density in (0, 1]")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    from ssgd.data.embedded import mnist_embedded

    data = mnist_embedded(val_size=1000, seed=0)
    torch.manual_seed(0)
    init = mlp().state_dict()
    instrument(buckets_per_step=2)                     # DDP's default buckets split this MLP in two
    models = {name: build(name, init, args.density) for name in args.hooks}
    gen = torch.Generator().manual_seed(dist.get_rank())
    for r in range(args.rounds):
        base: dict[str, float] = {}
        for name, m in models.items():
            SPENT.clear()
            before = thread_cpu_ns()
            rows = one_round(m, data.x_train, data.y_train, gen, args.steps)
            comm = {t.native_id for t in threading.enumerate() if t.name == "ssgd-ddp-comm"}
            cpu = cpu_per_step(before, thread_cpu_ns(), args.steps, threading.main_thread().native_id, comm)
            family = "fsdp" if name.startswith("fsdp") else "allreduce"
            if dist.get_rank() == 0:
                t = report(name, r, rows, args.steps, base.get(family))
                base[family] = t if name == family else base.get(family)
                print(f"round {r} {name}: cpu ms per step: " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items()),
                      flush=True)
    if dist.get_rank() == 0:
        print("load average (1, 5, 15 min):", " ".join(Path("/proc/loadavg").read_text().split()[:3]), flush=True)
    for m in models.values():
        if m["state"] is not None:
            m["state"].close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
