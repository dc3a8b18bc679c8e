"""The memory a run's P ranks need, estimated before anything is allocated, against what this host has.

Two rules; a backend's row in ssgd.run.backends names its own. Estimates (CPU runs; measured on FNN-3
with `ru_maxrss` and `/proc/self/smaps_rollup`, docs/faults.md):
  * `virtual_ranks` (backend=thread): every virtual rank keeps its residual and its compressor's buffers: about
    RANK_COPIES x d x 4 bytes per rank (measured at P = 64: 1.0 x d x 4 for dense, 2.1 x d x 4 for
    gTop-k; the weights, optimizer state, data and the pool threads' temporaries are shared);
  * `process_ranks` (backend=mpi, torch) on this host (no hostfile): every rank is a process with about PROCESS_BYTES of private
    memory after importing torch and this package (measured: 295 MB), plus weights, gradient, optimizer
    state, residual and the compressor's buffers: about MPI_RANK_COPIES x d x 4 bytes.
A run is refused only when the estimate exceeds the memory available (MemAvailable, and the cgroup's
limit when there is one), so the estimate errs low rather than high.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

BYTES_PER_PARAMETER = 4      # float32
RANK_COPIES = 2
MPI_RANK_COPIES = 5
PROCESS_BYTES = 250e6


class Need(NamedTuple):
    """The memory P ranks need on this host: `bytes`, what they are for, and what to do when they do not fit."""

    bytes: float
    what: str
    remedy: str


def virtual_ranks(d: int, P: int, hostfile: bool) -> Need:
    """P virtual ranks in one process (backend=thread): the ranks share the weights, optimizer state and data;
    each keeps its residual and its compressor's buffers."""
    return Need(P * RANK_COPIES * d * BYTES_PER_PARAMETER,
                f"{P} virtual ranks' residuals and compressor buffers ({RANK_COPIES} x {d:,} parameters x 4 B each)",
                "or run backend=mpi over several hosts (cluster.hostfile)")


def process_ranks(d: int, P: int, hostfile: bool) -> Need | None:
    """P processes on this host (backend=mpi or torch); None when a hostfile spreads them over hosts."""
    if hostfile:
        return None
    return Need(P * (PROCESS_BYTES + MPI_RANK_COPIES * d * BYTES_PER_PARAMETER),
                f"{P} MPI processes on this host ({PROCESS_BYTES / 1e6:.0f} MB each plus {MPI_RANK_COPIES} x {d:,} "
                "parameters x 4 B)",
                "or use backend=thread (the ranks share one model) or a cluster.hostfile")


def available_bytes() -> float | None:
    """Memory a new allocation can get here: MemAvailable, capped by the cgroup (v2) limit; None if unknown."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
        available = float(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = float(Path("/sys/fs/cgroup/memory.current").read_text().strip())
            available = min(available, float(limit) - used)
    except (OSError, ValueError):
        pass
    return available
