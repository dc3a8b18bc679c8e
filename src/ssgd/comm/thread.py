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


def run_threads(collective: Collective, payloads: Sequence[Payload],
                net: AlphaBeta | None = None) -> tuple[list[Reduced], list[RankLog]]:
    """Run `collective` on all P = len(payloads) ranks; returns per-rank results and logs."""
    P = len(payloads)
    gens = [collective.program(r, P, payloads[r]) for r in range(P)]
    logs = [RankLog() for _ in range(P)]
    pending: list[Op | None] = [None] * P
    results: list[Reduced | None] = [None] * P

    def resume(r: int, value: Any = None) -> None:
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
                    if net is not None:
                        end = max(logs[r].clock, logs[op.dest].clock) + op.seconds(net)
                        logs[r].clock = logs[op.dest].clock = end
                    resume(r)
                    resume(op.dest)
                    progressed = True
        if not progressed and all(isinstance(op, (Allreduce, Allgatherv, Bcast)) for op in pending):
            ops: list[Op] = pending  # type: ignore[assignment]
            value, block_bytes = _collective_result(ops)
            if net is not None:
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
