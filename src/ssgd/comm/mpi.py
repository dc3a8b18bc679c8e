"""Execute this process's rank of a collective program with mpi4py (one process per rank).

The same `Collective.program` as the in-process executor (`ssgd.comm.thread`), stepped by the
same `ssgd.comm.driver.run_program`; only how each operation is carried out differs:

  * `Send` / `Recv`: `MPI.Send` / `MPI.Recv` on the tensors' memory (contiguous CPU tensors go to
    mpi4py directly, no copy). Sparse schemes therefore see the same bits as under threads.
    GPU tensors are staged through host memory unless MPI reports CUDA support (`CUDA_AWARE`).
  * `Allgatherv`: the block sizes are gathered first, then one `MPI.Allgatherv`.
  * `Bcast`: `MPI.Bcast` from rank 0.
  * `Allreduce`: `MPI.Allreduce(SUM)`: fast, but MPI fixes no summation order, so dense results
    equal the rank-order sum of the threads backend only to rounding (tests/integration/test_mpi.py
    states the bound).

Bytes and messages are counted with the same functions as the in-process executor. Importing this
module initialises MPI: only `ssgd.worker` and MPI tests import it (a process inside MPI cannot
launch `mpiexec`).
"""
from __future__ import annotations

import os
import time
from typing import Any

import torch
from mpi4py import MPI

from ssgd.comm.base import Collective, Reduced
from ssgd.comm.driver import run_program
from ssgd.comm.ops import Allgatherv, Allreduce, Bcast, Op, RankLog, Recv, Send, collective_sent, nbytes
from ssgd.payload import Payload
from ssgd.perf import cost


# CUDA-aware MPI takes device memory directly; otherwise GPU tensors are staged through host
# memory, in `_to_host` / `_to_device` only, and the time is logged as RankLog.staging_s. Detected
# where mpi4py exposes MPIX_Query_cuda_support, or declared with SSGD_CUDA_AWARE_MPI=1; never assumed
# (the PyPI Open MPI wheel is not CUDA-aware).
CUDA_AWARE = os.environ.get("SSGD_CUDA_AWARE_MPI") == "1" or bool(getattr(MPI, "Query_cuda_support", lambda: False)())


def _to_host(t: torch.Tensor, log: RankLog) -> torch.Tensor:
    if t.is_cuda and not CUDA_AWARE:
        start = time.perf_counter()
        host = t.detach().cpu()
        log.staging_s += time.perf_counter() - start
        return host
    return t.detach().contiguous()


def _host_like(t: torch.Tensor) -> torch.Tensor:
    """An uninitialised buffer for receiving data of t's shape and dtype, where MPI can write."""
    staged = t.is_cuda and not CUDA_AWARE
    return torch.empty(t.shape, dtype=t.dtype, device="cpu" if staged else t.device)


def _to_device(t: torch.Tensor, like: torch.Tensor, log: RankLog) -> torch.Tensor:
    if t.device == like.device:
        return t
    start = time.perf_counter()
    out = t.to(like.device)
    torch.cuda.synchronize(like.device)
    log.staging_s += time.perf_counter() - start
    return out


def _output(like: torch.Tensor, pool: dict | None) -> torch.Tensor:
    """A result buffer shaped like `like`: reused from `pool` when given (a fresh 100 MB tensor costs
    ~40-70 ms of page faults here), so a result is valid only until the next call with that pool."""
    if pool is None:
        return torch.empty_like(like)
    key = (tuple(like.shape), like.dtype, like.device)
    if key not in pool:
        pool[key] = torch.empty_like(like)
    return pool[key]


def execute(op: Op, comm: MPI.Comm, log: RankLog, pool: dict | None = None) -> Any:
    """Carry out one operation for this rank; returns what the program receives back."""
    rank, P = comm.Get_rank(), comm.Get_size()
    if isinstance(op, Send):
        comm.Send(_to_host(op.buf, log), dest=op.dest, tag=op.tag)
        log.stats.add(cost.p2p_sent(nbytes(op.buf)))
        return None
    if isinstance(op, Recv):
        buf = op.buf if (not op.buf.is_cuda or CUDA_AWARE) else _host_like(op.buf)
        comm.Recv(buf, source=op.source, tag=op.tag)
        if buf is not op.buf:
            op.buf.copy_(_to_device(buf, op.buf, log))
        return None
    if isinstance(op, Allreduce):
        send = _to_host(op.buf, log)
        out = _output(send, pool)
        comm.Allreduce(send, out, op=MPI.SUM)
        log.stats.add(collective_sent(op, rank, P))
        return _to_device(out, op.buf, log)
    if isinstance(op, Allgatherv):
        send = _to_host(op.buf, log)
        sizes = comm.allgather(send.numel())
        recv = torch.empty(sum(sizes), dtype=send.dtype, device=send.device)
        comm.Allgatherv(send, [recv, sizes])
        log.stats.add(collective_sent(op, rank, P, [n * send.element_size() for n in sizes]))
        return list(_to_device(recv, op.buf, log).split(sizes))
    if isinstance(op, Bcast):
        buf = _to_host(op.buf, log) if rank == 0 else _host_like(op.buf)
        comm.Bcast(buf, root=0)
        log.stats.add(collective_sent(op, rank, P))
        return _to_device(buf, op.buf, log)
    raise TypeError(f"unknown operation {op!r}")


def run_mpi(collective: Collective, payload: Payload, comm: MPI.Comm,
            pool: dict | None = None) -> tuple[Reduced, RankLog]:
    """Run this rank's program of `collective` to completion (`pool`: see `_output`)."""
    log = RankLog()
    reduced = run_program(collective, comm.Get_rank(), comm.Get_size(), payload,
                          lambda op: execute(op, comm, log, pool))
    return reduced, log
