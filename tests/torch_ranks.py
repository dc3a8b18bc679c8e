"""Run a function on P real torch.distributed ranks: forked processes joined in a gloo (or NCCL) group.

    results = run_ranks(3, fn, args, timeout=60)     # fn(rank, P, *args) in each rank, results in rank order

Forking (not spawning) keeps the ranks cheap: they inherit this process's imported torch instead of
importing it again (about 1.6 s each). CUDA does not survive a fork, so GPU tests pass start="spawn"
(`fn` must then be importable: a function of a module under tests/). Each rank sets one intra-op thread, joins the group at
tcp://127.0.0.1:<free port>, runs `fn`, sends back its picklable result (convert tensors to numpy or
lists first) or its traceback, and leaves with os._exit (no pytest teardown in a child). If the ranks
are not all done within `timeout` seconds, every rank is killed and the test fails, naming the ranks
that had not answered; a rank that raised fails the test with its traceback.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import socket
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, P: int, port: int, backend: str, fn: Callable, args: tuple, out: Any) -> None:
    status = 0
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=P,
                                timeout=timedelta(seconds=60),
                                device_id=torch.device("cuda", rank) if backend == "nccl" else None)
        try:
            out.put((rank, True, fn(rank, P, *args)))
        finally:
            dist.destroy_process_group()
    except BaseException:
        out.put((rank, False, traceback.format_exc()))
        status = 1
    finally:
        out.close()
        out.join_thread()       # the queue's feeder thread must deliver the result before os._exit
        os._exit(status)


def run_ranks(P: int, fn: Callable, args: tuple = (), timeout: float = 60, backend: str = "gloo",
              start: str = "fork") -> list:
    """fn(rank, P, *args) on P ranks of one process group (`backend`: gloo, or nccl with rank r on cuda:r),
    started by `start` (fork, or spawn for CUDA); their results in rank order."""
    if start == "fork":
        warm_up()
    ctx = mp.get_context(start)
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, P, port, backend, fn, args, out), daemon=True) for r in range(P)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    errors: dict[int, str] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) + len(errors) < P:
            try:
                rank, ok, value = out.get(timeout=min(0.5, max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                dead = [(r, p.exitcode) for r, p in enumerate(procs)
                        if p.exitcode is not None and r not in results and r not in errors]
                if dead:
                    pytest.fail(f"torch.distributed rank {dead[0][0]} of P={P} died without a result "
                                f"(exit code {dead[0][1]})")
                if time.monotonic() >= deadline:
                    missing = sorted(set(range(P)) - set(results) - set(errors))
                    pytest.fail(f"torch.distributed ranks {missing} of P={P} did not finish within {timeout:.0f} s"
                                + "".join(f"\nrank {r} failed:\n{e}" for r, e in errors.items()))
                continue
            (results if ok else errors)[rank] = value
            if errors:
                break       # the others may wait forever on the failed rank
    finally:
        for p in procs:
            p.join(timeout=5 if not errors else 0.5)
            if p.is_alive():
                p.kill()
                p.join()
    if errors:
        rank, err = min(errors.items())
        pytest.fail(f"rank {rank} of P={P} failed:\n{err}")
    return [results[r] for r in range(P)]


def warm_up() -> None:
    """Import, in this process, what the ranks would each import on their first optimizer step and DDP
    model (torch.optim's first step loads torch._dynamo: seconds per process), so forked ranks inherit it."""
    import torch
    import torch.nn.parallel  # noqa: F401

    p = torch.nn.Parameter(torch.zeros(1))
    p.grad = torch.zeros(1)
    torch.optim.SGD([p], lr=0.1, momentum=0.9).step()
