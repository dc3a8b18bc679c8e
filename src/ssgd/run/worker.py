"""One rank of a backend whose ranks are processes: `python [flags] -m ssgd.run.worker BACKEND RUN_DIR/worker_config.yaml`.

Every such backend (ssgd.run.backends: mpi, torch) runs this worker; its launcher starts it, or the user does
under their own mpirun / torchrun / srun (`mpi.launch=false`, `dist.launch=false` print the commands). The
rank makes its backend's World from its launcher's environment (one line and exit status 2 when a variable
is missing), reads the config the launcher composed and resolved (never composes its own), checks that the
job has `cluster.world_size` ranks, picks its device (`world.prepare`), checks and builds the run once
(`ssgd.run.build.spec`), trains, and on rank 0 writes the run outputs next to the config file and logs the
report (stdout and `<run dir>/train.log`, ssgd.utils.logs.setup_rank). Other ranks' output lines are
prefixed with `[rank r]`. How a rank's run ended, when not well, goes to the launcher's file (`report_end`)
or, under the user's own launcher, to stderr as one line; the exit status is the run's (docs/faults.md).
The process then ends with that status at once (`leave`: wandb stopped, logs flushed, MPI finalised, no
interpreter teardown), so the launcher sees the job end seconds sooner where ranks share cores.

HOOK_ENV names a Python file whose `attach(trainer, world, config)` runs on every rank after the build and
before training (the tests' fault injection, tests/rank_faults.py, is one).
"""
from __future__ import annotations

import importlib.util
import logging
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn, TextIO

from omegaconf import OmegaConf

from ssgd import config
from ssgd.errors import EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_FAILED, AlreadyFinished, ConfigError, Interrupted
from ssgd.run import backends
from ssgd.run.job import ENDED_ENV, ENDED_FILE, write_reserved
from ssgd.utils.atomic import write_text_atomic

log = logging.getLogger(__name__)
HOOK_ENV = config.RANK_HOOK_ENV
USAGE = ("usage: python -m ssgd.run.worker {" + ",".join(backends.launched()) + "} RUN_DIR/worker_config.yaml  "
         "(started by `python src/train.py backend=...`; `mpi.launch=false` / `dist.launch=false` print the "
         "mpirun / torchrun / srun commands)")


class Prefixed:
    """A text stream that starts every line with a prefix (for non-root ranks' stdout/stderr)."""

    def __init__(self, stream: TextIO, prefix: str) -> None:
        self.stream, self.prefix, self.at_line_start = stream, prefix, True

    def write(self, text: str) -> int:
        out = []
        for piece in text.splitlines(keepends=True):
            out.append((self.prefix if self.at_line_start else "") + piece)
            self.at_line_start = piece.endswith("\n")
        self.stream.write("".join(out))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def report_end(status: int, message: str, run_dir: Path, say: bool) -> None:
    """Tell the user how this rank's job ended: to the launcher's file when a launcher started the job (the
    first rank to write it wins, so the user sees the first failure; the launcher reserved its bytes, so a full
    disk does not keep the line from it), else, or when that file cannot be written, as one line on stderr
    (when `say`: ranks that all hit the same problem let one of them say it)."""
    path = os.environ.get(ENDED_ENV)
    if path is not None and write_reserved(Path(path), f"{status}\t{message}\n"):
        return
    if say or path is not None:
        log.error(f"error: {message}")


# Third-party text kept out of the one line (the traceback file keeps it): gloo's advice and sign-off
# ("This is typically caused by a remote worker hanging ... GLHF! <emoji>") and C++ source locations
# of the library's build ("[/__w/pytorch/pytorch/third_party/gloo/.../pair.cc:545] ").
BANNERS = (re.compile(r"\s*This is typically caused by .*?GLHF!\S*(\s*[^\x00-\x7f]+)?"),
           re.compile(r"\s*GLHF!\S*(\s*[^\x00-\x7f]+)?"),
           re.compile(r"\[[^\]\s]+\.(?:cc|cpp|cxx|c|h|hpp|cu):\d+\]\s*"))


def without_banners(text: str) -> str:
    """`text` without the BANNERS of the libraries a rank runs (gloo's), with spaces tidied."""
    for banner in BANNERS:
        text = banner.sub(" ", text)
    return " ".join(text.split())


