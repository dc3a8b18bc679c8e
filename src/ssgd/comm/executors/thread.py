"""Execute a collective's P rank programs inside this process, in lock step, in rank order.

This is the in-process backend's collective phase: one thread steps every virtual rank's program
(`ssgd.comm.driver.advance`) until it blocks on an operation, then completes whatever can complete:
  * a `Send` whose destination has posted the matching `Recv` (copy, then both resume);
  * a collective op once every rank has posted it (computed once, in rank order, and the SAME
    result tensor handed to every rank).
If nothing can complete while some rank still waits, the programs would deadlock under MPI too:
raise `CollectiveDeadlock` describing each rank's pending op instead of hanging.

Besides counting bytes and messages per rank, the executor keeps a modelled clock per rank when a
network is given: a matched Send/Recv ends at max(both clocks) + alpha + n beta, a collective ends
at max(all clocks) + its closed-form time. Tests compare these clocks with `ssgd.perf.cost`.
On a `ssgd.perf.shaped.ShapedLink` (links shaped by token buckets, the testbed of docs/testbed.md) the
clocks follow `ssgd.perf.shaped.ShapedNet` instead: a Send leaves at the sender's clock (eager) and the
receiver's clock becomes at least its arrival; collectives run the schedules ShapedNet times, every rank's
bucket carried through the call. With `compute` (per rank, the seconds its program computes before each of
its operations and after the last, e.g. measured on a real rank) each clock also advances by those, so
that the clocks model a call as P hosts with a CPU each run it: the network modelled, the compute given.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ssgd.comm.base import Collective, Reduced
from ssgd.comm.driver import advance
from ssgd.comm.ops import Allgatherv, Allreduce, Bcast, Op, RankLog, Recv, Send, nbytes
from ssgd.payload import Payload
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.perf.shaped import ShapedLink, ShapedNet


class CollectiveDeadlock(RuntimeError):
    """The rank programs cannot make progress (mismatched sends, receives or collectives)."""


def rank_order_sum(bufs: Sequence[torch.Tensor]) -> torch.Tensor:
    """acc = b0 + b1 + ... left to right: the reduction every backend uses for bitwise equality."""
    acc = bufs[0].clone()
    for b in bufs[1:]:
        acc.add_(b)
    return acc


def _collective_result(ops: list[Op]) -> tuple[Any, list[int] | None]:
    first = ops[0]
    if any(type(op) is not type(first) for op in ops):
        kinds = ", ".join(f"rank {r}: {type(op).__name__}" for r, op in enumerate(ops))
        raise CollectiveDeadlock(f"ranks posted different collectives ({kinds})")
    if isinstance(first, Allreduce):
        return rank_order_sum([op.buf for op in ops]), None
    if isinstance(first, Allgatherv):
        return [op.buf for op in ops], [nbytes(op.buf) for op in ops]
    if isinstance(first, Bcast):
        return first.buf, None
    raise CollectiveDeadlock(f"unknown collective {first!r}")


def _shaped_end(op: Op, net: ShapedNet, block_bytes: list[int] | None, start: float) -> float:
    """When the collective `op` (every rank's, posted by `start`) ends on the shaped network."""
    if isinstance(op, Allreduce):
        return net.allreduce(op.buf.numel(), op.buf.element_size(), start)
    if isinstance(op, Allgatherv):
        assert block_bytes is not None
        return net.allgatherv(block_bytes, start)
    if isinstance(op, Bcast):
        return net.bcast(nbytes(op.buf), start)
    raise CollectiveDeadlock(f"unknown collective {op!r}")


def run_threads(collective: Collective, payloads: Sequence[Payload],
                net: AlphaBeta | ShapedLink | None = None,
                compute: Sequence[Sequence[float]] | None = None) -> tuple[list[Reduced], list[RankLog]]:
    """Run `collective` on all P = len(payloads) ranks; returns per-rank results and logs (with modelled
    clocks on `net`, and `compute[r][i]`, rank r's compute before its i-th operation (after its last one
    for i = its count of operations), added to its clock: module docstring). ValueError when `compute`
    does not give P ranks, or a rank fewer values than its program has steps."""
    P = len(payloads)
    if compute is not None and len(compute) != P:
        raise ValueError(f"run_threads: compute for {len(compute)} ranks, {P} payloads")
    gens = [collective.program(r, P, payloads[r]) for r in range(P)]
    logs = [RankLog() for _ in range(P)]
    pending: list[Op | None] = [None] * P
    results: list[Reduced | None] = [None] * P
    shaped = ShapedNet(net, P) if isinstance(net, ShapedLink) else None
    steps = [0] * P

    def resume(r: int, value: Any = None) -> None:
        if compute is not None:
            if steps[r] >= len(compute[r]):
                raise ValueError(f"run_threads: rank {r}'s program has more steps than its {len(compute[r])} compute "
                                 "values")
            logs[r].clock += compute[r][steps[r]]
            steps[r] += 1
        pending[r], done = advance(gens[r], value)
        if done is not None:
            results[r] = done

    for r in range(P):
        resume(r)
    while any(op is not None for op in pending):
        progressed = False
        for r in range(P):                      # point to point, in rank order
            op = pending[r]
            if isinstance(op, Send) and 0 <= op.dest < P:
                peer = pending[op.dest]
                if isinstance(peer, Recv) and peer.source == r and peer.tag == op.tag:
                    if peer.buf.shape != op.buf.shape or peer.buf.dtype != op.buf.dtype:
                        raise CollectiveDeadlock(f"rank {r} sends {tuple(op.buf.shape)} {op.buf.dtype} but rank "
                                                 f"{op.dest} receives {tuple(peer.buf.shape)} {peer.buf.dtype}")
                    peer.buf.copy_(op.buf)
                    logs[r].stats.add(op.sent())
                    if shaped is not None:
                        free, arrived = shaped.send(r, nbytes(op.buf), logs[r].clock)
                        logs[r].clock, logs[op.dest].clock = free, max(logs[op.dest].clock, arrived)
                    elif net is not None:
                        end = max(logs[r].clock, logs[op.dest].clock) + op.seconds(net)
                        logs[r].clock = logs[op.dest].clock = end
                    resume(r)
                    resume(op.dest)
                    progressed = True
        if not progressed and all(isinstance(op, (Allreduce, Allgatherv, Bcast)) for op in pending):
            ops: list[Op] = pending  # type: ignore[assignment]
            value, block_bytes = _collective_result(ops)
            if shaped is not None:
                end = _shaped_end(ops[0], shaped, block_bytes, max(log.clock for log in logs))
            elif net is not None:
                end = max(log.clock for log in logs) + ops[0].seconds(net, P, block_bytes)
            for r in range(P):
                logs[r].stats.add(ops[r].sent(r, P, block_bytes))
                if net is not None:
                    logs[r].clock = end
                resume(r, value)
            progressed = True
        if not progressed:
            state = "; ".join(f"rank {r}: {type(op).__name__ if op else 'done'}"
                              + (f"->{op.dest}" if isinstance(op, Send) else "")
                              + (f"<-{op.source}" if isinstance(op, Recv) else "")
                              for r, op in enumerate(pending))
            raise CollectiveDeadlock(f"{collective.name}: no rank can progress ({state})")
    return results, logs  # type: ignore[return-value]
