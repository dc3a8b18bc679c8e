"""Alpha-beta cost of exactly the communication primitives and collectives this package runs.

Two kinds of function per primitive, both pure:
  * ``*_sent(rank, ...) -> (messages, bytes)``: what one rank sends. The communication executors
    count with these same functions, so counters and models cannot drift apart.
  * ``*_seconds(net, ...) -> float``: the critical-path time on a network with the given
    `AlphaBeta`, assuming every rank enters the call at the same moment and each step of the
    schedule waits for its slowest message.

Schedules modelled (shared with `ssgd.comm`):
  * ring allreduce (reduce-scatter + allgather, 2(P-1) steps, chunks as `torch.tensor_split`);
  * ring allgather(v) (P-1 steps; the block sizes may differ per rank);
  * binomial-tree broadcast from rank 0 (ceil(log2 P) rounds);
  * the gTop-k bit-mask binomial reduce to rank 0 (ceil(log2 P) rounds) + broadcast.

With m = d elements of 4 bytes, the dense ring allreduce is the paper's 2(P-1)alpha + 2(P-1)/P m beta
(exactly when P divides m), and gTop-k is the first published form 2 alpha log P + 4 k log P beta
(beta per 4-byte element; Shi et al., ICDCS 2019, arXiv:1901.04359; the hclhkbu/gtopkssgd README
before 2019-07-09, which now prints alpha log P + 2k log P beta). Our Top-k allgather is a
ring, (P-1)(alpha + 8k beta) per call, where the paper writes alpha log P + 2(P-1)k beta (recursive
doubling latency); the bandwidth terms agree.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from ssgd.perf.alphabeta import AlphaBeta

ELEMENT_BYTES = 4          # float32 values and int32 indices
SPARSE_ENTRY_BYTES = 8     # one (int32 index, float32 value) pair on the wire (narrower: ssgd.comm.wire.index_bytes)
HALF_ENTRY_BYTES = 6       # one (int32 index, fp16 / bf16 value) pair (`compressor.wire.values=fp16|bf16`)


def rounds(P: int) -> int:
    """ceil(log2 P): rounds of a binomial tree over P ranks (0 for P = 1)."""
    return (P - 1).bit_length()


def ring_chunks(n: int, P: int) -> list[int]:
    """Chunk lengths of an n-element vector cut into P parts, as `torch.tensor_split` cuts it."""
    q, r = divmod(n, P)
    return [q + 1 if i < r else q for i in range(P)]


# --- point to point ---------------------------------------------------------------------------
def p2p_sent(nbytes: int) -> tuple[int, int]:
    return 1, nbytes


# --- ring allreduce ---------------------------------------------------------------------------
def allreduce_sent(rank: int, P: int, n: int, itemsize: int = ELEMENT_BYTES) -> tuple[int, int]:
    """Ring allreduce of n elements: rank r sends every chunk but (r+1)%P in the reduce-scatter
    and every chunk but (r+2)%P in the allgather."""
    if P == 1:
        return 0, 0
    c = ring_chunks(n, P)
    return 2 * (P - 1), itemsize * (2 * n - c[(rank + 1) % P] - c[(rank + 2) % P])


def allreduce_seconds(net: AlphaBeta, P: int, n: int, itemsize: int = ELEMENT_BYTES) -> float:
    """2(P-1) ring steps, each bounded by the largest chunk."""
    if P == 1:
        return 0.0
    return 2 * (P - 1) * net.message(itemsize * max(ring_chunks(n, P)))


# --- ring allgather(v) ------------------------------------------------------------------------
def allgatherv_sent(rank: int, block_bytes: Sequence[int]) -> tuple[int, int]:
    """Ring allgather: rank r forwards every block except that of rank (r+1)%P."""
    P = len(block_bytes)
    if P == 1:
        return 0, 0
    return P - 1, sum(block_bytes) - block_bytes[(rank + 1) % P]


def allgatherv_seconds(net: AlphaBeta, block_bytes: Sequence[int]) -> float:
    """P-1 ring steps; in every step all blocks are in flight, so each step costs the largest."""
    P = len(block_bytes)
    if P == 1:
        return 0.0
    return (P - 1) * net.message(max(block_bytes))


# --- binomial broadcast from rank 0 -----------------------------------------------------------
def bcast_children(rank: int, P: int) -> list[int]:
    """Ranks that `rank` forwards to in the binomial broadcast rooted at 0.

    Rank r > 0 receives from r - 2^h (h = its highest set bit) and then sends to r + 2^j for every
    j > h with r + 2^j < P; rank 0 sends to every power of two below P.
    """
    h = rank.bit_length()          # first mask above rank's highest bit (1 for rank 0 ... )
    mask = 1 << h if rank else 1
    out = []
    while rank + mask < P:
        out.append(rank + mask)
        mask <<= 1
    return out


def bcast_sent(rank: int, P: int, nbytes: int) -> tuple[int, int]:
    n = len(bcast_children(rank, P))
    return n, n * nbytes


def bcast_seconds(net: AlphaBeta, P: int, nbytes: int) -> float:
    return rounds(P) * net.message(nbytes)


# --- collectives built on the primitives ------------------------------------------------------
def dense_seconds(net: AlphaBeta, P: int, d: int) -> float:
    """Dense S-SGD: ring allreduce of the d float32 gradient elements."""
    return allreduce_seconds(net, P, d)


def dense16_seconds(net: AlphaBeta, P: int, d: int) -> float:
    """Dense S-SGD with 16-bit values (scheme dense16): ring allreduce of d 2-byte elements."""
    return allreduce_seconds(net, P, d, 2)


def sparse_allgather_seconds(net: AlphaBeta, counts: Sequence[int], entry_bytes: int = SPARSE_ENTRY_BYTES) -> float:
    """Top-k / Random-k / Gaussian-k S-SGD: ring allgather of each rank's (index, value) pairs of
    `entry_bytes` each (8; 6 with 16-bit values)."""
    return allgatherv_seconds(net, [entry_bytes * c for c in counts])


def gtopk_sent(rank: int, P: int, k: int, entry_bytes: int = SPARSE_ENTRY_BYTES) -> tuple[int, int]:
    """gTopKAllReduce: one k-entry message up the tree (ranks > 0), then the broadcast; `entry_bytes`
    per entry (8: 2k int32; 6 with 16-bit values)."""
    nbytes = entry_bytes * k
    m, b = bcast_sent(rank, P, nbytes)
    return m + (1 if rank else 0), b + (nbytes if rank else 0)


def gtopk_seconds(net: AlphaBeta, P: int, k: int, entry_bytes: int = SPARSE_ENTRY_BYTES) -> float:
    """ceil(log2 P) reduce rounds + ceil(log2 P) broadcast rounds of 8k bytes each
    (= 2 alpha log P + 4 k log P beta_element for P a power of two); `entry_bytes` k with 16-bit values."""
    return 2 * rounds(P) * net.message(entry_bytes * k)


def reduce_children(rank: int, P: int) -> list[int]:
    """Ranks that send to `rank` in the gTop-k bit-mask reduce: rank | 2^j for every 2^j below rank's
    lowest set bit (every power of two below P for rank 0) with rank | 2^j < P."""
    out, mask = [], 1
    while mask < P and not rank & mask:
        if rank | mask < P:
            out.append(rank | mask)
        mask <<= 1
    return out


def gtopk_strict_sent(rank: int, P: int, k: int, entry_bytes: int = SPARSE_ENTRY_BYTES) -> tuple[int, int]:
    """gTopKAllReduce with the strict residual rule: `gtopk_sent` plus one k-byte survival mask to
    each of the rank's reduce-tree children."""
    m, b = gtopk_sent(rank, P, k, entry_bytes)
    n = len(reduce_children(rank, P))
    return m + n, b + n * k


