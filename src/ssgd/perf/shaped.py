"""Collective times on links shaped by token buckets (Linux `tc tbf`: the testbed of docs/testbed.md).

The alpha-beta model (`ssgd.perf.alphabeta`, `ssgd.perf.cost`) charges alpha + n beta for every message.
A link shaped by a token bucket of rate R and depth B (tc's `rate` and `burst`) is not such a link: a
message that finds the bucket full passes its first B bytes at the host's own speed, and only the rest
at R; back-to-back messages find it drained (the testbed's measurements of both regimes: docs/testbed.md,
"The link model: what each term turned out to be").

`ShapedLink` is measured by one ping-pong whose messages find full buckets (`from_pingpong`; `make
alphabeta-testbed` idles before every round trip) plus tc's burst:

  * latency: the one-way time of a small message (the median of those <= 8 KiB);
  * beta: seconds per payload byte at the shaped rate (the slope of the two largest messages);
  * burst: payload bytes a full bucket lets through (tc's burst in bytes on the wire, times the payload
    share 1 / (beta x rate) of a frame);
  * host: the ping-pong's one-way times of the messages up to the burst, which leave at the host's speed,
    and host_beta, their last slope, beyond them.

A message of n bytes that finds `tokens` in its sender's bucket takes latency + max(h(n), (n - tokens)
beta), h(n) = the host time of n bytes less the latency (interpolated): the bytes leave at the host's
speed while tokens last, then as tokens come. Tokens come back at 1 / beta per second, up to `burst`.

`ShapedNet` keeps every rank's bucket through one call of a collective (all full when it starts: the calls
timed on the testbed follow a pause without traffic) and times the schedules the testbed's Open MPI runs
(pinned there: docs/testbed.md): a sender's message leaves at once (eager protocol) and arrives latency +
transfer later; the ring allreduce and ring allgatherv step in lock step, every rank sending to the next;
the binomial broadcast from rank 0 posts to all children at once, smallest subtree first; an Allgatherv
first gathers the block sizes (ceil(log2 P) small messages). `ssgd.perf.netsim.ShapedSim` keeps per-rank
clocks on it, so that `ssgd.comm.executors.thread.run_threads(..., net=link)` runs a collective's real program
on the link and adds each rank's given compute (`compute=`).
"""
from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from ssgd.perf.cost import reduce_children, ring_chunks, rounds

SMALL = 8192          # bytes: the latency regime of a ping-pong (`fit_alpha_beta_regimes`)


