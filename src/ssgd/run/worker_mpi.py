"""One MPI rank of `backend=mpi`: `python -m mpi4py -m ssgd.run.worker_mpi <run dir>/worker_config.yaml`.

Reads the config the launcher composed and resolved (never composes its own), checks that the MPI
job has `cluster.world_size` ranks, trains, and on rank 0 writes the run outputs next to the config
file and logs the report (stdout and `<run dir>/train.log`, ssgd.utils.logs.setup_rank). Other ranks'
output lines are prefixed with `[rank r]`. How a rank's run ended,
when not well, goes to the launcher's file (`report_end`) or, under your own mpirun, to stderr as one
line; the exit status is the run's (docs/faults.md).
"""
from __future__ import annotations

import logging
import os
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TextIO

from omegaconf import OmegaConf

log = logging.getLogger(__name__)


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


def inject_fault(trainer, rank: int, debug) -> None:
    """`debug.fail_rank` fails at step `debug.fail_step` by raising or by SIGKILL (tests only)."""
    import signal

    if debug.fail_rank is None or debug.fail_rank != rank:
        return
    step = trainer.step

    def failing_step(it: int, density: float) -> dict:
        if trainer.step_count + 1 == debug.fail_step:
            if debug.fail_mode.value == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected failure at step {debug.fail_step} (debug.fail_rank={rank})")
        return step(it, density)

    trainer.step = failing_step


def report_end(status: int, message: str, run_dir: Path, say: bool) -> None:
    """Tell the user how this rank's job ended: to the launcher's file when `launch` started the job (the
    first rank to write it wins, so the user sees the first failure), else as one line on stderr (when
    `say`: ranks that all hit the same problem let one of them say it)."""
    from ssgd.run.launch_mpi import ENDED_ENV

    path = os.environ.get(ENDED_ENV)
    if path is None:
        if say:
            log.error(f"error: {message}")
        return
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return
    except OSError:
        log.error(f"error: {message}")
        return
    with os.fdopen(fd, "w") as f:
        f.write(f"{status}\t{message}\n")


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
    from ssgd.run.launch_mpi import ENDED_FILE

    path = run_dir / ENDED_FILE.parent / f"rank{rank}-traceback.txt"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(traceback.format_exc())
    except OSError:
        pass
    first = without_banners(f"{type(err).__name__}: {err}".strip().splitlines()[0])
    return f"backend={backend}: rank {rank} failed: {first} (traceback in {path})"


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


def main(argv: list[str], make_world: Callable[[], Any] | None = None) -> int:
    """One rank's run; returns its exit status (docs/faults.md). `make_world` builds its world (default:
    `MPIWorld`; `ssgd.run.worker_torch` passes a TorchWorld). A rank that ends alone (an exception) ends the
    job; endings every rank reaches together (interrupted, diverged) wait for rank 0 to finish writing."""
    from ssgd.loop.stop import StopRequest
    from ssgd.run.heartbeat import start_from_env
    from ssgd.run.orphans import watch_parent

    watch_parent()                            # the launcher died (kill -9, SIGHUP, OOM): stop, never orphan
    beat = start_from_env()                   # the launcher's mpi.timeout_s watch (ssgd.run.heartbeat)
    stop = StopRequest()
    try:
        with stop.installed():                # SIGTERM/SIGUSR1, SIGINT/SIGUSR2: checkpoint at the next step
            return _main(argv, stop, make_world, beat)
    finally:
        if beat is not None:
            beat.done()


def _main(argv: list[str], stop, make_world: Callable[[], Any] | None, beat=None) -> int:
    from ssgd.run import build
    from ssgd import config
    from ssgd.errors import EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_FAILED, AlreadyFinished, ConfigError, Interrupted
    from ssgd.run.report import diverged, report
    from ssgd.utils.logs import setup_rank

    if len(argv) != 1:
        print("usage: mpiexec -n P python -m mpi4py -m ssgd.run.worker_mpi RUN_DIR/worker_config.yaml", file=sys.stderr)
        return EXIT_BAD_INPUT
    if make_world is None:
        from ssgd.worlds.mpi import MPIWorld as make_world
    world = make_world()
    if beat is not None:
        from ssgd.run.heartbeat import wrap_world
        wrap_world(world, beat)
    if world.rank != 0:
        sys.stdout, sys.stderr = Prefixed(sys.stdout, f"[rank {world.rank}] "), Prefixed(sys.stderr, f"[rank {world.rank}] ")
    path = Path(argv[0])
    run_dir = path.parent
    setup_rank(run_dir, world.is_root)
    problem: tuple[int, str] | None = None
    try:
        if not path.is_file():
            raise ConfigError(f"{path}: no such worker config (written by `python src/train.py backend=mpi`)")
        cfg = config.load(OmegaConf.load(path))
        if cfg.cluster.world_size != world.size:
            raise ConfigError(f"cluster.world_size={cfg.cluster.world_size} but this {world.job} has {world.size} ranks; "
                              f"start it with {world.start_hint(cfg.cluster.world_size)} or set cluster.world_size={world.size}")
        cfg = world.prepare(cfg)        # this rank's device (one GPU per rank); torch.distributed: join the group
        trainer, writer, _ = build.trainer(cfg, run_dir, world, stop=stop)
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
    inject_fault(trainer, world.rank, cfg.debug)
    if beat is not None:
        beat.track(trainer)
        beat.phase = "compute"
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
    except Exception as err:                  # this rank alone: the others wait in a collective
        report_end(EXIT_FAILED, failure(err, world.rank, run_dir, world.backend), run_dir, say=True)
        end_alone(world, EXIT_FAILED)
    writer.close()
    if world.is_root:
        log.info(report(summary))
        log.info(f"  outputs: {run_dir}")
    if diverged(summary) is None:
        return 0
    if world.is_root:                         # every rank knows: the loss and the checks are gathered
        report_end(EXIT_DIVERGED, diverged(summary), run_dir, say=True)
    end_together(world, EXIT_DIVERGED)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
