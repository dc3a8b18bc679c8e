"""Who this process is in a job of one process per rank, read from what its launcher put in the environment.

Pure functions of an environment mapping (no torch, no MPI; `master` alone may ask `scontrol`), unit-tested with fake environments
(tests/unit/test_rendezvous.py). Every missing or malformed variable is a one-line `ConfigError` that
names it and the launcher that would have set it, so every entry point can stop with exit status 2.

* `ranks(environ)`: rank, world size and local rank of a torch.distributed rank (backend=torch), from
  torchrun's RANK / WORLD_SIZE / LOCAL_RANK (also what `python src/train.py backend=torch` sets), else
  from SLURM's SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID (`srun`, one task per rank).
* `master(environ, addr, port)`: rank 0's address and port for the rendezvous: MASTER_ADDR /
  MASTER_PORT, else the configured `dist.master_addr` / `dist.master_port`, else (under srun) the
  first node of SLURM's node list (`scontrol show hostnames`, SLURM's own parser, where it runs; else
  `first_host`) and a port derived from SLURM_JOB_ID.
* `local_rank(environ, sources)`: this process's rank among the ranks on its host, for one GPU per
  rank: torchrun (LOCAL_RANK), SLURM (SLURM_LOCALID), Open MPI (OMPI_COMM_WORLD_LOCAL_RANK), MPICH
  (MPI_LOCALRANKID). An MPI rank without these uses a shared-memory split (`ssgd.worlds.mpi`).
* `rank_device(device, local, gpus, visible)`: the device of this rank: `cuda` becomes
  `cuda:<local rank>`; fewer GPUs than local ranks is a one-line error.
* `check_port_free(port, key)` / `port_in_use(port, key)`: a rendezvous port another program already
  listens on, as one line that names the setting and a free port (these two use a socket, nothing else).
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ssgd.errors import ConfigError

GUIDE = "docs/gpu-clusters.md"
SLURM_PORT_BASE, SLURM_PORT_SPAN = 20000, 10000    # derived ports stay below Linux's ephemeral range (32768+)
SCONTROL_TIMEOUT_S = 3.0   # scontrol retries a missing slurm.conf for 60 s: fall back on first_host instead


@dataclass(frozen=True)
class Ranks:
    """This process's place in the job."""

    rank: int
    size: int
    local: LocalRank
    source: str          # which launcher's variables they came from, for messages


@dataclass(frozen=True)
class LocalRank:
    """This process's rank among the job's ranks on its host; `size` is None when the launcher does not say."""

    rank: int
    size: int | None
    source: str          # the variable it came from, e.g. "LOCAL_RANK"


def _int(environ: Mapping[str, str], name: str, minimum: int, launcher: str) -> int:
    value = environ.get(name)
    if value is None or value.strip() == "":
        raise ConfigError(f"backend=torch: {name} is not set ({launcher} sets it)")
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r}: must be an integer >= {minimum}") from None
    if number < minimum:
        raise ConfigError(f"{name}={value!r}: must be an integer >= {minimum}")
    return number


def ranks(environ: Mapping[str, str]) -> Ranks:
    """Rank, world size and local rank of this torch.distributed rank (module docstring)."""
    if "RANK" in environ:
        launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in environ else "torchrun or `python src/train.py backend=torch`"
        rank, size = _int(environ, "RANK", 0, launcher), _int(environ, "WORLD_SIZE", 1, launcher)
        local = local_rank(environ, TORCH_LOCAL[:1])
        if local is None:
            _int(environ, "LOCAL_RANK", 0, launcher)      # raises: LOCAL_RANK is not set
        source = "RANK/WORLD_SIZE"
    elif "SLURM_PROCID" in environ:
        if "SLURM_STEP_ID" not in environ:
            raise ConfigError("backend=torch: SLURM_PROCID is set but SLURM_STEP_ID is not: this is the batch script "
                              "itself, not a task; start the ranks with srun (or torchrun)")
        rank, size = _int(environ, "SLURM_PROCID", 0, "srun"), _int(environ, "SLURM_NTASKS", 1, "srun")
        local = local_rank(environ, TORCH_LOCAL[1:])
        if local is None:
            _int(environ, "SLURM_LOCALID", 0, "srun")
        source = "SLURM_PROCID/SLURM_NTASKS"
    else:
        raise ConfigError("backend=torch: no rank in the environment: RANK (torchrun) and SLURM_PROCID (srun) are "
                          "both unset; start the ranks with `python src/train.py backend=torch`, torchrun or srun "
                          f"({GUIDE})")
    if rank >= size:
        raise ConfigError(f"backend=torch: rank {rank} is not below the world size {size} ({source})")
    assert local is not None
    return Ranks(rank, size, local, source)


