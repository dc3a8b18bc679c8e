"""The backends in one table: a backend's name -> its parts. Every place that depends on the backend asks here.

A backend is where the P ranks of a run live (the `backend` key, `ssgd.config.Backend`). Its parts:

  * `world`: "module:callable" that makes its World (ssgd.worlds.base.World), imported only when a run
    needs it (importing ssgd.worlds.mpi initialises MPI). A backend whose ranks all live in the app's
    process (`launcher` None) calls it as `make(P, threads)`; a backend with one process per rank calls it
    as `make()` inside each rank, before the rank reads its config (the rank learns who it is from its
    launcher's environment; ConfigError, one line, when a variable is missing);
  * `launcher`: None, or the module that starts the ranks: `start(cfg, run_dir)` runs the job in the
    foreground (returns when it succeeded; raises RunEnded / Interrupted with the job's one line) and
    `print_start(cfg, run_dir)` only writes the worker config and prints how to start the ranks. Each rank
    runs the generic worker (ssgd.run.worker) with `worker_flags` before `-m ssgd.run.worker` (mpi:
    `-m mpi4py`, so an exception on one rank aborts the job instead of hanging it);
  * `prints_only(config)`: whether a run only prints how to start its ranks (`print_start`): such a run
    prepares a job for other machines, so it needs neither their device nor their memory;
  * `footprint`: the memory P ranks of a d-parameter model need on this host (ssgd.run.footprint).

docs/adding-a-backend.md adds one (its test runs the recipe).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ssgd.config import Backend, Config, DistEmit
from ssgd.run import footprint, job


def never(config: Config) -> bool:
    """`prints_only` of a backend that always trains here."""
    return False


def mpi_prints_only(config: Config) -> bool:
    """backend=mpi: `mpi.launch=false` prints the worker command for the user's own mpirun / srun."""
    return not config.mpi.launch


def torch_prints_only(config: Config) -> bool:
    """backend=torch: `dist.launch=false` prints torchrun / srun commands, `dist.emit=sbatch` a batch script."""
    return not config.dist.launch or config.dist.emit is DistEmit.sbatch


@dataclass(frozen=True)
class BackendParts:
    """One row of the table (the module docstring says what each part is)."""

    name: str
    world: str
    footprint: Callable[[int, int, bool], footprint.Need | None]
    launcher: str | None = None
    worker_flags: tuple[str, ...] = ()
    prints_only: Callable[[Config], bool] = never

    @property
    def in_process(self) -> bool:
        """Whether every rank lives in the app's own process (no launcher, no worker)."""
        return self.launcher is None

    def make_world(self, *args: Any) -> Any:
        """The World, made by `world` with `args` (see the module docstring for the two conventions)."""
        module, _, attr = self.world.partition(":")
        obj: Any = importlib.import_module(module)
        for name in attr.split("."):
            obj = getattr(obj, name)
        return obj(*args)

    def launcher_module(self) -> ModuleType:
        """The launcher module (`start`, `print_start`); ValueError for a backend without one."""
        if self.launcher is None:
            raise ValueError(f"backend={self.name}: its ranks live in this process; it has no launcher")
        return importlib.import_module(self.launcher)

    def worker_command(self, config_path: Path) -> list[str]:
        """One rank's command: `python [worker_flags] -m ssgd.run.worker <name> <config_path>`."""
        return job.worker_command(self.name, self.worker_flags, config_path)


BACKENDS: dict[str, BackendParts] = {
    "thread": BackendParts("thread", world="ssgd.worlds.base:ThreadWorld", footprint=footprint.virtual_ranks),
    "mpi": BackendParts("mpi", world="ssgd.worlds.mpi:MPIWorld", footprint=footprint.process_ranks,
                        launcher="ssgd.run.launch_mpi", worker_flags=("-m", "mpi4py"), prints_only=mpi_prints_only),
    "torch": BackendParts("torch", world="ssgd.worlds.torch_dist:TorchWorld.from_environ",
                          footprint=footprint.process_ranks, launcher="ssgd.run.launch_torch",
                          prints_only=torch_prints_only),
}


def parts(backend: Backend | str) -> BackendParts:
    """The parts of `backend` (the schema's enum or its name); ValueError naming the known ones otherwise."""
    name = backend.value if isinstance(backend, Backend) else str(backend)
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"backend={name}: unknown; known: {', '.join(BACKENDS)}") from None


def launched() -> list[str]:
    """The backends whose ranks are processes started by a launcher (the ones the generic worker serves)."""
    return [name for name, p in BACKENDS.items() if not p.in_process]
