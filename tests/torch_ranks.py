"""Run a function on P real torch.distributed ranks: forked processes joined in a gloo (or NCCL) group.

    results = run_ranks(3, fn, args, timeout=60)     # fn(rank, P, *args) in each rank, results in rank order

The ranks are forked by a fork server (multiprocessing's "forkserver"): a fresh single-threaded interpreter that
imports torch and the package once (tests/rank_preload.py), so each rank is cheap (no 1.6 s torch import) and
inherits no thread state from pytest (forking pytest itself after an in-process training can leave a rank stuck on
a lock held by a thread that no longer exists). The server never initialises CUDA, so GPU ranks start the same
way. `fn` must be importable: a module-level function of a module under tests/. Each rank sets one intra-op thread, joins the group at
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
from pathlib import Path
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
            dist.barrier()          # leave gloo together: an early teardown can abort a peer (std::terminate)
        finally:
            dist.destroy_process_group()
    except BaseException:
        out.put((rank, False, traceback.format_exc()))
        status = 1
    finally:
        out.close()
        out.join_thread()       # the queue's feeder thread must deliver the result before os._exit
        os._exit(status)


def fork_server() -> Any:
    """The forkserver context, its server started (once) with tests/rank_preload.py imported. The server is a
    new interpreter that sees this checkout's src/ and tests/ through PYTHONPATH (Python 3.11's forkserver
    does not pass sys.path on to it), and that answers CUDA queries from NVML, so that it never initialises
    CUDA, which a forked rank could not use; the ranks it forks get this process's sys.path as usual."""
    from multiprocessing import forkserver

    ctx = mp.get_context("forkserver")
    if not _server["started"]:
        ctx.set_forkserver_preload(["rank_preload"])
        here = Path(__file__).resolve().parent
        before = {key: os.environ.get(key) for key in ("PYTHONPATH", "PYTORCH_NVML_BASED_CUDA_CHECK")}
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(here), str(here.parent / "src"),
                                                                 before["PYTHONPATH"]]))
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"   # a CUDA query in the server must not initialise CUDA
        try:
            forkserver.ensure_running()
        finally:
            for key, value in before.items():
                if value is None:
                    del os.environ[key]
                else:
                    os.environ[key] = value
        _server["started"] = True
    return ctx


_server = {"started": False}


def run_ranks(P: int, fn: Callable, args: tuple = (), timeout: float = 60, backend: str = "gloo") -> list:
    """fn(rank, P, *args) on P ranks of one process group (`backend`: gloo, or nccl with rank r on cuda:r);
    their results in rank order."""
    ctx = fork_server()
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
                if dead:                        # its last words may still be in the pipe
                    try:
                        rank, ok, value = out.get(timeout=2)
                        (results if ok else errors)[rank] = value
                        if errors:
                            break
                        continue
                    except queue.Empty:
                        pass
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
    """Import what each rank would import on its first optimizer step (torch.optim's first step loads
    torch._dynamo: seconds per process), so that the forked ranks inherit it."""
    import torch
    import torch.nn.parallel  # noqa: F401

    p = torch.nn.Parameter(torch.zeros(1))
    p.grad = torch.zeros(1)
    torch.optim.SGD([p], lr=0.1, momentum=0.9).step()
