"""Single-process reference implementations ("oracles") of the package's collectives.

Written from the specification only (not from `ssgd.comm`), with plain Python dicts and numpy
float32 scalars, so that a bug shared by the package's tensor code and these oracles is unlikely.
Every function takes the P ranks' payloads as plain data and returns plain data:

  * dense vectors: numpy float32 arrays;
  * sparse vectors: dicts {index: numpy.float32 value}.

float32 rounding is reproduced exactly: every addition is one IEEE float32 addition of two
float32 numbers, done in the order the specification prescribes.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

F32 = np.float32


class AmbiguousTopK(ValueError):
    """The k-th and (k+1)-th largest magnitudes tie: the specification does not fix the result.
    Tests must draw inputs that avoid this (distinct magnitudes)."""


# --- 1. dense allreduce -------------------------------------------------------------------------
def dense_total(vectors: Sequence[np.ndarray]) -> np.ndarray:
    """((g0 + g1) + g2) + ... element-wise, in float32, rank order."""
    acc = np.array(vectors[0], dtype=F32, copy=True)
    for g in vectors[1:]:
        acc = (acc + np.asarray(g, dtype=F32)).astype(F32)
    return acc


def dense_average(vectors: Sequence[np.ndarray]) -> np.ndarray:
    """The rank-order float32 sum divided by P (one float32 division per element)."""
    return (dense_total(vectors) / F32(len(vectors))).astype(F32)


# --- 2. sparse allgather ------------------------------------------------------------------------
def allgather_total(entries: Sequence[dict[int, float]], d: int) -> np.ndarray:
    """G = zeros(d); for each rank in order, G[i] += v for each of its entries."""
    G = [F32(0.0)] * d
    for rank_entries in entries:
        for i, v in rank_entries.items():
            G[i] = F32(G[i] + F32(v))
    return np.array(G, dtype=F32)


def allgather_average(entries: Sequence[dict[int, float]], d: int) -> np.ndarray:
    return (allgather_total(entries, d) / F32(len(entries))).astype(F32)


# --- 3. gTopKAllReduce --------------------------------------------------------------------------
def topk_of_dict(vec: dict[int, np.float32], k: int) -> dict[int, np.float32]:
    """The k entries of largest |value|; all of them if there are at most k.

    Raises AmbiguousTopK when the cut falls between two equal magnitudes."""
    if len(vec) <= k:
        return dict(vec)
    ranked = sorted(vec.items(), key=lambda item: abs(float(item[1])), reverse=True)
    if abs(float(ranked[k - 1][1])) == abs(float(ranked[k][1])):
        raise AmbiguousTopK(f"tie at the top-{k} boundary: {ranked[k - 1]} vs {ranked[k]}")
    return dict(ranked[:k])


def merge(a: dict[int, np.float32], b: dict[int, np.float32], k: int) -> dict[int, np.float32]:
    """Sum two sparse vectors (common indices: a + b in float32), then keep the top k."""
    out = dict(a)
    for i, v in b.items():
        out[i] = F32(out[i] + v) if i in out else F32(v)
    return topk_of_dict(out, k)


def gtopk_pairs(P: int) -> list[list[tuple[int, int]]]:
    """The reduce schedule: for each round, the (receiver, sender) pairs, receivers ascending."""
    rounds, active, mask = [], set(range(P)), 1
    while mask < P:
        pairs = []
        for r in sorted(active):
            if r & mask:
                continue                      # a sender this round; handled by its receiver
            if r + mask < P:
                assert r + mask in active, (P, mask, r)
                pairs.append((r, r + mask))
        active -= {s for _, s in pairs}
        rounds.append(pairs)
        mask *= 2
    return rounds


def gtopk(entries: Sequence[dict[int, float]], k: int) -> dict[int, np.float32]:
    """Simulate the bit-mask binomial reduce to rank 0 with merge-and-truncate at every step;
    returns rank 0's final vector {I_g: V_g} (which the broadcast hands to every rank)."""
    current = [{int(i): F32(v) for i, v in e.items()} for e in entries]
    for pairs in gtopk_pairs(len(entries)):
        for receiver, sender in pairs:
            current[receiver] = merge(current[receiver], current[sender], k)
            current[sender] = None            # takes no further part
    return current[0]


def gtopk_sent_strict(entries: Sequence[dict[int, float]], k: int) -> list[set[int]]:
    """The same tree as `gtopk`, tracking which ranks' values each kept entry sums; returns, per
    rank, the indices of its own entries whose value is in rank 0's final sum (the strict residual
    rule: only those count as sent)."""
    current = [{int(i): (F32(v), {r}) for i, v in e.items()} for r, e in enumerate(entries)]
    for pairs in gtopk_pairs(len(entries)):
        for receiver, sender in pairs:
            union = dict(current[receiver])
            for i, (v, who) in current[sender].items():
                union[i] = (F32(union[i][0] + v), union[i][1] | who) if i in union else (v, who)
            kept = topk_of_dict({i: v for i, (v, _) in union.items()}, k)
            current[receiver] = {i: union[i] for i in kept}
            current[sender] = None
    return [{i for i, (_, who) in current[0].items() if r in who} for r in range(len(entries))]


def exact_topk_of_sum(entries: Sequence[dict[int, float]], k: int) -> dict[int, np.float32]:
    """What gTop-k is NOT in general: the top-k of the exact (rank-order) sum."""
    total: dict[int, np.float32] = {}
    for e in entries:
        for i, v in e.items():
            total[int(i)] = F32(total[int(i)] + F32(v)) if int(i) in total else F32(v)
    return topk_of_dict(total, k)