def master(environ: Mapping[str, str], addr: str | None = None, port: int | None = None) -> tuple[str, int]:
    """Rank 0's (address, port): MASTER_ADDR / MASTER_PORT, else `addr` / `port` (dist.master_addr /
    dist.master_port), else under srun the first host of the step's node list and SLURM_PORT_BASE +
    SLURM_JOB_ID mod SLURM_PORT_SPAN."""
    host = environ.get("MASTER_ADDR") or addr
    if not host:
        nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST")
        host = (scontrol_first_host(nodelist, environ) or first_host(nodelist)) if nodelist else None
    if not host:
        raise ConfigError("backend=torch: no address of rank 0: MASTER_ADDR is not set (torchrun sets it), "
                          "dist.master_addr is null and there is no SLURM_JOB_NODELIST (srun sets it)")
    if environ.get("MASTER_PORT"):
        number = _int(environ, "MASTER_PORT", 1, "torchrun")
    elif port is not None:
        number = port
    elif environ.get("SLURM_JOB_ID", "").isdigit():
        number = SLURM_PORT_BASE + int(environ["SLURM_JOB_ID"]) % SLURM_PORT_SPAN
    else:
        raise ConfigError("backend=torch: no port of rank 0: MASTER_PORT is not set (torchrun sets it), "
                          "dist.master_port is null and there is no SLURM_JOB_ID to derive one from")
    if not 1 <= number <= 65535:
        raise ConfigError(f"MASTER_PORT={number}: must be a port number in 1..65535")
    return host, number


