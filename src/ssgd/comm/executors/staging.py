"""Moving an operation's buffers to the device a communication library reads, and back.

Shared by the executors that run one rank per process (`ssgd.comm.executors.mpi`,
`ssgd.comm.executors.torch_dist`): each decides which device its library takes a tensor on (MPI without
CUDA support and gloo: the host; CUDA-aware MPI and NCCL: the tensor's own GPU); these helpers copy only
when that differs from where the tensor lives, and add the time of each copy to `RankLog.staging_s`.
"""
from __future__ import annotations

import time

import torch
from torch import Tensor

from ssgd.comm.ops import RankLog


def to_comm(t: Tensor, device: torch.device, log: RankLog) -> Tensor:
    """`t` as a contiguous tensor on `device` (no copy when it already is one)."""
    if t.device == device:
        return t.detach().contiguous()
    start = time.perf_counter()
    out = t.detach().to(device).contiguous()
    if t.is_cuda:
        torch.cuda.synchronize(t.device)
    log.staging_s += time.perf_counter() - start
    return out


def empty_on(like: Tensor, device: torch.device) -> Tensor:
    """An uninitialised buffer of `like`'s shape and dtype on `device`, for the library to write."""
    return torch.empty(like.shape, dtype=like.dtype, device=device)


def from_comm(t: Tensor, like: Tensor, log: RankLog) -> Tensor:
    """`t` on `like`'s device (no copy when it is there already)."""
    if t.device == like.device:
        return t
    start = time.perf_counter()
    out = t.to(like.device)
    if out.is_cuda:
        torch.cuda.synchronize(out.device)
    log.staging_s += time.perf_counter() - start
    return out


def pooled(like: Tensor, pool: dict | None) -> Tensor:
    """A result buffer shaped like `like`: reused from `pool` when given (a fresh d-sized tensor costs its page
    faults on every call: docs/hot-path.md), so a result is valid only until the next call with that pool."""
    if pool is None:
        return torch.empty_like(like)
    key = (tuple(like.shape), like.dtype, like.device)
    if key not in pool:
        pool[key] = torch.empty_like(like)
    return pool[key]
