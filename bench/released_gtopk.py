"""The released gTop-k implementation, re-implemented as the baseline of `bench/comm.py`.

Source: `gtopk_sparse_allreduce` and the gTop-k branch of `AllReducer._sparse_allreduce` in
allreducer.py of the authors' released code, hclhkbu/gtopkssgd (the code of Shi et al., "A
Distributed Synchronous SGD Algorithm with Global Top-k Sparsification for Low Bandwidth Networks",
ICDCS 2019, arXiv:1901.04359). What it does, step by step as released:

  * send = concat(I, V): int64 indices and float32 values, which numpy upcasts to ONE float64 buffer
    (16 bytes per entry on the wire), handed to MPI as `[buf, MPI.FLOAT]`;
  * a binomial tree to rank 0 over int(log2 P) rounds: in each round the even members of the
    participating ranks `range(0, P, step)` receive from their right neighbour and merge, the odd
    members send and leave; `comm.Barrier()` after every round (pairing for P = 8: 0<-1, 2<-3,
    4<-5, 6<-7 | 0<-2, 4<-6 | 0<-4);
  * merge: `np.intersect1d` of the two index arrays; on common indices the received values are added
    to the own ones first (and zeroed on the received side), then the top-k by magnitude of the 2k
    candidate values is kept (`utils.topk`: the last k of `np.abs(x).argsort()`);
  * `comm.Bcast` of rank 0's 2k float64 numbers; the non-root ranks read them back as uint32
    indices and float32 values;
  * `included`: positions of this rank's ORIGINAL indices that are in the global set
    (`np.intersect1d(original_indexes, indexes, return_indices=True)[1]`);
  * decode (the trainer's `_sparse_allreduce`): into the reused flat float32 gradient buffer,
    `buf.fill_(0); buf[I_g] = V_g; buf /= P` (torch ops on the persistent merged-parameter tensor).

Deliberate deviations, none of which changes the bytes sent or the arithmetic:
  * `np.int` (removed in NumPy 1.24) is `np.int64`;
  * the logger calls, the unused `dtype` argument and `exist_workers` counter, and the branch that
    selects the top-k itself when no indices are passed (a hard-coded density 0.001) are left out:
    the caller passes the indices, as the released trainer does;
  * a number of ranks that is not a power of two raises ValueError up front; the released loop
    raises IndexError in its background thread there and the job hangs;
  * the input `values` are modified in place as released (merged into, then zeroed): pass a copy
    per call, as the released trainer does (it gathers the selected values afresh every step);
  * the released trainer's later per-layer split (`_pull_from_buffer`, which allocates a zero
    tensor per layer before pointing it at the buffer) is not part of `decode`, so the baseline's
    "with decode" time is, if anything, lower than the released trainer's.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch


def topk(tensor: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """`utils.topk` of the released code: the k entries of largest magnitude (last k of an argsort)."""
    indexes = np.abs(tensor).argsort()[-k:]
    return indexes, tensor[indexes]


def gtopk_sparse_allreduce(comm: Any, values: np.ndarray, indexes: np.ndarray,
                           storage: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One released gTop-k allreduce on this rank.

    values: float32 [k] (modified in place), indexes: int64 [k] of this rank's local top-k;
    storage: the caller's dict kept across calls, as released (the trainer passes an empty dict, and
    since `if storage:` is false for an empty dict the receive buffer is in fact allocated afresh
    on every call; 2k float64, small).
    Returns (V_g, I_g, included): the global set's values (float32) and indices (uint32), and the
    positions of `indexes` that are in I_g.
    """
    num_workers = comm.size
    rank = comm.rank
    if num_workers & (num_workers - 1):
        raise ValueError(f"the released gTop-k needs a power-of-two number of ranks, got {num_workers}")
    tensor = values
    k = len(indexes)
    original_indexes = indexes
    send_values = packed(indexes, values, k)
    recv_values = receive_buffer(storage, send_values, k)
    indexes, values = tree_to_root(comm, indexes, values, send_values, recv_values, k)
    if rank == 0:
        send_values = np.concatenate((indexes, values))
        indexes = indexes.astype(np.uint32)
        values = values.astype(np.float32)
        send_values[0:k] = indexes
        send_values[k:2 * k] = values
    else:
        send_values = recv_values[0:2 * k]
    comm.Bcast(send_values, root=0)
    tensor.fill(0.)
    if rank != 0:
        values = send_values[k:2 * k].astype(np.float32)
        indexes = send_values[0:k].astype(np.uint32)

    _, c1, _ = np.intersect1d(original_indexes, indexes, assume_unique=False, return_indices=True)
    return values, indexes, c1


