"""Ok-Topk's sparse allreduce (Li and Hoefler, "Near-Optimal Sparse Allreduce for Distributed Deep Learning",
PPoPP 2022, DOI 10.1145/3503221.3508399), written from the paper's description (its released code is not used).

Each rank brings its local selection (`ssgd.compress.oktopk.OkTopkSelect`: the exact top-k every `tau` steps, the
entries above the reused local threshold in between). Two phases:

1. **Split and reduce** (a sparse reduce-scatter). The index space [0, d) is cut into P regions; rank j owns
   region j. Every `tau_prime` calls the boundaries are recomputed from where the ranks' selected entries fall:
   each rank gathers the others' local P-quantiles of its selected indices (an Allgatherv of P - 1 int64), and
   boundary j is the mean of the ranks' j-th quantiles, so every region holds about the same number of entries.
   In step s = 1 .. P - 1, rank r sends its entries of region r + s to rank r + s and receives rank r - s's
   entries of region r (the paper's rotated order). Each exchange is a 4-byte count, then the packed entries.
   Blocking sends cannot deadlock: each cycle of the shift alternates senders and receivers. Rank j sums its
   region's entries in rank order (`sum_sparse`), the same bits on every executor.
2. **Selection and allgatherv.**
   - On an exact call (every `tau`-th, counting from the first), each rank contributes its region's
     min(k, n_j) largest entries. After the Allgatherv every rank takes the global top-k of the gathered
     candidates (ties by index) and keeps the k-th magnitude as the global threshold. k is the largest payload
     count: the exact top-k's k, the same on every rank.
   - On the other calls, each rank contributes its region's entries whose magnitude reaches the reused global
     threshold, and the gathered entries are the result: about k of them.

With tau = 1 the result is Topk(sum_i Topk(u_i)): the global top-k of the sum of the local selections, the
paper's statement. Error feedback: a rank's entries whose index is in the result count as sent (`support`); the
rest stay in its residual.

How ours differs from the paper: the Allgatherv is the lab's ring op, not recursive doubling; each exchange of
phase 1 sends a 4-byte count first; an exact call gathers each region's top-min(k, n_j) candidates (about P k
entries in all, where the paper's bound assumes k; docs/zoo.md measures it). The balancing before the final
Allgatherv is the paper's: the selected counts are gathered and pieces move so that every rank holds K / P
(`_balance`). Messages and bytes are counted by the ops; `ssgd.perf.cost.oktopk_sent` gives the same counts
from the sizes.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ssgd.comm.base import Collective, Program, Reduced
from ssgd.comm.ops import Allgatherv, Recv, Send
from ssgd.comm.wire import FP32, MAX_NUMEL, WireFormat
from ssgd.errors import BadArgument
from ssgd.payload import Payload, Sparse, sum_sparse
from ssgd.perf import cost
from ssgd.perf.alphabeta import AlphaBeta

BALANCE_TAG = 1 << 14      # above the split phase's tags (2 s, 2 s + 1 for s < P <= 8,192)


@dataclass
class _RankState:
    """What one rank keeps between calls: the call count, the regions' boundaries and the global threshold."""

    calls: int = 0
    bounds: Tensor | None = None          # int64 [P + 1]: region j is [bounds[j], bounds[j + 1])
    threshold: float = 0.0                # the last exact call's k-th magnitude


