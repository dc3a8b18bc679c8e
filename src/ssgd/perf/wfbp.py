"""Wait-free backpropagation (WFBP) timeline and its no-overlap counterpart; pure functions on floats.

The authors' simulator (`Simulator.wfbp` in hclhkbu/gtopkssgd scripts/icdcs2019/communication.py): the
layers are listed in backward order (output layer first), layer l has backward compute c_l and
communication (its own allreduce) m_l. Backward runs back to back, so layer l's backward starts at
start_l = sum_{j<l} c_j and ends at start_l + c_l; its allreduce starts when both its gradient is
ready and the previous allreduce is done (one communication stream):

    s_l = max(s_{l-1} + m_{l-1}, start_l + c_l),     s_1 = c_1,
    t_WFBP = s_L + m_L                               ("total time" in the script; forward excluded).

Without overlap ("SyncEASGD" in the script) the whole gradient goes in one collective after the
backward pass: t = t_b + t_c(sum of sizes).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence


def _check(compute: Sequence[float], comm: Sequence[float]) -> None:
    if len(compute) != len(comm):
        raise ValueError(f"wfbp: {len(compute)} compute times but {len(comm)} communication times")
    for x in (*compute, *comm):
        if not x >= 0:                            # also rejects NaN
            raise ValueError(f"wfbp: times must be >= 0, got {x!r}")


def wfbp_starts(compute: Sequence[float], comm: Sequence[float]) -> list[float]:
    """Start time s_l of every layer's communication (the authors' `Simulator.wfbp`).

    compute, comm: c_l and m_l in seconds, same length, backward order (first = output layer).
    Returns [s_1, ..., s_L]; empty for no layers.
    """
    _check(compute, comm)
    starts: list[float] = []
    done_compute, comm_free = 0.0, 0.0            # end of backward so far; when the link is free
    for c, m in zip(compute, comm):
        done_compute += c                         # = start_l + c_l
        s = max(comm_free, done_compute)
        starts.append(s)
        comm_free = s + m
    return starts


def wfbp_seconds(compute: Sequence[float], comm: Sequence[float]) -> float:
    """t_WFBP = s_L + m_L: backward plus the part of communication it cannot hide.

    Bounds (any input): max(sum c, c_1 + sum m) <= t_WFBP <= sum c + sum m. Zero layers take 0 s.
    """
    starts = wfbp_starts(compute, comm)
    return starts[-1] + comm[-1] if starts else 0.0


def no_overlap_seconds(compute: Sequence[float], sizes: Sequence[int],
                       comm_of: Callable[[int], float]) -> float:
    """t_b + t_c(sum of sizes): backward of every layer, then one collective of all gradients
    (the authors' `Simulator.synceasgd`, "SyncEASGD"). comm_of maps an element count to seconds, e.g.
    `lambda n: cost.allreduce_seconds(net, P, n)`."""
    if len(compute) != len(sizes):
        raise ValueError(f"no_overlap: {len(compute)} compute times but {len(sizes)} sizes")
    _check(compute, [0.0] * len(compute))
    return sum(compute) + comm_of(sum(sizes))
