"""`backend=torch` from a plain shell: start P local torch.distributed ranks on the resolved config and watch them.

Like the MPI launcher (`ssgd.run.launch_mpi`), this process composes nothing and joins no process group. The
resolved config is saved as `<run dir>/worker_config.yaml` (`ssgd.run.job.prepare`) and each rank runs
`python -m ssgd.run.worker torch <that file>` with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR=127.0.0.1 and a free MASTER_PORT (or `dist.master_port`), as torchrun would set them on one
host. The launcher watches its children: the first rank that exits non-zero (or is killed) is named
in one line, the other ranks are stopped (SIGTERM, then SIGKILL after a grace period), and the job's
exit status is that rank's (1 when it died from a signal). A dead rank thus ends the job within about
a second, whatever `dist.timeout_s` is. Interrupted (Ctrl-C, SIGTERM), the launcher stops its ranks and
returns 130 / 143.

With `cluster.hostfile` and `cluster.agent` (an ssh-like command: `agent <host> <shell command>`), rank r is
started on the hostfile's r-th slot through the agent instead, with LOCAL_RANK 0 of 1 per host and MASTER_ADDR
the first host: one rank per machine, as torchrun with `--nnodes P --nproc-per-node 1` would place them
(the testbed of docs/testbed.md gives both). The watching and stopping are the same.

`dist.launch=false` writes the file and prints the torchrun and srun commands that run the same ranks
on a cluster (docs/gpu-clusters.md); `dist.emit=sbatch` prints (and saves as `<run dir>/job.sbatch`) a SLURM
batch script that runs them (docs/slurm.md).
"""
from __future__ import annotations

import json
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ssgd.errors import ConfigError, Interrupted, RunEnded
from ssgd.loop.stop import exit_status
from ssgd.run import backends, reach
from ssgd.run.job import (ENDED_ENV, ENDED_FILE, prepare, read_ended, read_reserved, release, reserve,
                          write_reserved)
from ssgd.utils.atomic import write_text_atomic
from ssgd.run.launch_mpi import worker_env
from ssgd.worlds.rendezvous import LocalRank, check_port_free, free_port, rank_device

log = logging.getLogger("ssgd.train")
POLL_S = 0.05          # how often the launcher looks at its ranks
GRACE_S = 5.0          # SIGTERM -> SIGKILL for the ranks still running after one failed


def worker_command(config_path: Path) -> list[str]:
    """One rank's command: `python -m ssgd.run.worker torch <config_path>`."""
    return backends.parts("torch").worker_command(config_path)