class OkTopkAllreduce(Collective):
    """Ok-Topk's sparse allreduce (module docstring). tau: calls between exact selections (>= 1); tau_prime:
    calls between recomputations of the region boundaries (>= 1); values: the wire format of the values (fp32,
    fp16, bf16: 6-byte entries, every partial sum rounded to it before it travels, as gTop-k's 16-bit mode). State per rank (`state_dict(rank)`), so one
    instance serves one run, all its ranks in this process."""

    name = "oktopk_allreduce"
    max_numel = MAX_NUMEL

    def __init__(self, tau: int = 1, tau_prime: int = 1, values: str = "fp32") -> None:
        for key, value in (("tau", tau), ("tau_prime", tau_prime)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BadArgument(key, value, "must be an integer >= 1 (calls)")
        self.tau, self.tau_prime = tau, tau_prime
        self.wire = WireFormat(values)
        self._ranks: dict[int, _RankState] = {}

    def fresh(self) -> OkTopkAllreduce:
        """A new instance of the same periods: each stream of calls (a DDP bucket) keeps its own thresholds."""
        return OkTopkAllreduce(self.tau, self.tau_prime, self.wire.values)

    def state_dict(self, rank: int) -> dict:
        """Rank `rank`'s state, as a checkpoint keeps it."""
        s = self._ranks.get(rank, _RankState())
        return {"calls": s.calls, "bounds": None if s.bounds is None else s.bounds.clone(), "threshold": s.threshold}

    def load_state_dict(self, rank: int, state: dict) -> None:
        self._ranks[rank] = _RankState(int(state["calls"]), state["bounds"], float(state["threshold"]))

    def program(self, rank: int, P: int, payload: Payload) -> Program:
        if not isinstance(payload, Sparse):
            raise TypeError("OkTopkAllreduce needs a Sparse payload (compressor=oktopk)")
        st = self._ranks.setdefault(rank, _RankState())
        if st.calls % self.tau_prime == 0 or st.bounds is None or st.bounds.numel() != P + 1 \
                or int(st.bounds[-1]) != payload.numel:
            st.bounds = yield from _regions(rank, P, payload)
        region = yield from split_reduce(rank, P, payload, st.bounds, self.wire)
        if st.calls % self.tau == 0:
            total, st.threshold = yield from _exact(rank, P, payload, region, self.wire)
        else:
            total = yield from _above(rank, P, region, st.threshold, self.wire)
        st.calls += 1
        return Reduced(total, P, support=total.idx)

    def model_seconds(self, net: AlphaBeta, P: int, d: int, counts: Sequence[int]) -> float:
        return cost.oktopk_seconds(net, P, max(counts, default=0))


def _regions(rank: int, P: int, payload: Sparse) -> Program:
    """The region boundaries (int64 [P + 1]) from every rank's local P-quantiles of its selected indices."""
    idx, d = payload.idx.sort().values, payload.numel
    n = idx.numel()
    cuts = torch.tensor([(j * d) // P for j in range(1, P)], dtype=torch.int64) if n == 0 else \
        idx[torch.tensor([(j * n) // P for j in range(1, P)], dtype=torch.int64)]
    blocks = yield Allgatherv(cuts.to(torch.int64).contiguous())
    mean = torch.stack(list(blocks)).sum(0) // P if P > 1 else cuts
    inner = torch.cummax(mean.clamp(0, d), 0).values
    return torch.cat([torch.tensor([0]), inner, torch.tensor([d])]).to(torch.int64)


def _by_region(payload: Sparse, bounds: Tensor) -> list[Sparse]:
    """The payload's entries of each region, indices increasing (slices of one sorted copy)."""
    order = payload.idx.argsort()
    idx, val = payload.idx[order], payload.val[order]
    cuts = torch.searchsorted(idx, bounds).tolist()
    return [Sparse(idx[a:b], val[a:b], payload.numel) for a, b in zip(cuts, cuts[1:])]


def cycle_position(rank: int, P: int, s: int) -> int:
    """Rank's position in its cycle of the shift r -> r + s (mod P), counted from the cycle's smallest rank."""
    g = math.gcd(P, s)
    length, first = P // g, rank % g
    return ((rank - first) // g * pow(s // g, -1, length)) % length if length > 1 else 0


def split_reduce(rank: int, P: int, payload: Sparse, bounds: Tensor, wire: WireFormat = FP32) -> Program:
    """Phase 1: this rank's region, summed over all ranks in rank order in float32 (a Sparse, indices increasing);
    the entries travel in `wire`'s format (the payload's values already rounded to it by `encode`)."""
    regions = _by_region(payload, bounds)
    parts: list[Sparse | None] = [None] * P
    parts[rank] = regions[rank]
    for s in range(1, P):
        dest, src = (rank + s) % P, (rank - s) % P
        mine = wire.pack(regions[dest])
        if cycle_position(rank, P, s) % 2 == 0:
            yield from _send(dest, mine, s)
            parts[src] = yield from _recv(src, s, payload.numel, wire)
        else:
            parts[src] = yield from _recv(src, s, payload.numel, wire)
            yield from _send(dest, mine, s)
    return sum_sparse([p for p in parts if p is not None])


def _send(dest: int, packed: Tensor, s: int) -> Program:
    yield Send(dest, torch.tensor([packed.numel()], dtype=torch.int32), tag=2 * s)
    yield Send(dest, packed, tag=2 * s + 1)


def _recv(src: int, s: int, numel: int, wire: WireFormat) -> Program:
    count = torch.zeros(1, dtype=torch.int32)
    yield Recv(src, count, tag=2 * s)
    buf = torch.empty(int(count[0]), dtype=wire.message(0).dtype)
    yield Recv(src, buf, tag=2 * s + 1)
    return wire.unpack(buf, numel)


def _on_wire(s: Sparse, wire: WireFormat) -> Sparse:
    """`s` with its values rounded to `wire` (as every receiver will hold them), in float32."""
    return Sparse(s.idx, wire.round(s.val).float(), s.numel) if wire.lossy else s


def _gather(rank: int, P: int, mine: Sparse, wire: WireFormat) -> Program:
    """Every rank's entries, concatenated in rank order (regions ascend, so indices increase), after balancing:
    the ranks' selected counts are gathered, and the entries move so that rank j holds positions
    [j K / P, (j + 1) K / P) of the K in global order (`_balance`); then one Allgatherv."""
    mine = _on_wire(mine, wire)
    counts = yield Allgatherv(torch.tensor([len(mine)], dtype=torch.int64))
    balanced = yield from _balance(rank, P, mine, [int(c) for c in counts], wire)
    blocks = yield Allgatherv(wire.pack(wire.encode(balanced)))
    parts = [wire.unpack(b, mine.numel) for b in blocks]
    return Sparse(torch.cat([p.idx for p in parts]), torch.cat([p.val for p in parts]), mine.numel)


def _balance(rank: int, P: int, mine: Sparse, counts: list[int], wire: WireFormat) -> Program:
    """This rank's balanced block. Pieces only move between ranks whose ranges overlap, never both ways between
    two ranks; moves to higher ranks run first (each rank receives from lower ones, then sends up), then moves
    to lower ranks (receive from higher ones, then send down), so blocking sends cannot deadlock."""
    moves = cost.balance_moves(counts)
    got: dict[int, Sparse] = {}
    stay = torch.ones(len(mine), dtype=torch.bool)
    for up in (True, False):
        for src, dst, a, b in sorted((m for m in moves if (m[1] > m[0]) == up and m[1] == rank), reverse=not up):
            buf = wire.message(b - a)
            yield Recv(src, buf, tag=BALANCE_TAG)
            got[src] = wire.unpack(buf, mine.numel)
        for src, dst, a, b in sorted((m for m in moves if (m[1] > m[0]) == up and m[0] == rank),
                                     key=lambda m: m[1], reverse=not up):
            yield Send(dst, wire.pack(wire.encode(Sparse(mine.idx[a:b], mine.val[a:b], mine.numel))), tag=BALANCE_TAG)
            stay[a:b] = False
    kept = Sparse(mine.idx[stay], mine.val[stay], mine.numel)
    pieces = [got[i] for i in sorted(got) if i < rank] + [kept] + [got[i] for i in sorted(got) if i > rank]
    return Sparse(torch.cat([p.idx for p in pieces]), torch.cat([p.val for p in pieces]), mine.numel)


def _top(s: Sparse, k: int) -> Tensor:
    """Positions of s's k largest magnitudes, ties to the smaller index (s's indices increase)."""
    order = torch.sort(s.val.abs(), descending=True, stable=True).indices
    return order[:k]


def _exact(rank: int, P: int, payload: Sparse, region: Sparse, wire: WireFormat) -> Program:
    """An exact call: the global top-k from every region's top-min(k, n_j) candidates, and its k-th magnitude."""
    counts = yield Allgatherv(torch.tensor([len(payload)], dtype=torch.int64))
    k = int(torch.stack(list(counts)).max())
    candidates = region
    if len(region) > k:
        keep = _top(region, k).sort().values
        candidates = Sparse(region.idx[keep], region.val[keep], region.numel)
    gathered = yield from _gather(rank, P, candidates, wire)
    if len(gathered) <= k:
        return gathered, 0.0
    keep = _top(gathered, k)
    threshold = float(gathered.val[keep[-1]].abs())
    keep = keep.sort().values
    return Sparse(gathered.idx[keep], gathered.val[keep], gathered.numel), threshold


def _above(rank: int, P: int, region: Sparse, threshold: float, wire: WireFormat) -> Program:
    """A reuse call: every region's entries whose magnitude reaches the reused global threshold."""
    keep = region.val.abs() >= threshold
    gathered = yield from _gather(rank, P, Sparse(region.idx[keep], region.val[keep], region.numel), wire)
    return gathered