# --- 4. residual rule ---------------------------------------------------------------------------
def accounted(entries: dict[int, float], support: set[int] | None) -> dict[int, float]:
    """The entries whose index is in `support` (all of them when support is None)."""
    if support is None:
        return dict(entries)
    return {i: v for i, v in entries.items() if i in support}


# --- 5. Ok-Topk (Li and Hoefler, PPoPP 2022) ------------------------------------------------------------
def oktopk_calls(calls: Sequence[Sequence[dict[int, float]]], tau: int) -> list[dict[int, np.float32]]:
    """Ok-Topk's results for a sequence of calls (each: the P ranks' selections), from the paper: on calls
    0, tau, 2 tau, ... the global top-k of the rank-order sum of the selections (k: the largest selection, as
    every rank's exact top-k has k entries), and the k-th magnitude becomes the global threshold (0 when the sum
    has at most k entries); on the other calls every entry of the sum whose magnitude reaches that threshold."""
    out, threshold = [], 0.0
    for c, entries in enumerate(calls):
        total: dict[int, np.float32] = {}
        for e in entries:
            for i, v in e.items():
                total[int(i)] = F32(total[int(i)] + F32(v)) if int(i) in total else F32(v)
        if c % tau == 0:
            k = max(len(e) for e in entries)
            top = topk_of_dict(total, k)
            threshold = min(abs(float(v)) for v in top.values()) if len(total) > k else 0.0
            out.append(top)
        else:
            out.append({i: v for i, v in total.items() if abs(float(v)) >= threshold})
    return out

# --- 5. TopkDSA: SparCML's sparse recursive doubling (Renggli et al., SC 2019) ------------------------
# A partial sum is a dict {index: float32} while its entries take no more bytes than d values (8 n <= 4 d), and a
# dense float32 array of length d from then on (zeros outside the support). Schedule, p2 = largest power of two
# <= P: fold (rank p2 + i's vector is added into rank i's: rank i's + rank p2 + i's), recursive doubling among
# ranks 0 .. p2 - 1 (round j: r and r XOR 2^j both take lower's + higher's), unfold (rank i's total to p2 + i).
# A 16-bit wire (entry 6 bytes, element 2) rounds every addition's float32 result with `rounding`.
def same(x: np.float32) -> np.float32:
    return x


def dsa_as_dense_if_large(v, d: int, entry_bytes: int = 8, value_bytes: int = 4):
    """The dense switch: a dict whose entries take more bytes than d values becomes an array (values copied)."""
    if isinstance(v, dict) and entry_bytes * len(v) > value_bytes * d:
        out = np.zeros(d, dtype=F32)
        for i, x in v.items():
            out[i] = x
        return out
    return v


def dsa_add(lo, hi, d: int, rounding=same, entry_bytes: int = 8, value_bytes: int = 4):
    """lo + hi, lo the lower rank's partial sum: one float32 addition (then `rounding`) per index present in
    both (or, with a dense operand, per index of the other one); values present in one operand only are kept."""
    if isinstance(lo, dict) and isinstance(hi, dict):
        out = dict(lo)
        for i, x in hi.items():
            out[i] = rounding(F32(out[i] + x)) if i in out else x
        return dsa_as_dense_if_large(out, d, entry_bytes, value_bytes)
    if isinstance(lo, dict):
        out = np.array(hi, dtype=F32, copy=True)
        for i, x in lo.items():
            out[i] = rounding(F32(x + hi[i]))
        return out
    out = np.array(lo, dtype=F32, copy=True)
    if isinstance(hi, dict):
        for i, x in hi.items():
            out[i] = rounding(F32(lo[i] + x))
        return out
    for i in range(d):
        out[i] = rounding(F32(lo[i] + hi[i]))
    return out


def topkdsa(entries: Sequence[dict[int, float]], d: int, rounding=same, entry_bytes: int = 8,
            value_bytes: int = 4) -> tuple[list, list[list[int]]]:
    """Simulate the schedule on the ranks' entries (16-bit wire: values already rounded, `rounding` for each
    sum); returns (every rank's total: dict or float32 array, and per rank the bytes of each message it sent: a
    count of 4 bytes, then the vector: `entry_bytes` per entry or `value_bytes` per element)."""
    P = len(entries)
    fmt = (entry_bytes, value_bytes)
    plus = lambda lo, hi: dsa_add(lo, hi, d, rounding, *fmt)   # noqa: E731
    vector_bytes = lambda v: value_bytes * d if not isinstance(v, dict) else entry_bytes * len(v)   # noqa: E731
    p2 = 1
    while 2 * p2 <= P:
        p2 *= 2
    state = [dsa_as_dense_if_large({int(i): F32(v) for i, v in e.items()}, d, *fmt) for e in entries]
    sent: list[list[int]] = [[] for _ in range(P)]
    for i in range(P - p2):                                   # fold
        sent[p2 + i] += [4, vector_bytes(state[p2 + i])]
        state[i] = plus(state[i], state[p2 + i])
    mask = 1
    while mask < p2:                                          # recursive doubling
        new = list(state)
        for r in range(p2):
            sent[r] += [4, vector_bytes(state[r])]
            new[r] = plus(state[min(r, r ^ mask)], state[max(r, r ^ mask)])
        state = new
        mask *= 2
    for i in range(P - p2):                                   # unfold
        sent[i] += [4, vector_bytes(state[i])]
        state[p2 + i] = state[i]
    return state, sent