@dataclass(frozen=True)
class ShapedLink:
    """One token-bucket-shaped link (module docstring): latency, beta, burst >= 0; host: (bytes, one-way
    seconds) points in increasing size (at least one); host_beta >= 0, seconds per byte beyond the last."""

    latency: float
    beta: float
    burst: float
    host: tuple[tuple[float, float], ...]
    host_beta: float

    def __post_init__(self) -> None:
        for key in ("latency", "beta", "burst", "host_beta"):
            value = getattr(self, key)
            if not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"ShapedLink.{key}={value!r}: must be a number >= 0")
        sizes = [n for n, _ in self.host]
        if not sizes or sizes != sorted(set(sizes)):
            raise ValueError("ShapedLink.host: needs (bytes, seconds) points of increasing, distinct sizes")

    def host_seconds(self, nbytes: float) -> float:
        """Seconds n bytes take to leave at the host's speed (a full bucket), after the latency."""
        pts = self.host
        if nbytes <= pts[0][0]:
            return max(0.0, pts[0][1] - self.latency)
        for (n0, t0), (n1, t1) in zip(pts, pts[1:]):
            if nbytes <= n1:
                return max(0.0, t0 + (t1 - t0) * (nbytes - n0) / (n1 - n0) - self.latency)
        n_last, t_last = pts[-1]
        return max(0.0, t_last + (nbytes - n_last) * self.host_beta - self.latency)

    def transfer(self, nbytes: float, tokens: float) -> tuple[float, float]:
        """(seconds the n bytes take to leave after the latency, tokens left) for a sender holding `tokens`."""
        seconds = max(self.host_seconds(nbytes), (nbytes - tokens) * self.beta)
        if self.beta <= 0:
            return seconds, self.burst
        return seconds, min(self.burst, max(0.0, tokens + seconds / self.beta - nbytes))   # came in, went out

    def message(self, nbytes: float) -> float:
        """One message of n bytes into a full bucket: the ping-pong's one-way time."""
        return self.latency + self.transfer(nbytes, self.burst)[0]

    @classmethod
    def from_pingpong(cls, nbytes: Sequence[float], seconds: Sequence[float], burst_wire_bytes: float,
                      rate_wire_bytes_per_s: float) -> "ShapedLink":
        """The link of a ping-pong's one-way times (`ssgd.tools.calibrate --points`) on links of tc rate
        `rate_wire_bytes_per_s` and burst `burst_wire_bytes` (module docstring). ValueError, one line, when the
        sizes do not cover the latency regime, two sizes above the burst and two up to it."""
        pts = sorted((float(n), float(t)) for n, t in zip(nbytes, seconds, strict=True))
        small = sorted(t for n, t in pts if n <= SMALL)
        if not small or rate_wire_bytes_per_s <= 0 or burst_wire_bytes <= 0:
            raise ValueError(f"ShapedLink.from_pingpong needs sizes <= {SMALL} B, a rate and a burst > 0")
        (n1, t1), (n2, t2) = pts[-2], pts[-1]
        beta = (t2 - t1) / (n2 - n1)
        burst = burst_wire_bytes * min(1.0, 1.0 / (beta * rate_wire_bytes_per_s)) if beta > 0 else burst_wire_bytes
        host = tuple((n, t) for n, t in pts if n <= burst)
        if len(host) < 2 or n1 <= burst or beta <= 0:
            raise ValueError(f"ShapedLink.from_pingpong needs two sizes up to the burst ({burst:.0f} B) and two above it")
        (h1, s1), (h2, s2) = host[-2], host[-1]
        return cls(latency=small[len(small) // 2], beta=beta, burst=burst, host=host,
                   host_beta=max(0.0, (s2 - s1) / (h2 - h1)))


class ShapedNet:
    """Every rank's token bucket on a `ShapedLink` through one call of a collective, and the times of the
    schedules the collectives run (module docstring). Times are absolute seconds on the caller's clock."""

    def __init__(self, link: ShapedLink, P: int) -> None:
        self.link, self.P = link, P
        self.tokens = [link.burst] * P
        self.since = [0.0] * P            # when each rank's bucket last had `tokens`

    def _leave(self, rank: int, nbytes: float, start: float) -> float:
        """Rank `rank` starts sending n bytes at `start`: when they have left (its bucket updated)."""
        link = self.link
        held = self.tokens[rank]
        if link.beta > 0:
            held = min(link.burst, held + max(0.0, start - self.since[rank]) / link.beta)
        seconds, left = link.transfer(nbytes, held)
        self.tokens[rank], self.since[rank] = left, start + seconds
        return start + seconds

    def send(self, rank: int, nbytes: float, start: float) -> tuple[float, float]:
        """(when the sender is free, when the message has arrived) for one message sent at `start`."""
        left = self._leave(rank, nbytes, start)
        return left, left + self.link.latency

    def ring(self, blocks: Sequence[Sequence[float]], start: float) -> float:
        """Steps in lock step; in step s every rank r sends blocks[s][r] bytes to rank r + 1. When the last
        step has arrived everywhere."""
        for step in blocks:
            start = max(self.send(r, n, start)[1] for r, n in enumerate(step))
        return start

    def allreduce(self, n: int, itemsize: int, start: float) -> float:
        """Ring allreduce of n elements (ssgd.perf.cost's schedule): 2 (P - 1) steps of the chunks."""
        P = self.P
        if P == 1:
            return start
        c = [itemsize * x for x in ring_chunks(n, P)]
        reduce = [[c[(r - s) % P] for r in range(P)] for s in range(P - 1)]
        gather = [[c[(r + 1 - s) % P] for r in range(P)] for s in range(P - 1)]
        return self.ring(reduce + gather, start)

    def allgatherv(self, block_bytes: Sequence[int], start: float) -> float:
        """The block sizes (ceil(log2 P) rounds of 8-byte messages), then the ring allgatherv."""
        P = self.P
        if P == 1:
            return start
        for _ in range(rounds(P)):
            start = max(self.send(r, 8 * 2, start)[1] for r in range(P))
        steps = [[block_bytes[(r - s) % P] for r in range(P)] for s in range(P - 1)]
        return self.ring(steps, start)

    def bcast(self, nbytes: int, start: float) -> float:
        """Binomial broadcast from rank 0, as Open MPI's (coll tuned algorithm 6): a rank that has the data
        posts it to each of its children (`ssgd.perf.cost.reduce_children`: rank | 2^j for the bits below its
        lowest set one) at once, smallest subtree first, and its link sends them one after another. When the
        last rank has the data."""
        arrived, waiting = {}, [(start, 0)]
        while waiting:
            at, rank = heapq.heappop(waiting)
            arrived[rank] = at
            for child in reduce_children(rank, self.P):
                at, there = self.send(rank, nbytes, at)
                heapq.heappush(waiting, (there, child))
        return max(arrived.values())