def gtopk_strict_seconds(net: AlphaBeta, P: int, k: int, entry_bytes: int = SPARSE_ENTRY_BYTES) -> float:
    """`gtopk_seconds` plus ceil(log2 P) rounds of one k-byte mask down the reduce tree (rank 0
    sends its ceil(log2 P) masks one after another; every other path is no longer)."""
    return gtopk_seconds(net, P, k, entry_bytes) + rounds(P) * net.message(k)


def paper_dense_seconds(net: AlphaBeta, P: int, d: int) -> float:
    """Closed form printed by the gTop-k paper: 2(P-1)alpha + 2(P-1)/P d beta_element."""
    return 2 * (P - 1) * net.alpha + 2 * (P - 1) / P * d * ELEMENT_BYTES * net.beta


def paper_topk_seconds(net: AlphaBeta, P: int, k: int) -> float:
    """gTop-k paper's Top-k AllGather form: alpha log2 P + 2(P-1) k beta_element."""
    return net.alpha * math.log2(P) + 2 * (P - 1) * k * ELEMENT_BYTES * net.beta


# --- Ok-Topk (Li and Hoefler, PPoPP 2022; ssgd.comm.collectives.oktopk) -------------------------------------
def balance_moves(counts: Sequence[int]) -> list[tuple[int, int, int, int]]:
    """(source, target, first, last) for every piece that moves: positions [first, last) of source's entries go to
    target, so that target j ends with positions [j K / P, (j + 1) K / P) of the K = sum(counts) in rank order.
    In increasing source, then target order; O(P + pieces): the targets a source's positions reach are
    consecutive, and the first of them never decreases from one source to the next."""
    P, K = len(counts), sum(counts)
    bound = [j * K // P for j in range(P + 1)]
    moves, start, first = [], 0, 0
    for src, n in enumerate(counts):
        end = start + n
        while first < P - 1 and bound[first + 1] <= start:     # targets that end at or before start get none
            first += 1
        dst = first
        while dst < P and bound[dst] < end:
            lo, hi = max(start, bound[dst]), min(end, bound[dst + 1])
            if lo < hi and dst != src:
                moves.append((src, dst, lo - start, hi - start))
            dst += 1
        start = end
    return moves


def oktopk_sent(rank: int, P: int, to_others: int, selected: Sequence[int], exact: bool,
                regions: bool, entry_bytes: int = SPARSE_ENTRY_BYTES) -> tuple[int, int]:
    """What rank `rank` sends in one Ok-Topk call: `to_others` of its selected entries lie in other ranks'
    regions (8 bytes each, after a 4-byte count to each of the P - 1 others); `selected[j]` entries of rank j's
    region are kept for the result (on an exact call: its top-min(k, n_j) candidates). Then: the selected counts
    are gathered (8 bytes each), the pieces of `balance_moves(selected)` move, and the balanced blocks are
    gathered. An exact call first gathers every rank's payload count (8 bytes); a call that recomputes the
    regions first gathers every rank's P - 1 int64 quantiles."""
    if P == 1:
        return 0, 0
    K = sum(selected)
    balanced = [(j + 1) * K // P - j * K // P for j in range(P)]
    moved = [(b - a) for src, _, a, b in balance_moves(selected) if src == rank]
    messages = 2 * (P - 1) + len(moved)
    nbytes = 4 * (P - 1) + entry_bytes * (to_others + sum(moved))
    for on, blocks in ((regions, [8 * (P - 1)] * P), (exact, [8] * P), (True, [8] * P),
                       (True, [entry_bytes * n for n in balanced])):
        if on:
            m, b = allgatherv_sent(rank, blocks)
            messages, nbytes = messages + m, nbytes + b
    return messages, nbytes


def oktopk_seconds(net: AlphaBeta, P: int, k: int) -> float:
    """A reuse call with balanced regions and nothing to move: P - 1 rotated exchanges (a count and k/P entries
    each), a ring gather of the selected counts (8 bytes), then a ring allgatherv of k/P entries per rank:
    4(P - 1) alpha + 16 k (P - 1) / P beta (per byte; 8-byte entries), the counts' bytes aside. Exact calls and
    region updates (every tau, tau' calls) add a gather of the payload counts, of the quantiles, and larger
    blocks."""
    if P == 1:
        return 0.0
    share = SPARSE_ENTRY_BYTES * k / P
    return (P - 1) * (net.message(4) + net.message(share) + net.message(8) + net.message(share))


def oktopk_paper_seconds(net: AlphaBeta, P: int, k: int) -> float:
    """The paper's bound (Eq. 3): (2P + 2 log2 P) alpha + 6 k (P - 1) / P beta_element, 4-byte elements."""
    return (2 * P + 2 * math.log2(P)) * net.alpha + 6 * k * (P - 1) / P * ELEMENT_BYTES * net.beta

# --- TopkDSA: SparCML's sparse recursive doubling (ssgd.comm.collectives.sparcml) ----------------
# Its bytes depend on the fill-in, how much the ranks' supports overlap, so they have no closed form in
# (P, k); the functions below give the worst case, disjoint supports, from each rank's entry count.
TOPKDSA_COUNT_BYTES = 4    # the int32 count sent before each vector


def topkdsa_vector_bytes(n: int, d: int, entry_bytes: int = SPARSE_ENTRY_BYTES, value_bytes: int = ELEMENT_BYTES) -> int:
    """Bytes of a partial sum of support n on the wire: `entry_bytes` n sparse (8 n), or `value_bytes` d (4 d)
    once that is fewer (the dense switch; 6 and 2 with 16-bit values)."""
    return min(entry_bytes * n, value_bytes * d)


def topkdsa_pairs(P: int) -> list[list[tuple[int, int]]]:
    """The stages of the schedule as (lower, higher) rank pairs, p2 = 2^floor(log2 P): the fold (higher
    sends to lower), log2 p2 rounds of recursive doubling (both send), the unfold (lower sends to higher)."""
    p2 = 1 << (P.bit_length() - 1)
    fold = [(r, r + p2) for r in range(P - p2)]
    swaps = [[(r, r ^ (1 << j)) for r in range(p2) if r < r ^ (1 << j)] for j in range(p2.bit_length() - 1)]
    return [fold, *swaps, fold]


def topkdsa_transfers(P: int, d: int, counts: Sequence[int], entry_bytes: int = SPARSE_ENTRY_BYTES,
                      value_bytes: int = ELEMENT_BYTES) -> list[list[list[tuple[int, int]]]]:
    """Per stage (`topkdsa_pairs`), per pair: its (sender, vector bytes) in order, with disjoint supports
    (a partial sum's support is the sum of its ranks' counts, at most d)."""
    support = [min(int(c), d) for c in counts]
    stages = topkdsa_pairs(P)
    out = []
    for s, pairs in enumerate(stages):
        stage = []
        for lo, hi in pairs:
            b_lo, b_hi = (topkdsa_vector_bytes(support[r], d, entry_bytes, value_bytes) for r in (lo, hi))
            if s == len(stages) - 1 and s > 0:                  # unfold: the total back to the extra rank
                stage.append([(lo, b_lo)])
                support[hi] = support[lo]
                continue
            stage.append([(hi, b_hi)] if s == 0 else [(lo, b_lo), (hi, b_hi)])
            support[lo] = min(support[lo] + support[hi], d)
            support[hi] = support[lo]
        out.append(stage)
    return out


def topkdsa_worst_sent(rank: int, P: int, d: int, counts: Sequence[int], entry_bytes: int = SPARSE_ENTRY_BYTES,
                       value_bytes: int = ELEMENT_BYTES) -> tuple[int, int]:
    """TopkDSA with disjoint supports (`counts[r]`: rank r's entries): a count and a vector per transfer."""
    sent = [b for stage in topkdsa_transfers(P, d, counts, entry_bytes, value_bytes)
            for pair in stage for src, b in pair if src == rank]
    return 2 * len(sent), sum(TOPKDSA_COUNT_BYTES + b for b in sent)


def topkdsa_seconds(net: AlphaBeta, P: int, d: int, counts: Sequence[int], entry_bytes: int = SPARSE_ENTRY_BYTES,
                    value_bytes: int = ELEMENT_BYTES) -> float:
    """TopkDSA's time with disjoint supports (the worst case): per stage, its slowest pair, whose messages
    (a count, then the vector, from each sender in turn) go one after another."""
    stages = topkdsa_transfers(P, d, counts, entry_bytes, value_bytes)
    return sum(max((sum(net.message(TOPKDSA_COUNT_BYTES) + net.message(b) for _, b in pair) for pair in stage),
                   default=0.0) for stage in stages)