def packed(indexes: np.ndarray, values: np.ndarray, k: int) -> np.ndarray:
    """The released send buffer: concat(I, V) upcast to one float64 array, I written as uint32, V as float32."""
    send_values = np.concatenate((indexes, values))
    send_values[0:k] = indexes.astype(np.uint32)
    send_values[k:2 * k] = values.astype(np.float32)
    return send_values


def receive_buffer(storage: dict | None, send_values: np.ndarray, k: int) -> np.ndarray:
    """The released receive buffer of 2k float64: storage["result_v2"] when kept and large enough, else a new one
    (kept only in a non-empty `storage`, as released)."""
    if storage is not None and "result_v2" in storage:
        recv_values = storage["result_v2"]
        if recv_values.size < k * 2:
            recv_values = np.zeros_like(send_values)
            if storage:
                storage["result_v2"] = recv_values
        return recv_values[0:k * 2]
    recv_values = np.zeros_like(send_values)
    if storage:                       # as released: an empty dict is falsy, so nothing is kept
        storage["result_v2"] = recv_values
    return recv_values


def tree_to_root(comm: Any, indexes: np.ndarray, values: np.ndarray, send_values: np.ndarray,
                 recv_values: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The binomial tree to rank 0 over int(log2 P) rounds, a Barrier after each: the even members of
    `range(0, P, step)` receive from their right neighbour and merge (`merge`), the odd ones send and leave.
    Returns this rank's (indexes, values) after its last merge (rank 0: the global set)."""
    from mpi4py import MPI

    num_workers, rank = comm.size, comm.rank
    num_round = int(np.log2(num_workers))
    step = 1
    participate_ranks = range(0, num_workers, step)
    for _ in range(num_round):
        if rank in participate_ranks:
            local_rank = participate_ranks.index(rank)
            if local_rank % 2 == 0:
                source = participate_ranks[local_rank + 1]
                comm.Recv([recv_values, MPI.FLOAT], source=source)
                indexes, values = merge(indexes, values, recv_values, k)
                send_values = packed(indexes, values, k)
            else:
                target = participate_ranks[local_rank - 1]
                comm.Send([send_values, MPI.FLOAT], dest=target)
        step *= 2
        participate_ranks = range(0, num_workers, step)
        comm.Barrier()
    return indexes, values


def merge(indexes: np.ndarray, values: np.ndarray, recv_values: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The released merge: received values added to the own ones on common indices (`values` in place; zeroed on
    the received side, in `recv_values`), then the top-k by magnitude of the 2k candidates."""
    tmp_indexes = recv_values[0:k].astype(np.int64)
    tmp_values = recv_values[k:2 * k]

    _, c1, c2 = np.intersect1d(indexes, tmp_indexes, assume_unique=False, return_indices=True)
    values[c1] += tmp_values[c2]
    tmp_values[c2] = 0.0

    tmp_c = np.concatenate((values, tmp_values))
    tmp_topki, _ = topk(tmp_c, k)
    first_array_indexes = tmp_topki[tmp_topki < k]
    second_array_indexes = tmp_topki[tmp_topki >= k] - k
    indexes = np.concatenate((indexes[first_array_indexes], tmp_indexes[second_array_indexes]))
    values = np.concatenate((values[first_array_indexes], tmp_values[second_array_indexes]))
    return indexes, values


def decode(buffer: torch.Tensor, values: np.ndarray, indexes: np.ndarray, P: int) -> torch.Tensor:
    """The released trainer's decode into its reused flat gradient buffer (float32 [d]):
    fill with 0, write V_g at I_g, divide by P. Returns `buffer`."""
    r = torch.from_numpy(values)
    final_indexes = torch.from_numpy(indexes.astype(np.int64))
    buffer.fill_(0.0)
    buffer[final_indexes] = r
    buffer /= P
    return buffer