def failure(err: Exception, rank: int, run_dir: Path, backend: str = "mpi") -> str:
    """The one line for an exception on this rank; its traceback goes to <run dir>/mpi/rank<r>-traceback.txt."""
    path = run_dir / ENDED_FILE.parent / f"rank{rank}-traceback.txt"
    where = f"traceback in {path}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, traceback.format_exc(), "the rank's traceback")
    except (OSError, ConfigError) as unwritten:      # a full disk (DiskFull), a read-only folder
        where = f"no traceback file: {unwritten}"
    first = without_banners(f"{type(err).__name__}: {err}".strip().splitlines()[0])
    return f"backend={backend}: rank {rank} failed: {first} ({where})"


def end_alone(world: Any, status: int) -> NoReturn:
    """End this rank, and so the job, with `status` at once (`world.abort`: MPI_Abort under MPI, an
    immediate exit under torch.distributed, whose launcher stops the other ranks): waiting for the
    interpreter's teardown costs seconds a scheduler's grace time and the ranks blocked in a collective
    cannot spare."""
    sys.stdout.flush()
    sys.stderr.flush()
    world.abort(status)
    raise SystemExit(status)                  # not reached


def end_together(world: Any, status: int) -> NoReturn:
    """End an ending every rank reached at the same point (interrupted, diverged) with `status`, once rank 0
    has written everything (the barrier)."""
    world.barrier()
    end_alone(world, status)


