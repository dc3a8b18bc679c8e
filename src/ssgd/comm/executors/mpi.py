"""Execute this process's rank of a collective program with mpi4py (one process per rank).

The same `Collective.program` as the in-process executor (`ssgd.comm.executors.thread`), stepped by the
same `ssgd.comm.driver.run_program`; only how each operation is carried out differs:

  * `Send` / `Recv`: `MPI.Send` / `MPI.Recv` on the tensors' memory (a contiguous CPU tensor goes to
    mpi4py as an MPI buffer at its address, `_host`: no copy). Sparse schemes therefore see the same bits as under
    threads. GPU tensors are staged through host memory unless MPI reports CUDA support (`CUDA_AWARE`).
  * `Allgatherv`: the block sizes are gathered first (one `MPI.Allgather` of an int64 per rank), then one
    `MPI.Allgatherv`.
  * `Bcast`: `MPI.Bcast` from rank 0.
  * `Allreduce`: `MPI.Allreduce(SUM)`: fast, but MPI fixes no summation order, so dense results
    equal the rank-order sum of the threads backend only to rounding (tests/integration/test_mpi.py
    states the bound).

Each kind has its handler in `HANDLERS`, looked up by the op's type. Bytes and messages are counted
with each op kind's `sent`, as in the other executors. Importing this module initialises MPI: only a rank
of backend=mpi (`ssgd.run.worker`) and MPI tests import it (a process inside MPI cannot launch `mpiexec`).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from mpi4py import MPI

from ssgd.comm.base import Collective, Reduced
from ssgd.comm.driver import run_program
from ssgd.comm.ops import Allgatherv, Allreduce, Bcast, Op, RankLog, Recv, Send
from ssgd.comm.executors.staging import empty_on, from_comm, pooled, to_comm
from ssgd.payload import Payload


# CUDA-aware MPI takes device memory directly; otherwise GPU tensors are staged through host
# memory (`ssgd.comm.executors.staging`), and the time is logged as RankLog.staging_s. Detected
# where mpi4py exposes MPIX_Query_cuda_support, or declared with SSGD_CUDA_AWARE_MPI=1; never assumed
# (the PyPI Open MPI wheel is not CUDA-aware).
CUDA_AWARE = os.environ.get("SSGD_CUDA_AWARE_MPI") == "1" or bool(getattr(MPI, "Query_cuda_support", lambda: False)())


def _comm_device(t: torch.Tensor) -> torch.device:
    """Where MPI reads and writes `t`'s data: its own device, or the host for a GPU tensor without CUDA-aware MPI."""
    return t.device if (not t.is_cuda or CUDA_AWARE) else torch.device("cpu")


SUMMED = {torch.float32: MPI.FLOAT, torch.float64: MPI.DOUBLE}     # what `Allreduce` sums, as MPI datatypes


def _host(t: torch.Tensor, datatype: MPI.Datatype = MPI.BYTE) -> Any:
    """What mpi4py reads or writes for the contiguous tensor `t`: its host memory as an MPI buffer of bytes (or of
    `datatype`, for a reduction), no copy and no DLPack conversion per call (docs/collectives.md, "The MPI
    executor's buffers"); a device tensor as it is (CUDA-aware MPI). The buffer only points at `t`'s memory: the
    caller keeps `t` alive until MPI is done."""
    if t.device.type != "cpu":
        return t
    return [MPI.buffer.fromaddress(t.data_ptr(), t.numel() * t.element_size()), datatype]


def _send(op: Send, comm: MPI.Comm, log: RankLog, pool: dict | None) -> None:
    comm.Send(_host(to_comm(op.buf, _comm_device(op.buf), log)), dest=op.dest, tag=op.tag)
    log.stats.add(op.sent())


def _recv(op: Recv, comm: MPI.Comm, log: RankLog, pool: dict | None) -> None:
    device = _comm_device(op.buf)
    buf = op.buf if op.buf.device == device and op.buf.is_contiguous() else empty_on(op.buf, device)
    comm.Recv(_host(buf), source=op.source, tag=op.tag)
    if buf is not op.buf:
        op.buf.copy_(from_comm(buf, op.buf, log))


def _allreduce(op: Allreduce, comm: MPI.Comm, log: RankLog, pool: dict | None) -> torch.Tensor:
    send = to_comm(op.buf, _comm_device(op.buf), log)
    out = pooled(send, pool)
    if send.dtype not in SUMMED:
        raise TypeError(f"MPI executor: an Allreduce of {send.dtype}; it sums {', '.join(map(str, SUMMED))}")
    comm.Allreduce(_host(send, SUMMED[send.dtype]), _host(out, SUMMED[send.dtype]), op=MPI.SUM)
    log.stats.add(op.sent(comm.Get_rank(), comm.Get_size()))
    return from_comm(out, op.buf, log)


def _allgatherv(op: Allgatherv, comm: MPI.Comm, log: RankLog, pool: dict | None) -> list[torch.Tensor]:
    rank, P = comm.Get_rank(), comm.Get_size()
    send = to_comm(op.buf, _comm_device(op.buf), log)
    mine, counts = torch.tensor([send.numel()]), torch.empty(P, dtype=torch.int64)   # alive until the call returns
    comm.Allgather(_host(mine, MPI.INT64_T), _host(counts, MPI.INT64_T))
    sizes = counts.tolist()
    recv = torch.empty(sum(sizes), dtype=send.dtype, device=send.device)
    if recv.is_cuda:
        comm.Allgatherv(send, [recv, sizes])
    else:
        width = send.element_size()
        comm.Allgatherv(_host(send), _host(recv)[:1] + [[n * width for n in sizes], MPI.BYTE])
    log.stats.add(op.sent(rank, P, [n * send.element_size() for n in sizes]))
    return list(from_comm(recv, op.buf, log).split(sizes))


def _bcast(op: Bcast, comm: MPI.Comm, log: RankLog, pool: dict | None) -> torch.Tensor:
    rank, device = comm.Get_rank(), _comm_device(op.buf)
    buf = to_comm(op.buf, device, log) if rank == 0 else empty_on(op.buf, device)
    comm.Bcast(_host(buf), root=0)
    log.stats.add(op.sent(rank, comm.Get_size()))
    return from_comm(buf, op.buf, log)


# how this executor carries out each operation kind (`ssgd.comm.ops`)
HANDLERS: dict[type, Callable[[Any, MPI.Comm, RankLog, dict | None], Any]] = {
    Send: _send, Recv: _recv, Allreduce: _allreduce, Allgatherv: _allgatherv, Bcast: _bcast}


def execute(op: Op, comm: MPI.Comm, log: RankLog, pool: dict | None = None) -> Any:
    """Carry out one operation for this rank (its kind's entry in `HANDLERS`); returns what the program receives
    back. `pool`: result buffers kept between calls (`ssgd.comm.executors.staging.pooled`). TypeError for a
    kind this executor does not know."""
    handler = HANDLERS.get(type(op))
    if handler is None:
        raise TypeError(f"MPI executor: unknown operation {op!r}")
    return handler(op, comm, log, pool)


def run_mpi(collective: Collective, payload: Payload, comm: MPI.Comm,
            pool: dict | None = None) -> tuple[Reduced, RankLog]:
    """Run this rank's program of `collective` to completion (`pool`: see `execute`)."""
    log = RankLog()
    reduced = run_program(collective, comm.Get_rank(), comm.Get_size(), payload,
                          lambda op: execute(op, comm, log, pool))
    return reduced, log