def scontrol_first_host(nodelist: str, environ: Mapping[str, str] | None = None,
                        scontrol: str | None = None) -> str | None:
    """The first line of `scontrol show hostnames <nodelist>` (SLURM's own host-list parser), run with
    `environ` over this process's environment (SLURM_CONF); None when there is no scontrol (`scontrol`, else
    the one on PATH: present on SLURM nodes only), it fails (no configuration, an invalid list) or it takes
    longer than SCONTROL_TIMEOUT_S. Callers then use `first_host`."""
    env = {**os.environ, **(environ or {})}
    found = scontrol or shutil.which("scontrol", path=env.get("PATH"))
    if found is None:
        return None
    try:
        proc = subprocess.run([found, "show", "hostnames", nodelist], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    hosts = proc.stdout.split() if proc.returncode == 0 else []
    return hosts[0] if hosts else None


def first_host(nodelist: str) -> str | None:
    """The first host of a SLURM host list, e.g. 'gpu[07-09,12],cpu01' -> 'gpu07', 'r[1-2]-n[3-4]' -> 'r1-n3'
    (what `scontrol show hostnames` prints first: tests/unit/test_hand_written.py compares them), or None for
    an empty list. The fallback of `scontrol_first_host` where scontrol is absent or fails."""
    depth, end = 0, len(nodelist)
    for i, ch in enumerate(nodelist):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            end = i
            break
    first = nodelist[:end].strip()
    # every bracket group [a-b,c,...] contributes its first item's first value, zero padding kept
    host = re.sub(r"\[([^\]]*)\]", lambda m: re.split(r"[,-]", m.group(1))[0], first)
    return host or None


# -- the local rank and the device ------------------------------------------------------------------
def _slurm_tasks_here(environ: Mapping[str, str]) -> int | None:
    """Tasks of this step on this node, from SLURM_STEP_TASKS_PER_NODE (or SLURM_TASKS_PER_NODE), e.g. '2(x3),1'
    with SLURM_NODEID = 3 -> 1; None when SLURM does not say."""
    spec = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE")
    node = environ.get("SLURM_NODEID", "0")
    if not spec or not node.isdigit():
        return None
    counts: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if m is None:
            return None
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts[int(node)] if int(node) < len(counts) else None


# (local rank variable, local size variable) in the order they are trusted
TORCH_LOCAL: tuple[tuple[str, str], ...] = (("LOCAL_RANK", "LOCAL_WORLD_SIZE"), ("SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE"))
# MPI ranks do not read SLURM_LOCALID: under `mpirun` inside a batch script every rank inherits the batch task's.
MPI_LOCAL: tuple[tuple[str, str], ...] = (("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
                                          ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"))


def local_rank(environ: Mapping[str, str], sources: Sequence[tuple[str, str]]) -> LocalRank | None:
    """The first of `sources` (rank variable, size variable) set in `environ`; None when none is.
    ConfigError when the variable is not a non-negative integer."""
    for rank_var, size_var in sources:
        if environ.get(rank_var, "").strip() == "":
            continue
        rank = _int(environ, rank_var, 0, "the launcher")
        if size_var == "SLURM_STEP_TASKS_PER_NODE":
            size = _slurm_tasks_here(environ)
        else:
            size = _int(environ, size_var, 1, "the launcher") if environ.get(size_var, "").strip() else None
        return LocalRank(rank, size, rank_var)
    return None


def rank_device(device: str, local: LocalRank, gpus: int, visible: str | None = None) -> str:
    """The device of one rank of a job with one process per rank.

    `cpu` and an explicit `cuda:N` are kept as given. `cuda` becomes `cuda:<local rank>` when every rank
    sees the host's `gpus` GPUs; when the launcher binds one GPU per rank (`visible`, i.e.
    CUDA_VISIBLE_DEVICES, names a single GPU and one is visible, e.g. `srun --gpus-per-task=1`) it is
    `cuda:0`. ConfigError (one line) when there is no GPU or fewer GPUs than ranks on this host.
    """
    if device != "cuda":
        return device
    if gpus < 1:
        raise ConfigError("device=cuda: no CUDA device on this host (torch.cuda.is_available() is False); use device=cpu")
    if gpus == 1 and visible is not None and visible.strip() and "," not in visible:
        return "cuda:0"                                     # the launcher gave this rank its own GPU
    ranks_here = local.size if local.size is not None else local.rank + 1
    if ranks_here > gpus or local.rank >= gpus:
        count = f"{local.size} ranks" if local.size is not None else f"local rank {local.rank}"
        raise ConfigError(f"device=cuda: {count} on this host but {gpus} GPU(s): one GPU per rank "
                          f"(cuda:{local.source}); start at most {gpus} ranks per host, or use device=cpu")
    return f"cuda:{local.rank}"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_in_use(port: int, key: str = "dist.master_port") -> ConfigError:
    """The one-line error for a rendezvous port that another program holds; `key` is the setting that named it."""
    hint = "dist.master_port=null (a free port for each run)" if key == "dist.master_port" else \
        "unset MASTER_PORT (then dist.master_port, or a free port)"
    return ConfigError(f"{key}={port}: port {port} is already in use on this host (EADDRINUSE: another program "
                       f"listens there); choose a free one, e.g. {key}={free_port()}, or {hint}")


def check_port_free(port: int, key: str = "dist.master_port") -> None:
    """`port_in_use` raised when a program listens on `port` of this host (any address); other bind
    errors are left to the rendezvous itself. SO_REUSEADDR: a port in TIME_WAIT counts as free, as it does
    for torch's TCPStore."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise port_in_use(port, key) from None
