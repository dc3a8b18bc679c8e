"""`TorchWorld`: this process is one rank of a torch.distributed job (`backend=torch`); see `ssgd.worlds.base`.

Built in two steps, so that a rank knows who it is before it has a configuration: `TorchWorld.from_environ()`
from the launcher's environment (`ssgd.worlds.rendezvous.ranks`), then `prepare(cfg)` picks this rank's
device (one GPU per rank: `cuda` -> `cuda:<local rank>`), the process group (`dist.backend`: auto =
NCCL for CUDA, gloo for the host) and joins it. `TorchWorld.joined()` wraps a process group that the
caller has already initialised (tests, benchmarks).

Collectives run on the main group through `ssgd.comm.executors.torch_dist`; small Python values
(`allgather`, `gather_root`: metrics, checkpoints) travel over a gloo group, so that NCCL jobs do not
move pickles through GPU memory.
"""
from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TypeVar

import torch
import torch.distributed as dist
from omegaconf import DictConfig

from ssgd.comm.base import Collective, Reduced
from ssgd.comm.ops import RankLog
from ssgd.comm.executors.torch_dist import TorchExecutor, all_gather_single, run_torch
from ssgd.payload import Payload
from ssgd.worlds.rendezvous import LocalRank, Ranks, master, port_in_use, rank_device, ranks

T = TypeVar("T")
OBJECT_SLOT = 2048     # bytes per rank in `allgather`'s one collective (a step's metrics pickle to ~300)


def process_group_backend(choice: str, device: str) -> str:
    """`dist.backend` (auto | gloo | nccl) for a rank on `device`: auto is nccl on CUDA, gloo otherwise."""
    if choice == "auto":
        return "nccl" if device.startswith("cuda") else "gloo"
    return choice


def objects_group(backend: str, timeout_s: float | None = None) -> dist.ProcessGroup | None:
    """The process group for Python values (host tensors) beside a default group of `backend`: None (the
    default group itself) unless that is NCCL, which carries only CUDA tensors; then a new gloo group over all
    ranks (collective: every rank calls this)."""
    if backend != "nccl":
        return None
    return dist.new_group(backend="gloo", **({} if timeout_s is None else {"timeout": timedelta(seconds=timeout_s)}))