def attach_hook(trainer: Any, world: Any, cfg: config.Config) -> None:
    """Run `attach(trainer, world, cfg)` of the file HOOK_ENV names (nothing when it is unset)."""
    path = os.environ.get(HOOK_ENV)
    if not path:
        return
    spec = importlib.util.spec_from_file_location("ssgd_rank_hook", path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{HOOK_ENV}={path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.attach(trainer, world, cfg)


def main(argv: list[str]) -> int:
    """One rank's run; returns its exit status (docs/faults.md). A rank that ends alone (an exception) ends
    the job; endings every rank reaches together (interrupted, diverged) wait for rank 0 to finish writing."""
    from ssgd.run.heartbeat import start_from_env
    from ssgd.run.orphans import watch_parent

    if len(argv) != 2 or argv[0] not in backends.launched():
        print(USAGE, file=sys.stderr)
        return EXIT_BAD_INPUT
    watch_parent()                            # the launcher died (kill -9, SIGHUP, OOM): stop, never orphan
    beat = start_from_env()                   # the launcher's mpi.timeout_s watch (ssgd.run.heartbeat)
    try:
        return in_world(backends.parts(argv[0]), Path(argv[1]), beat)
    finally:
        if beat is not None:
            beat.done()


def in_world(parts: backends.BackendParts, path: Path, beat: Any) -> int:
    """Make this rank's World, run the rank in it, and leave it (together, when the run reached its end)."""
    from ssgd.loop.stop import StopRequest

    try:
        world = parts.make_world()
    except ConfigError as err:                # a variable of the launcher's environment is missing
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    stop = StopRequest()
    try:
        with stop.installed():                # SIGTERM/SIGUSR1, SIGINT/SIGUSR2: checkpoint at the next step
            status = run_rank(world, path, stop, beat)
    except BaseException:
        world.close()
        raise
    world.close(together=True)      # every rank returns here together (the run's end, or before the group)
    return status


def run_rank(world: Any, path: Path, stop: Any, beat: Any) -> int:
    """The rank's run in `world`: build (every rank learns the first rank's problem), then train."""
    from ssgd.utils.logs import setup_rank

    if beat is not None:
        from ssgd.run.heartbeat import wrap_world
        wrap_world(world, beat)
    if world.rank != 0:
        sys.stdout, sys.stderr = Prefixed(sys.stdout, f"[rank {world.rank}] "), Prefixed(sys.stderr, f"[rank {world.rank}] ")
    setup_rank(path.parent, world.is_root)
    built = build_rank(world, path, stop)
    if isinstance(built, int):
        return built
    trainer, writer, cfg = built
    attach_hook(trainer, world, cfg)
    if beat is not None:
        beat.track(trainer)
        beat.phase = "compute"
    return train(world, trainer, writer, path.parent)


def build_trainer(world: Any, path: Path, stop: Any) -> tuple[Any, Any, config.Config]:
    """Read, check and build this rank's run: (trainer, metric writer, typed config)."""
    from ssgd.run import build

    if not path.is_file():
        raise ConfigError(f"{path}: no such worker config (written by `python src/train.py "
                          f"backend={type(world).backend}`)")
    cfg = config.load(OmegaConf.load(path))
    if cfg.cluster.world_size != world.size:
        raise ConfigError(f"cluster.world_size={cfg.cluster.world_size} but this {world.job} has {world.size} ranks; "
                          f"start it with {world.start_hint(cfg.cluster.world_size)} or set cluster.world_size={world.size}")
    cfg = world.prepare(cfg)        # this rank's device (one GPU per rank); torch.distributed: join the group
    spec = build.spec(cfg)          # the checks, once in this process (the file may come from another host)
    trainer, writer, _ = build.trainer(spec, path.parent, world, stop=stop)
    return trainer, writer, spec.config


def build_rank(world: Any, path: Path, stop: Any) -> tuple[Any, Any, config.Config] | int:
    """`build_trainer` on every rank, then the first rank's problem, if any, ends every rank: returns what was
    built, or the status to exit with (0: the run had already finished)."""
    run_dir = path.parent
    problem: tuple[int, str] | None = None
    try:
        built = build_trainer(world, path, stop)
    except AlreadyFinished as err:            # every rank reads the same files: all return here
        if world.is_root:
            log.info(str(err))
        return 0
    except (ConfigError, Interrupted) as err:
        problem = (err.status if isinstance(err, Interrupted) else EXIT_BAD_INPUT, str(err))
    except Exception as err:
        problem = (EXIT_FAILED, failure(err, world.rank, run_dir, world.backend or type(world).backend))
    if problem is not None and not world.in_group:   # torch.distributed before its group: each rank alone
        report_end(*problem, run_dir, say=world.is_root)
        return problem[0]
    # building needs no communication, so every rank gets here: rank 0 says the first rank's problem
    first = next((p for p in world.allgather([problem]) if p is not None), None)
    if first is not None:
        if world.is_root:
            report_end(*first, run_dir, say=True)
        end_together(world, first[0])
    return built


def close_quietly(writer: Any) -> None:
    """Close `writer` after the run's error, which stays the one line (wandb's own troubles are dropped)."""
    try:
        writer.close()
    except Exception:                         # noqa: BLE001 -- see the docstring
        log.debug("closing the metric writer after an error failed", exc_info=True)


def train(world: Any, trainer: Any, writer: Any, run_dir: Path) -> int:
    """Train; 0 when the run finished well, else the job ends here with the run's status."""
    from ssgd.run.final_lines import diverged, final_lines

    try:
        summary = trainer.fit()
    except Interrupted as err:
        writer.close()
        if err.step < 0:                      # a second signal: at once, this rank alone
            report_end(err.status, str(err), run_dir, say=world.is_root)
            end_alone(world, err.status)
        if world.is_root:                     # every rank stopped at the same step boundary
            report_end(err.status, str(err), run_dir, say=True)
        end_together(world, err.status)
    except ConfigError as err:                # a full disk (DiskFull) on this rank: its one line, exit status 2
        close_quietly(writer)
        report_end(EXIT_BAD_INPUT, str(err), run_dir, say=True)
        end_alone(world, EXIT_BAD_INPUT)
    except Exception as err:                  # this rank alone: the others wait in a collective
        report_end(EXIT_FAILED, failure(err, world.rank, run_dir, world.backend), run_dir, say=True)
        end_alone(world, EXIT_FAILED)
    try:
        writer.close()
    except ConfigError as err:                # wandb's files on a full disk (DiskFull)
        report_end(EXIT_BAD_INPUT, str(err), run_dir, say=True)
        end_alone(world, EXIT_BAD_INPUT)
    if world.is_root:
        log.info(final_lines(summary))
        log.info(f"  outputs: {run_dir}")
    if diverged(summary) is None:
        return 0
    if world.is_root:                         # every rank knows: the loss and the checks are gathered
        report_end(EXIT_DIVERGED, diverged(summary), run_dir, say=True)
    end_together(world, EXIT_DIVERGED)


def leave(status: int) -> NoReturn:
    """End this rank's process with `status` once its run is over, without the interpreter's teardown (about
    0.8 s of CPU per rank with torch loaded: seconds of the job's wall time when P ranks share few cores):
    wandb's service stopped (rank 0), every log handler flushed and closed, MPI finalised when it was
    initialised (Open MPI counts a rank that exits without MPI_Finalize as failed), then `os._exit`."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and hasattr(wandb, "teardown"):
        wandb.teardown()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
    os._exit(status)


if __name__ == "__main__":
    leave(main(sys.argv[1:]))
