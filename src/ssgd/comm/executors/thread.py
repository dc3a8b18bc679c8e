"""Execute a collective's P rank programs inside this process, in lock step, in rank order.

This is the in-process backend's collective phase: one thread steps every virtual rank's program
(`ssgd.comm.driver.advance`) until it blocks on an operation, then completes whatever can complete:
  * a `Send` whose destination has posted the matching `Recv` (copy, then both resume), in passes: a pass
    goes through the ranks in increasing order and completes each rank's Send that is matched when the
    pass reaches it; a pass that completed none is followed by
  * a collective op once every rank has posted it (computed once, in rank order, by the kind's entry
    in `RESULTS`, and the SAME result handed to every rank).
If nothing can complete while some rank still waits, the programs would deadlock under MPI too:
raise `CollectiveDeadlock` describing each rank's pending op instead of hanging.

A pass visits only the ranks whose Send is matched (kept as they become so), in the order a scan of all P
ranks would complete them: the same completions in the same order (so the same modelled clocks), at a cost
per message, not per rank and pass; a program of P^2 messages at P = 1,024 (Ok-Topk's) takes minutes,
not hours.

Besides counting bytes and messages per rank (each op's `sent`), the executor keeps a modelled clock
per rank: it tells a network simulator (`ssgd.perf.netsim`, chosen by `net`) each completed operation
(`op.simulate`) and each rank's compute, and copies the simulator's clocks into the ranks' `RankLog.clock`.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ssgd.comm.base import Collective, Reduced
from ssgd.comm.driver import advance
from ssgd.comm.ops import Allgatherv, Allreduce, Bcast, Op, RankLog, Recv, Send, nbytes
from ssgd.payload import Payload
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.perf.netsim import NetSim, simulator
from ssgd.perf.shaped import ShapedLink


class CollectiveDeadlock(RuntimeError):
    """The rank programs cannot make progress (mismatched sends, receives or collectives)."""


def rank_order_sum(bufs: Sequence[torch.Tensor]) -> torch.Tensor:
    """acc = b0 + b1 + ... left to right: the reduction every backend uses for bitwise equality."""
    acc = bufs[0].clone()
    for b in bufs[1:]:
        acc.add_(b)
    return acc


def _allreduce(ops: list[Allreduce]) -> torch.Tensor:
    return rank_order_sum([op.buf for op in ops])


def _allgatherv(ops: list[Allgatherv]) -> list[torch.Tensor]:
    return [op.buf for op in ops]


def _bcast(ops: list[Bcast]) -> torch.Tensor:
    return ops[0].buf


# each collective kind's result, from every rank's op in rank order (the semantics of ssgd.comm.ops)
RESULTS: dict[type, Callable[[list[Any]], Any]] = {Allreduce: _allreduce, Allgatherv: _allgatherv, Bcast: _bcast}


def describe(op: Op | None) -> str:
    if op is None:
        return "done"
    peer = f"->{op.dest}" if isinstance(op, Send) else f"<-{op.source}" if isinstance(op, Recv) else ""
    return type(op).__name__ + peer


class _Lockstep:
    """The P programs of one call, their pending operations, results, logs and modelled clocks."""

    def __init__(self, collective: Collective, payloads: Sequence[Payload], sim: NetSim,
                 compute: Sequence[Sequence[float]] | None) -> None:
        self.P = P = len(payloads)
        self.name, self.sim, self.compute = collective.name, sim, compute
        self.programs = [collective.program(r, P, payloads[r]) for r in range(P)]
        self.logs = [RankLog() for _ in range(P)]
        self.pending: list[Op | None] = [None] * P
        self.results: list[Reduced | None] = [None] * P
        self.steps = [0] * P
        # the ranks whose Send is matched: this pass's, ahead of `position` (a heap), and the next pass's
        self.ready: list[int] = []
        self.later: set[int] = set()
        self.position = P

    def resume(self, r: int, value: Any = None) -> None:
        """Rank r computes (its next `compute` value), then runs to its next operation or its result."""
        if self.compute is not None:
            given = self.compute[r]
            if self.steps[r] >= len(given):
                raise ValueError(f"run_threads: rank {r}'s program has more steps than its {len(given)} compute "
                                 "values")
            self.sim.compute(r, given[self.steps[r]])
            self.steps[r] += 1
        self.pending[r], done = advance(self.programs[r], value)
        if done is not None:
            self.results[r] = done
        self.posted(r)

    def matched(self, r: int) -> bool:
        """Rank r's pending op is a Send whose destination has posted the matching Recv."""
        op = self.pending[r]
        if not isinstance(op, Send) or not 0 <= op.dest < self.P:
            return False
        peer = self.pending[op.dest]
        return isinstance(peer, Recv) and peer.source == r and peer.tag == op.tag

    def posted(self, r: int) -> None:
        """After rank r resumed: the rank whose Send its new op matches (r itself, or a Recv's source) joins
        `ready`, this pass's heap when the pass has not reached it yet, else the next pass's set."""
        op = self.pending[r]
        if isinstance(op, Send):
            sender = r
        elif isinstance(op, Recv) and 0 <= op.source < self.P:
            sender = op.source
        else:
            return
        if self.matched(sender):
            if sender > self.position:
                heapq.heappush(self.ready, sender)
            else:
                self.later.add(sender)

    def point_to_point(self) -> bool:
        """One pass: complete, in rank order, every Send whose Recv is posted when the pass reaches its
        rank; whether any was."""
        self.ready, self.later, self.position = sorted(self.later), set(), -1
        progressed = False
        while self.ready:
            r = heapq.heappop(self.ready)
            if r <= self.position or not self.matched(r):
                continue
            self.position = r
            self.complete(r)
            progressed = True
        self.position = self.P
        return progressed

    def complete(self, r: int) -> None:
        """Carry out rank r's matched Send: copy into the Recv's buffer, count and simulate it, resume both ranks.
        `CollectiveDeadlock` when the two buffers differ in shape or dtype."""
        op = self.pending[r]
        peer = self.pending[op.dest]
        if peer.buf.shape != op.buf.shape or peer.buf.dtype != op.buf.dtype:
            raise CollectiveDeadlock(f"rank {r} sends {tuple(op.buf.shape)} {op.buf.dtype} but rank "
                                     f"{op.dest} receives {tuple(peer.buf.shape)} {peer.buf.dtype}")
        peer.buf.copy_(op.buf)
        self.logs[r].stats.add(op.sent())
        op.simulate(self.sim, r)
        self.resume(r)
        self.resume(op.dest)

    def collective(self) -> bool:
        """Complete the collective op every rank has posted; False when some rank has not posted one."""
        ops = self.pending
        if not all(type(op) in RESULTS for op in ops):
            return False
        if any(type(op) is not type(ops[0]) for op in ops):
            kinds = ", ".join(f"rank {r}: {type(op).__name__}" for r, op in enumerate(ops))
            raise CollectiveDeadlock(f"ranks posted different collectives ({kinds})")
        block_bytes = [nbytes(op.buf) for op in ops]  # type: ignore[union-attr]
        value = RESULTS[type(ops[0])](ops)
        ops[0].simulate(self.sim, block_bytes)  # type: ignore[union-attr]
        for r, op in enumerate(ops):
            self.logs[r].stats.add(op.sent(r, self.P, block_bytes))  # type: ignore[union-attr]
            self.resume(r, value)
        return True

    def deadlock(self) -> CollectiveDeadlock:
        state = "; ".join(f"rank {r}: {describe(op)}" for r, op in enumerate(self.pending))
        return CollectiveDeadlock(f"{self.name}: no rank can progress ({state})")


def run_threads(collective: Collective, payloads: Sequence[Payload],
                net: AlphaBeta | ShapedLink | None = None,
                compute: Sequence[Sequence[float]] | None = None) -> tuple[list[Reduced], list[RankLog]]:
    """Run `collective` on all P = len(payloads) ranks; returns per-rank results and logs.

    `net`: the network whose clocks the logs carry (`ssgd.perf.netsim.simulator`; None: no network, the
    clocks hold only `compute`). `compute[r][i]`: rank r's compute before its i-th operation (after its last
    one for i = its count of operations), added to its clock. ValueError when `compute` does not give P ranks,
    or a rank fewer values than its program has steps; `CollectiveDeadlock` when the programs cannot progress."""
    P = len(payloads)
    if compute is not None and len(compute) != P:
        raise ValueError(f"run_threads: compute for {len(compute)} ranks, {P} payloads")
    run = _Lockstep(collective, payloads, simulator(net, P), compute)
    for r in range(P):
        run.resume(r)
    while any(op is not None for op in run.pending):
        if not (run.point_to_point() or run.collective()):
            raise run.deadlock()
    for log, clock in zip(run.logs, run.sim.clocks):
        log.clock = clock
    return run.results, run.logs  # type: ignore[return-value]