class TorchWorld:
    """One rank per process: `map` runs only this rank, collectives go through torch.distributed."""

    job = "torch.distributed job"
    backend = "torch"

    def __init__(self, ranks: Ranks, environ: Mapping[str, str] | None = None) -> None:
        torch.set_num_threads(1)   # as every virtual rank of the threads backend: same bits
        self.rank, self.size, self.local = ranks.rank, ranks.size, ranks.local
        self.local_ranks = [self.rank]
        self.environ = os.environ if environ is None else environ
        self.buffers: dict = {}    # dense results are reused: valid until the next collective call
        self.executor: TorchExecutor | None = None
        self.objects: dist.ProcessGroup | None = None
        self.backend: str | None = None

    @classmethod
    def from_environ(cls) -> TorchWorld:
        """This rank of a job whose launcher (torchrun, srun, ssgd.run.launch_torch) set its variables in this
        process's environment (`ssgd.worlds.rendezvous.ranks`); ConfigError (one line) naming a missing one."""
        return cls(ranks(os.environ))

    @classmethod
    def joined(cls, objects: dist.ProcessGroup | None = None) -> TorchWorld:
        """A world over the caller's already initialised default process group (`objects`: the group for
        Python values; None: the default group, or a new gloo group over all ranks when the default group is
        NCCL, which cannot carry host tensors: then every rank must call this, as `new_group` is collective)."""
        world = cls(Ranks(dist.get_rank(), dist.get_world_size(), LocalRank(0, None, "caller"), "caller"))
        backend = dist.get_backend()
        world._joined(backend, objects if objects is not None else objects_group(backend))
        return world

    def start_hint(self, n: int) -> str:
        return f"torchrun --nproc-per-node {n} (or srun -n {n})"

    def prepare(self, cfg: DictConfig) -> DictConfig:
        """Set this rank's device in `cfg` and join the process group (`cfg.dist`); returns `cfg`.
        ConfigError (one line) for a missing variable or too few GPUs."""
        visible = self.environ.get("CUDA_VISIBLE_DEVICES")
        gpus = torch.cuda.device_count() if str(cfg.device) == "cuda" else 0
        cfg.device = rank_device(str(cfg.device), self.local, gpus, visible)
        backend = process_group_backend(str(getattr(cfg.dist.backend, "value", cfg.dist.backend)), cfg.device)
        addr, port = master(self.environ, cfg.dist.master_addr, cfg.dist.master_port)
        try:
            self.connect(backend, addr, port, float(cfg.dist.timeout_s), cfg.device)
        except RuntimeError as err:             # torch's DistNetworkError: rank 0 could not listen on the port
            if "EADDRINUSE" not in str(err):
                raise
            raise port_in_use(port, "MASTER_PORT" if self.environ.get("MASTER_PORT") else "dist.master_port") from None
        return cfg

    def connect(self, backend: str, addr: str, port: int, timeout_s: float, device: str = "cpu") -> None:
        """Join the default process group at tcp://addr:port (rank 0 hosts the store, unless torchrun's
        agent already serves one there)."""
        if device.startswith("cuda"):
            torch.cuda.set_device(torch.device(device))
        dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=self.rank, world_size=self.size,
                                timeout=timedelta(seconds=timeout_s),
                                device_id=torch.device(device) if backend == "nccl" else None)
        self._joined(backend, objects_group(backend, timeout_s))

    def _joined(self, backend: str, objects: dist.ProcessGroup | None) -> None:
        self.backend, self.objects = backend, objects
        self.executor = TorchExecutor(None, self.buffers)

    def map(self, fn: Callable[[int], T]) -> list[T]:
        return [fn(self.rank)]

    def collective(self, collective: Collective,
                   payloads: Sequence[Payload]) -> tuple[list[Reduced], list[RankLog]]:
        reduced, log = run_torch(collective, payloads[0], executor=self.executor)
        return [reduced], [log]

    def replicate(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        return [model]

    def allgather(self, items: list[T]) -> list[T]:
        """This rank's value -> the values of all P ranks, in rank order, on every rank.

        Called every step (the step's metrics), so it costs one collective, not the two of
        `dist.all_gather_object`: each rank sends its pickle in a fixed slot of OBJECT_SLOT bytes after an
        8-byte length; only when some pickle is longer (every rank sees every length) is there a second
        all_gather of slots as long as the longest."""
        data = pickle.dumps(items[0], protocol=pickle.HIGHEST_PROTOCOL)
        n, P = len(data), self.size
        slot = torch.zeros(8 + OBJECT_SLOT, dtype=torch.uint8)
        slot[:8] = torch.tensor([n], dtype=torch.int64).view(torch.uint8)
        if n <= OBJECT_SLOT:
            slot[8:8 + n] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        gathered = torch.empty(P * (8 + OBJECT_SLOT), dtype=torch.uint8)
        all_gather_single(gathered, slot, group=self.objects)
        rows = gathered.view(P, 8 + OBJECT_SLOT)
        lengths = rows[:, :8].contiguous().view(torch.int64).reshape(-1).tolist()
        if max(lengths) > OBJECT_SLOT:                # the same decision on every rank
            width = max(lengths)
            mine = torch.zeros(width, dtype=torch.uint8)
            mine[:n] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            wide = torch.empty(P * width, dtype=torch.uint8)
            all_gather_single(wide, mine, group=self.objects)
            rows = wide.view(P, width)
            return [pickle.loads(rows[r, :lengths[r]].numpy().tobytes()) for r in range(P)]
        return [pickle.loads(rows[r, 8:8 + lengths[r]].numpy().tobytes()) for r in range(P)]

    def gather_root(self, items: dict[int, T]) -> dict[int, T]:
        """{rank: item} of every rank on rank 0 ({} elsewhere)."""
        parts: list | None = [None] * self.size if self.rank == 0 else None
        dist.gather_object(items, parts, group=self.objects, group_dst=0)
        return {r: v for part in parts for r, v in part.items()} if parts is not None else {}

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def close(self, together: bool = False) -> None:
        """Leave the process group (no-op when never joined). `together`: every rank is closing at this point
        (a run that ended normally), so first wait for all of them, so that no rank tears gloo down while a peer
        still has messages on its pairs (one barrier per run; added before the cause below was found, and not
        shown to be needed without it). Without it (an exception on this rank alone) leave at once.

        Leaving frees the group and joins gloo's worker threads only because ssgd.comm.executors.torch_dist (imported by
        this module and by ssgd.ddp) imports `torch.distributed.nn.functional` before any group exists: its
        functions take `group=group.WORLD` as a default argument, evaluated on import, and the optimizer's first
        use of `torch._dynamo` imports it. Were that after `init_process_group`, the defaults would keep the
        group alive until interpreter shutdown, where a gloo thread that drops a finished collective's tensors
        needs the GIL, is ended by the interpreter, and aborts the rank (SIGABRT after a complete run: about 1
        run in 20 under torchrun on 2 busy cores; test: tests/unit/test_torch_world_close.py)."""
        if dist.is_initialized():
            if together:
                dist.barrier(group=self.objects)
            dist.destroy_process_group()

    @property
    def in_group(self) -> bool:
        """Whether this rank has joined the process group (`prepare` joins it)."""
        return dist.is_initialized()

    def barrier(self) -> None:
        dist.barrier(group=self.objects)

    def abort(self, status: int) -> None:
        """End this rank now with `status`; its launcher (ssgd.run.launch_torch, torchrun, srun) stops the others."""
        os._exit(status)
