"""Execute this process's rank of a collective program with mpi4py (one process per rank).

The same `Collective.program` as the in-process executor (`ssgd.comm.thread`); only how each
operation is carried out differs:

  * `Send` / `Recv`: `MPI.Send` / `MPI.Recv` on the tensors' memory (contiguous CPU tensors go to
    mpi4py directly, no copy). Sparse schemes therefore see the same bits as under threads.
  * `Allgatherv`: the block sizes are gathered first, then one `MPI.Allgatherv`.
  * `Bcast`: `MPI.Bcast` from rank 0.
  * `Allreduce`: `MPI.Allreduce(SUM)`: fast, but MPI fixes no summation order, so dense results
    equal the rank-order sum of the threads backend only to rounding (see the README's bound).

Bytes and messages are counted with the same functions as the in-process executor. Importing this
module initialises MPI: only `ssgd.worker` and MPI tests import it (a process inside MPI cannot
launch `mpiexec`).
"""
from __future__ import annotations

from typing import Any

import torch
from mpi4py import MPI

from ssgd.comm.base import Collective, Payload, Reduced
from ssgd.comm.ops import Allgatherv, Allreduce, Bcast, Op, RankLog, Recv, Send, collective_sent, nbytes
from ssgd.perf import cost


def _host(t: torch.Tensor) -> torch.Tensor:
    """Contiguous host memory for MPI (GPU tensors are staged here, in this one place)."""
    return t.detach().contiguous().cpu()


def execute(op: Op, comm: MPI.Comm, log: RankLog) -> Any:
    """Carry out one operation for this rank; returns what the program receives back."""
    rank, P = comm.Get_rank(), comm.Get_size()
    if isinstance(op, Send):
        comm.Send(_host(op.buf), dest=op.dest, tag=op.tag)
        log.stats.add(cost.p2p_sent(nbytes(op.buf)))
        return None
    if isinstance(op, Recv):
        comm.Recv(op.buf, source=op.source, tag=op.tag)
        return None
    if isinstance(op, Allreduce):
        out = torch.empty_like(op.buf)
        comm.Allreduce(_host(op.buf), out, op=MPI.SUM)
        log.stats.add(collective_sent(op, rank, P))
        return out
    if isinstance(op, Allgatherv):
        buf = _host(op.buf)
        sizes = comm.allgather(buf.numel())
        recv = torch.empty(sum(sizes), dtype=buf.dtype)
        comm.Allgatherv(buf, [recv, sizes])
        log.stats.add(collective_sent(op, rank, P, [n * buf.element_size() for n in sizes]))
        return list(recv.split(sizes))
    if isinstance(op, Bcast):
        buf = _host(op.buf) if rank == 0 else torch.empty_like(op.buf)
        comm.Bcast(buf, root=0)
        log.stats.add(collective_sent(op, rank, P))
        return buf
    raise TypeError(f"unknown operation {op!r}")


def run_mpi(collective: Collective, payload: Payload, comm: MPI.Comm) -> tuple[Reduced, RankLog]:
    """Run this rank's program of `collective` to completion."""
    gen = collective.program(comm.Get_rank(), comm.Get_size(), payload)
    log, value = RankLog(), None
    while True:
        try:
            op = gen.send(value)
        except StopIteration as stop:
            return stop.value, log
        value = execute(op, comm, log)
