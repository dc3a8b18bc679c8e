"""The communication operations a collective program may yield, and its per-rank counters.

A collective is written once, as an SPMD generator function of (rank, P, payload): it yields these
operations and receives their results (see `ssgd.comm.base.Collective`). An executor says how one
operation runs; `ssgd.comm.driver` steps the programs. `ssgd.comm.executors.thread` runs all P ranks in
this process in lock step; `ssgd.comm.executors.mpi` and `ssgd.comm.executors.torch_dist` run this
process's rank with mpi4py or torch.distributed. Semantics are MPI's:

  * `Send` blocks until the matching `Recv` is posted (so a program that would deadlock under MPI
    deadlocks, loudly, under threads too); `Recv` fills `buf` in place.
  * `Allreduce`, `Allgatherv`, `Bcast` are collective: every rank must yield the same kind, in the
    same order. Their results must be treated as read-only: the thread executor hands the SAME
    tensor to every rank.

Each kind also states what it costs, so that no executor works it out again:
  * `sent(rank, P, block_bytes)`: the (messages, bytes) the rank sends (`ssgd.perf.cost`'s functions,
    shared with the cost model); `block_bytes` is every rank's buffer bytes in rank order, which only
    `Allgatherv` reads;
  * `simulate(sim, ...)`: the modelled clocks it advances on a network simulator (`ssgd.perf.netsim`):
    `Send.simulate(sim, rank)` for the message from `rank` once its `Recv` is posted (a `Recv` costs
    nothing of its own), a collective's `simulate(sim, block_bytes)` once per call, for every rank.
An executor carries an operation out by looking its kind up in a table of its own (`type(op)` ->
handler); a new kind is one class here, with `sent` and `simulate`, and one entry in each executor's table.

Buffers are contiguous tensors on the payload's device (an executor that cannot read device memory
stages it through the host, e.g. MPI without CUDA support); bytes are counted as
`numel * element_size`, whatever the device.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from ssgd.perf import cost
from ssgd.perf.netsim import NetSim


def nbytes(t: Tensor) -> int:
    return t.numel() * t.element_size()


@dataclass(frozen=True)
class Send:
    dest: int
    buf: Tensor
    tag: int = 0

    def sent(self, rank: int = 0, P: int = 0, block_bytes: list[int] | None = None) -> tuple[int, int]:
        """One message of the buffer's bytes."""
        return cost.p2p_sent(nbytes(self.buf))

    def simulate(self, sim: NetSim, rank: int) -> None:
        """The message from `rank` to `dest`, its Recv posted."""
        sim.send(rank, self.dest, nbytes(self.buf))


@dataclass(frozen=True)
class Recv:
    source: int
    buf: Tensor
    tag: int = 0


@dataclass(frozen=True)
class Allreduce:
    """Sum of every rank's `buf` (same shape everywhere), modelled as a ring allreduce.

    Result: a new tensor; bitwise equal to summing the ranks' buffers left to right in rank order
    on every backend that promises bitwise equality.
    """

    buf: Tensor

    def sent(self, rank: int, P: int, block_bytes: list[int] | None = None) -> tuple[int, int]:
        return cost.allreduce_sent(rank, P, self.buf.numel(), self.buf.element_size())

    def simulate(self, sim: NetSim, block_bytes: list[int] | None = None) -> None:
        sim.allreduce(self.buf.numel(), self.buf.element_size())


@dataclass(frozen=True)
class Allgatherv:
    """Every rank's 1-D `buf` (sizes may differ, dtype must agree), modelled as a ring allgather.

    Result: list of P tensors in rank order.
    """

    buf: Tensor

    def sent(self, rank: int, P: int, block_bytes: list[int] | None = None) -> tuple[int, int]:
        """`block_bytes`: every rank's bytes, in rank order (required)."""
        if block_bytes is None:
            raise TypeError("Allgatherv.sent needs every rank's block_bytes")
        return cost.allgatherv_sent(rank, block_bytes)

    def simulate(self, sim: NetSim, block_bytes: list[int] | None = None) -> None:
        """`block_bytes`: every rank's bytes, in rank order (required)."""
        if block_bytes is None:
            raise TypeError("Allgatherv.simulate needs every rank's block_bytes")
        sim.allgatherv(block_bytes)


@dataclass(frozen=True)
class Bcast:
    """Rank 0's `buf` to every rank (binomial tree). Non-root ranks pass a buffer of the right
    size and dtype (its content is ignored). Result: the root's data."""

    buf: Tensor

    def sent(self, rank: int, P: int, block_bytes: list[int] | None = None) -> tuple[int, int]:
        return cost.bcast_sent(rank, P, nbytes(self.buf))

    def simulate(self, sim: NetSim, block_bytes: list[int] | None = None) -> None:
        sim.bcast(nbytes(self.buf))


Op = Send | Recv | Allreduce | Allgatherv | Bcast


@dataclass
class CommStats:
    """What one rank sent in one or more collective calls."""

    messages: int = 0
    bytes: int = 0

    def add(self, sent: tuple[int, int]) -> None:
        self.messages += sent[0]
        self.bytes += sent[1]


@dataclass
class RankLog:
    """Counters of one rank plus, on simulating executors, its modelled clock."""

    stats: CommStats = field(default_factory=CommStats)
    clock: float = 0.0
    staging_s: float = 0.0     # one-rank executors: copies to and from the device the library reads