def rank_env(base: dict[str, str], rank: int, P: int, port: int) -> dict[str, str]:
    """The environment of local rank `rank` of P on this host (torchrun's variables)."""
    return {**base, "RANK": str(rank), "WORLD_SIZE": str(P), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(P),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


# What a rank started on another host needs from this launcher's environment (the rest is the host's own).
FORWARDED = ("OMP_NUM_THREADS", "MALLOC_ARENA_MAX", "WANDB_SILENT", "WANDB_MODE", "PYTHONPATH", "SSGD_ENDED_FILE")


def hostfile_slots(path: Path) -> list[str]:
    """The hosts of an Open MPI hostfile, one entry per slot, in order (`host slots=N`; `#` comments).
    ConfigError (one line) for a missing file or a bad slots count."""
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise ConfigError(f"cluster.hostfile={str(path)!r}: cannot read it ({e.strerror})") from None
    hosts: list[str] = []
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        slots = 1
        for word in words[1:]:
            key, _, value = word.partition("=")
            if key == "slots":
                if not value.isdigit() or int(value) < 1:
                    raise ConfigError(f"cluster.hostfile={str(path)!r} line {number}: slots={value!r}: must be a "
                                      "positive integer")
                slots = int(value)
        hosts += [words[0]] * slots
    return hosts


def remote_command(agent: str, host: str, env: dict[str, str], command: list[str]) -> list[str]:
    """`agent host '<exec env K=V ... command>'`: the agent gets one shell command, as ssh would, and the
    rank replaces the remote shell (`exec`), so stopping the agent's process stops the rank."""
    assignments = [f"{k}={v}" for k, v in env.items()]
    return [*shlex.split(agent), host, shlex.join(["exec", "env", *assignments, *command])]


def host_ranks(cfg: DictConfig, base: dict[str, str], config_path: Path, port: int) -> list[list[str]] | None:
    """The agent command of every rank when `cluster.hostfile` and `cluster.agent` are set, else None.
    ConfigError when the hostfile has fewer slots than cluster.world_size."""
    hostfile, agent = cfg.cluster.get("hostfile"), cfg.cluster.get("agent")
    if not (hostfile and agent):
        return None
    P = int(cfg.cluster.world_size)
    hosts = hostfile_slots(Path(hostfile))
    if len(hosts) < P:
        raise ConfigError(f"cluster.hostfile={hostfile!r}: {len(hosts)} slots for cluster.world_size={P}")
    hosts = hosts[:P]
    commands = []
    for r, host in enumerate(hosts):
        local = hosts[:r].count(host)
        env = {k: base[k] for k in FORWARDED if base.get(k)}
        env.update(RANK=str(r), WORLD_SIZE=str(P), LOCAL_RANK=str(local), LOCAL_WORLD_SIZE=str(hosts.count(host)),
                   MASTER_ADDR=hosts[0], MASTER_PORT=str(port))
        commands.append(remote_command(str(agent), host, env, worker_command(config_path)))
    return commands


def check_devices(cfg: DictConfig) -> None:
    """Refuse device=cuda with more local ranks than GPUs before any rank starts (one line)."""
    if str(cfg.device) == "cuda":
        import torch

        P = int(cfg.cluster.world_size)
        rank_device("cuda", LocalRank(P - 1, P, "LOCAL_RANK"), torch.cuda.device_count(),
                    os.environ.get("CUDA_VISIBLE_DEVICES"))


def describe_exit(status: int) -> str:
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"was killed by signal {-status} ({name})"
    return f"exited with status {status}"


WATCHED_FILE = Path("mpi") / "watched.txt"   # the launcher's account of the first rank to fail (`watch`)


def watch(procs: list[subprocess.Popen], hosts: list[str] | None = None, said: Path | None = None) -> int:
    """Wait for every rank; on the first failure stop the others and return its status, having written to
    `said` (when given, JSON) the first failed rank's status, a line naming it (and its host when the ranks run on
    `hosts`) and the note naming the hosts that do not answer: `ending` chooses the job's one line from that and
    the ranks' own reports."""
    while True:
        codes = [p.poll() for p in procs]
        # a killed rank first: when a peer's failure (its connection reset) shows in the same poll, it came after
        failed = sorted(((r, c) for r, c in enumerate(codes) if c not in (None, 0)), key=lambda rc: rc[1] > 0)
        if failed:
            where = (lambda r: f" on host {hosts[r]}") if hosts else (lambda r: "")
            line = "; ".join(f"rank {r}{where(r)} {describe_exit(c)}" for r, c in failed)
            if said is not None:
                note = reach.silent_hosts_note(hosts)
                write_reserved(said, json.dumps({"status": failed[0][1], "note": note,     # reserved by `launch`
                                                 "line": f"backend=torch: {line}{note}; the other ranks were stopped"}))
            log.info(f"backend=torch: {line}; stopping the other ranks")
            stop(procs)
            return failed[0][1] if failed[0][1] > 0 else 1
        if all(c == 0 for c in codes):
            return 0
        time.sleep(POLL_S)


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def launch(cfg: DictConfig, run_dir: Path) -> int:
    """Save the resolved config, run P local ranks in the foreground, return the job's exit status."""
    check_devices(cfg)
    config_path = prepare(cfg, run_dir)
    P = int(cfg.cluster.world_size)
    port = int(OmegaConf.select(cfg, "dist.master_port") or free_port())
    ended = run_dir / ENDED_FILE                # the ranks' report of how the job ended (`ending`): its bytes
    reserve(ended, "the ranks' report of how the job ended")      # reserved, so that a full disk cannot lose it
    watched = run_dir / WATCHED_FILE
    reserve(watched, "the launcher's report of the first rank to fail")
    base = {**worker_env(local=True), ENDED_ENV: str(ended)}
    remote = host_ranks(cfg, base, config_path, port)
    hosts = hostfile_slots(Path(cfg.cluster.hostfile))[:P] if remote is not None else None
    if remote is None and OmegaConf.select(cfg, "dist.master_port"):
        check_port_free(port)                 # rank 0 listens here: one line now, not a rank's traceback
    procs: list[subprocess.Popen] = []
    try:       # SIGTERM, SIGHUP, SIGINT: stop the ranks too, not only this process. SIGINT gets its handler even
        # when this process inherited it ignored (a job started without job control), where Python never raises
        # KeyboardInterrupt: the same signal gets the same answer from every launcher
        previous = {s: signal.signal(s, _terminated) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    except ValueError:                                          # not the main thread: leave signals alone
        previous = {}
    try:
        for r in range(P):      # each rank watches its parent and stops if it dies (ssgd.run.orphans)
            if remote is not None:
                procs.append(subprocess.Popen(remote[r], env=base))
            else:
                procs.append(subprocess.Popen(worker_command(config_path), env=rank_env(base, r, P, port)))
        return watch(procs, hosts, watched)
    except KeyboardInterrupt:
        stop(procs)
        return 130
    except Terminated as signalled:
        stop(procs)
        return 128 + signalled.signum
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


class Terminated(Exception):
    """The launcher received SIGTERM, SIGHUP or SIGINT (`signum`)."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = int(signum)


def _terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


INTERRUPTS = {exit_status(s): s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}


def ending(status: int, run_dir: Path) -> RunEnded | None:
    """How a launched job ended, as the one line src/train.py raises (None: it finished). The ranks wrote their
    line to `<run dir>/mpi/ended.txt` (the first rank wins) instead of stderr; an interrupt's line names the
    signal the launcher got (SIGHUP reaches the ranks as SIGTERM). A failure is the first failed rank's line: the
    launcher's (`watch`, `<run dir>/mpi/watched.txt`) when that rank was killed or reported nothing, else the
    rank's own report; what the other ranks reported after it stays in their traceback files."""
    if status == 0:
        release(run_dir / ENDED_FILE)
        release(run_dir / WATCHED_FILE)
        return None
    reported = read_ended(run_dir / ENDED_FILE)
    if status in INTERRUPTS:
        name = signal.Signals(INTERRUPTS[status]).name
        line = reported[1] if reported and reported[1].startswith("interrupted by ") else \
            f"backend=torch: interrupted by {name}; the ranks were stopped before they reached a step boundary " \
            f"(exit status {status}); no checkpoint was written"
        return Interrupted(re.sub(r"^interrupted by SIG\w+", f"interrupted by {name}", line), status, step=-1,
                           checkpoint=None)
    try:
        watched = json.loads(read_reserved(run_dir / WATCHED_FILE) or "null")
    except ValueError:
        watched = None
    if watched is not None and (watched["status"] < 0 or reported is None):
        # the first rank to fail was killed (it could say nothing) or said nothing: the launcher's line names it;
        # what the others reported after it (a peer's reset connection) stays in their traceback files
        return RunEnded(watched["line"], status)
    if reported is not None:     # the failing rank's own account (its exception), and the hosts that are silent
        return RunEnded(reported[1] + (watched["note"] if watched else ""), status)
    return RunEnded(f"backend=torch: the job failed with exit status {status} (see the rank messages above)", status)


def print_commands(cfg: DictConfig, run_dir: Path) -> None:
    """dist.launch=false: write the worker config and print how to start the ranks on a cluster."""
    config_path = prepare(cfg, run_dir)
    P = int(cfg.cluster.world_size)
    module = " ".join(worker_command(config_path)[1:])
    torchrun = Path(sys.executable).parent / "torchrun"
    log.info(f"wrote {config_path}; run the {P} ranks with\n"
             f"  {torchrun if torchrun.exists() else 'torchrun'} --nnodes N --nproc-per-node G {module}   "
             f"(N x G = {P}; add --rdzv-backend c10d --rdzv-endpoint HOST:PORT on several nodes)\n"
             f"  srun -n {P} {sys.executable} {module}")


SBATCH_FILE = "job.sbatch"


def sbatch_script(cfg: DictConfig, config_path: Path) -> str:
    """The text of a SLURM batch script that runs the ranks of `config_path` (a saved worker config), one
    torch.distributed rank per task as `scripts/slurm/torch_srun.sbatch` starts them: `#SBATCH --ntasks` is
    cluster.world_size, `--gpus-per-task=1` when the device is CUDA, `--requeue` only when trainer.resume=auto
    (a requeued job then continues from the run directory's checkpoint). Absolute paths throughout, so it is
    submitted from any directory; a job whose task count differs from the world size stops with exit 2.
    Needs no device and starts nothing (valid bash: `bash -n`, tests/unit/test_sbatch_emit.py)."""
    P = int(cfg.cluster.world_size)
    config_path = config_path.resolve()
    src = Path(__file__).resolve().parents[2]
    worker = shlex.join(worker_command(config_path))
    cuda = str(cfg.device).startswith("cuda")
    auto = str(OmegaConf.select(cfg, "trainer.resume", default=None)) == "auto"
    lines = [
        "#!/usr/bin/env bash",
        f"# backend=torch under SLURM: {P} torch.distributed ranks, one per task ({'NCCL' if cuda else 'gloo'}), "
        "written by `src/train.py ... dist.emit=sbatch`.",
        f"# The run: {config_path} (resolved; the outputs go beside it).",
        "# Submit with `sbatch <this file>` from any directory; sbatch options on the command line (--time,",
        "# --partition, --nodes, ...) override the #SBATCH lines below, except that --ntasks must stay "
        f"{P}.",
        "#SBATCH --job-name=ssgd-torch",
        f"#SBATCH --ntasks={P}",
        "#SBATCH --cpus-per-task=1",
        *(["#SBATCH --gpus-per-task=1         # device=cuda: rank r takes its task's GPU"] if cuda else []),
        "#SBATCH --time=01:00:00",
        "#SBATCH --output=slurm-%x-%j.out",
        "#SBATCH --signal=USR1@120        # USR1 120 s before the time limit: the ranks checkpoint and stop",
        *(["#SBATCH --requeue                 # trainer.resume=auto: a requeued job resumes its checkpoint"]
          if auto else ["# (no --requeue: trainer.resume is not auto, so a requeued job would not resume)"]),
        "set -euo pipefail",
        f'[[ ${{SLURM_NTASKS:-}} == {P} ]] || {{ echo "error: this job has ${{SLURM_NTASKS:-no}} tasks; the run has '
        f'cluster.world_size={P} (sbatch --ntasks={P})" >&2; exit 2; }}',
        "export OMP_NUM_THREADS=1 MALLOC_ARENA_MAX=2 WANDB_SILENT=true",
        f"export PYTHONPATH={shlex.quote(str(src))}${{PYTHONPATH:+:$PYTHONPATH}}",
        f"RUN=(srun --kill-on-bad-exit=1 {worker})",
        'echo "+ ${RUN[*]}"',
        '"${RUN[@]}"',
    ]
    return "\n".join(lines) + "\n"


def print_sbatch(cfg: DictConfig, run_dir: Path) -> Path:
    """dist.emit=sbatch: write the worker config and `<run dir>/job.sbatch`, print the script on stdout
    (nothing else: `... dist.emit=sbatch > job.sbatch` gives the same file); returns the script's path."""
    config_path = prepare(cfg, run_dir)
    text = sbatch_script(cfg, config_path)
    path = run_dir / SBATCH_FILE
    write_text_atomic(path, text, "the batch script")
    path.chmod(0o755)
    sys.stdout.write(text)
    sys.stdout.flush()
    return path


def start(cfg: DictConfig, run_dir: Path) -> None:
    """The launcher's part of ssgd.run.backends: run the job; RunEnded / Interrupted with its one line (`ending`)
    unless it finished."""
    ended = ending(launch(cfg, run_dir), run_dir)
    if ended is not None:
        raise ended


def print_start(cfg: DictConfig, run_dir: Path) -> None:
    """`dist.emit=sbatch`: print a batch script; `dist.launch=false`: print the torchrun / srun commands."""
    emit = OmegaConf.select(cfg, "dist.emit", default="command")
    if getattr(emit, "value", emit) == "sbatch":
        print_sbatch(cfg, run_dir)
    else:
        print_commands(cfg, run_dir)


def run(cfg: DictConfig, run_dir: Path) -> int:
    """Launch (or, with dist.launch=false or dist.emit=sbatch, only print how to start the ranks: `print_start`).
    Returns the job's exit status (`ending` gives its one line); ConfigError for bad input found before any rank
    starts."""
    emit = OmegaConf.select(cfg, "dist.emit", default="command")
    if getattr(emit, "value", emit) == "sbatch" or not OmegaConf.select(cfg, "dist.launch", default=True):
        print_start(cfg, run_dir)
        return 0
    return launch(cfg, run_dir)
