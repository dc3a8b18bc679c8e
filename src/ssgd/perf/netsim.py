"""Modelled per-rank clocks of one collective call: the network simulators an executor drives.

An executor that runs every rank's program itself (`ssgd.comm.executors.thread.run_threads`) tells a `NetSim`
what happens, in ranks and bytes, and the simulator advances one clock per rank (seconds since the call began):

  * `compute(rank, s)`: the rank computed for s seconds;
  * `send(src, dst, nbytes)`: a point-to-point message, once its receive is posted;
  * `allreduce(n, itemsize)`, `allgatherv(block_bytes)`, `bcast(nbytes)`: a collective that every rank has
    posted (the schedules of `ssgd.perf.cost`: ring allreduce, ring allgatherv, binomial broadcast from rank 0).
    It starts when the last rank posts it and leaves every rank's clock at its end.

The interface speaks of ranks, bytes and the collective kinds, never of the communication package's
operations (perf sits below comm, docs/layout.md); each operation says which call it is
(`ssgd.comm.ops`). Three simulators:

  * `Unmodelled`: no network. Communication takes no modelled time and waits for nobody, so a rank's clock
    is the compute it was given;
  * `AlphaBetaSim`: a matched message ends at max(both clocks) + alpha + n beta; a collective at
    max(all clocks) + its closed-form time (`ssgd.perf.cost`), the ring and tree steps in lock step;
  * `ShapedSim`: the token-bucket links of the testbed (`ssgd.perf.shaped`): a message leaves at the
    sender's clock (eager) and the receiver's clock becomes at least its arrival; collectives run the
    schedules `ShapedNet` times, every rank's bucket carried through the call.

`simulator(net, P)` picks one by the type of the network description. A new model (e.g. SimGrid's) is one
`NetSim` subclass and one entry of `MODELS`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from ssgd.perf import cost
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.perf.shaped import ShapedLink, ShapedNet


class NetSim(ABC):
    """P per-rank clocks, all 0 when a call begins; subclasses say what communication costs."""

    def __init__(self, P: int) -> None:
        self.P = P
        self.clocks = [0.0] * P

    def compute(self, rank: int, seconds: float) -> None:
        """Rank `rank` computed for `seconds`."""
        self.clocks[rank] += seconds

    def _all_end(self, end: float) -> None:
        """A collective ended at `end` on every rank."""
        self.clocks[:] = [end] * self.P

    @abstractmethod
    def send(self, src: int, dst: int, nbytes: int) -> None:
        """One message of `nbytes` from `src` to `dst`, whose receive `dst` has posted."""

    @abstractmethod
    def allreduce(self, n: int, itemsize: int) -> None:
        """A ring allreduce of n elements of `itemsize` bytes, posted by every rank."""

    @abstractmethod
    def allgatherv(self, block_bytes: Sequence[int]) -> None:
        """A ring allgatherv of every rank's block (bytes, in rank order), posted by every rank."""

    @abstractmethod
    def bcast(self, nbytes: int) -> None:
        """A binomial broadcast of `nbytes` from rank 0, posted by every rank."""


class Unmodelled(NetSim):
    """No network: communication is free and synchronises nothing; the clocks hold the given compute."""

    def send(self, src: int, dst: int, nbytes: int) -> None:
        pass

    def allreduce(self, n: int, itemsize: int) -> None:
        pass

    def allgatherv(self, block_bytes: Sequence[int]) -> None:
        pass

    def bcast(self, nbytes: int) -> None:
        pass


class AlphaBetaSim(NetSim):
    """Clocks on the alpha-beta network `net` (module docstring)."""

    def __init__(self, net: AlphaBeta, P: int) -> None:
        super().__init__(P)
        self.net = net

    def send(self, src: int, dst: int, nbytes: int) -> None:
        end = max(self.clocks[src], self.clocks[dst]) + self.net.message(nbytes)
        self.clocks[src] = self.clocks[dst] = end

    def allreduce(self, n: int, itemsize: int) -> None:
        self._all_end(max(self.clocks) + cost.allreduce_seconds(self.net, self.P, n, itemsize))

    def allgatherv(self, block_bytes: Sequence[int]) -> None:
        self._all_end(max(self.clocks) + cost.allgatherv_seconds(self.net, block_bytes))

    def bcast(self, nbytes: int) -> None:
        self._all_end(max(self.clocks) + cost.bcast_seconds(self.net, self.P, nbytes))


class ShapedSim(NetSim):
    """Clocks on token-bucket links `link`, every rank's bucket full when the call begins (module docstring)."""

    def __init__(self, link: ShapedLink, P: int) -> None:
        super().__init__(P)
        self.net = ShapedNet(link, P)

    def send(self, src: int, dst: int, nbytes: int) -> None:
        free, arrived = self.net.send(src, nbytes, self.clocks[src])
        self.clocks[src], self.clocks[dst] = free, max(self.clocks[dst], arrived)

    def allreduce(self, n: int, itemsize: int) -> None:
        self._all_end(self.net.allreduce(n, itemsize, max(self.clocks)))

    def allgatherv(self, block_bytes: Sequence[int]) -> None:
        self._all_end(self.net.allgatherv(block_bytes, max(self.clocks)))

    def bcast(self, nbytes: int) -> None:
        self._all_end(self.net.bcast(nbytes, max(self.clocks)))


# the simulator of each kind of network description
MODELS: dict[type, Callable[[Any, int], NetSim]] = {AlphaBeta: AlphaBetaSim, ShapedLink: ShapedSim}


def simulator(net: AlphaBeta | ShapedLink | None, P: int) -> NetSim:
    """Fresh clocks for one call of P ranks on `net` (None: `Unmodelled`). TypeError for another kind of network."""
    if net is None:
        return Unmodelled(P)
    make = next((MODELS[kind] for kind in type(net).__mro__ if kind in MODELS), None)
    if make is None:
        raise TypeError(f"no network simulator for {type(net).__name__}; known: "
                        f"{', '.join(t.__name__ for t in MODELS)}")
    return make(net, P)
