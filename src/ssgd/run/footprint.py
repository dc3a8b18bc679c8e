"""The memory a run's P ranks need, estimated before anything is allocated, against what this host has.

Estimates (CPU runs; measured on FNN-3 with `ru_maxrss` and `/proc/self/smaps_rollup`, docs/faults.md):
  * backend=thread: every virtual rank keeps its residual and its compressor's buffers: about
    RANK_COPIES x d x 4 bytes per rank (measured at P = 64: 1.0 x d x 4 for dense, 2.1 x d x 4 for
    gTop-k; the weights, optimizer state, data and the pool threads' temporaries are shared);
  * backend=mpi on this host (no hostfile): every rank is a process with about PROCESS_BYTES of private
    memory after importing torch and this package (measured: 295 MB), plus weights, gradient, optimizer
    state, residual and the compressor's buffers: about MPI_RANK_COPIES x d x 4 bytes.
A run is refused only when the estimate exceeds the memory available (MemAvailable, and the cgroup's
limit when there is one), so the estimate errs low rather than high.
"""
from __future__ import annotations

from pathlib import Path

BYTES_PER_PARAMETER = 4      # float32
RANK_COPIES = 2
MPI_RANK_COPIES = 5
PROCESS_BYTES = 250e6


def needed_bytes(d: int, P: int, backend: str, hostfile: bool) -> tuple[float, str] | None:
    """(bytes, what they are for) for P ranks of a d-parameter model on this host, or None when the ranks
    do not all run here (a hostfile spreads them over hosts)."""
    if backend == "thread":
        return (P * RANK_COPIES * d * BYTES_PER_PARAMETER,
                f"{P} virtual ranks' residuals and compressor buffers ({RANK_COPIES} x {d:,} parameters x 4 B each)")
    if hostfile:
        return None
    return (P * (PROCESS_BYTES + MPI_RANK_COPIES * d * BYTES_PER_PARAMETER),
            f"{P} MPI processes on this host ({PROCESS_BYTES / 1e6:.0f} MB each plus {MPI_RANK_COPIES} x {d:,} "
            "parameters x 4 B)")


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
