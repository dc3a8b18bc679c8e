"""Ping-pong between ranks 0 and 1: `mpiexec -n 2 python -m mpi4py -m ssgd.tools.pingpong OUT.json [IDLE_MS]`.

For each message size (8 B to 128 MiB, powers of 4) rank 0 sends a buffer to rank 1 and back,
`reps` times after a warm-up; the one-way time is half the median round trip. With IDLE_MS, both ranks
sleep that long before each round trip: on links shaped by a token bucket (the testbed, docs/testbed.md)
every message then finds its bucket full, as the first message after a step's compute does, where
back-to-back round trips leave it half drained (128 KiB one way: 71 us idle, 540 us back to back there).
Rank 0 writes {"nbytes": [...], "seconds": [...], "mpi": library version, "hosts": [...], "idle_ms": ...}
to OUT.json. Run it through `make alphabeta` (ssgd.tools.calibrate), which fits alpha and beta.
"""
from __future__ import annotations

import json
import socket
import statistics
import sys
import time
from pathlib import Path

import torch
from mpi4py import MPI

from ssgd.utils.atomic import full_disk_is_one_line, write_text_atomic

SIZES = [8 * 4**i for i in range(13)]        # 8 B .. 128 MiB


def one_way_seconds(comm: MPI.Comm, nbytes: int, idle_s: float = 0.0) -> float:
    tensor = torch.zeros(nbytes, dtype=torch.uint8)
    buf = MPI.buffer.fromaddress(tensor.data_ptr(), nbytes)     # no DLPack per call (ssgd.comm.executors.mpi._host)
    reps = 200 if nbytes < 2**16 else 50 if nbytes < 2**22 else 8
    times = []
    for i in range(reps + 1):
        if idle_s:
            comm.Barrier()
            time.sleep(idle_s)
        comm.Barrier()
        start = time.perf_counter()
        if comm.rank == 0:
            comm.Send(buf, dest=1, tag=7)
            comm.Recv(buf, source=1, tag=7)
        else:
            comm.Recv(buf, source=0, tag=7)
            comm.Send(buf, dest=0, tag=7)
        if i:                                  # the first round trip is a warm-up
            times.append((time.perf_counter() - start) / 2)
    return statistics.median(times)


def library_version() -> str:
    """e.g. "Open MPI v5.0.11" (printable characters of the first field only)."""
    text = "".join(ch for ch in MPI.Get_library_version() if ch.isprintable())
    return text.split(",")[0].strip()


@full_disk_is_one_line
def main(argv: list[str]) -> int:
    comm = MPI.COMM_WORLD
    try:
        idle_ms = float(argv[1]) if len(argv) == 2 else 0.0
    except ValueError:
        idle_ms = -1.0
    if comm.size != 2 or len(argv) not in (1, 2) or idle_ms < 0:
        if comm.rank == 0:
            print("usage: mpiexec -n 2 python -m mpi4py -m ssgd.tools.pingpong OUT.json [IDLE_MS >= 0]", file=sys.stderr)
        return 2
    seconds = [one_way_seconds(comm, n, idle_ms / 1e3) for n in SIZES]
    hosts = comm.gather(socket.gethostname(), root=0)
    if comm.rank == 0:
        write_text_atomic(Path(argv[0]), json.dumps({"nbytes": SIZES, "seconds": seconds, "hosts": hosts,
                                                      "idle_ms": idle_ms, "mpi": library_version()}),
                          "the ping-pong's times")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
