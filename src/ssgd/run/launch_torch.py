"""`backend=torch` from a plain shell: start P local torch.distributed ranks on the resolved config and watch them.

Like the MPI launcher (`ssgd.run.launch_mpi`), this process composes nothing and joins no process group. The
resolved config is saved as `<run dir>/worker_config.yaml` (`ssgd.run.launch_mpi.prepare`) and each rank runs
`python -m ssgd.run.worker_torch <that file>` with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR=127.0.0.1 and a free MASTER_PORT (or `dist.master_port`), as torchrun would set them on one
host. The launcher watches its children: the first rank that exits non-zero (or is killed) is named
in one line, the other ranks are stopped (SIGTERM, then SIGKILL after a grace period), and the job's
exit status is that rank's (1 when it died from a signal). A dead rank thus ends the job within about
a second, whatever `dist.timeout_s` is. Interrupted (Ctrl-C, SIGTERM), the launcher stops its ranks and
returns 130 / 143.

`dist.launch=false` writes the file and prints the torchrun and srun commands that run the same ranks
on a cluster (docs/gpu-clusters.md).
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ssgd.run.launch_mpi import prepare, worker_env
from ssgd.worlds.rendezvous import LocalRank, rank_device

log = logging.getLogger("ssgd.train")
POLL_S = 0.05          # how often the launcher looks at its ranks
GRACE_S = 5.0          # SIGTERM -> SIGKILL for the ranks still running after one failed


def worker_command(config_path: Path) -> list[str]:
    return [sys.executable, "-m", "ssgd.run.worker_torch", str(config_path)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(base: dict[str, str], rank: int, P: int, port: int) -> dict[str, str]:
    """The environment of local rank `rank` of P on this host (torchrun's variables)."""
    return {**base, "RANK": str(rank), "WORLD_SIZE": str(P), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(P),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


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


def watch(procs: list[subprocess.Popen]) -> int:
    """Wait for every rank; on the first failure name it, stop the others and return its status."""
    while True:
        codes = [p.poll() for p in procs]
        failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            said = "; ".join(f"rank {r} {describe_exit(c)}" for r, c in failed)
            log.error(f"error: backend=torch: {said}; stopping the other ranks")
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
    base = worker_env(local=True)
    procs: list[subprocess.Popen] = []
    try:       # SIGTERM, SIGHUP: stop the ranks too, not only this process
        previous = {s: signal.signal(s, _terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    except ValueError:                                          # not the main thread: leave signals alone
        previous = {}
    try:
        for r in range(P):      # each rank watches this launcher and stops if it dies (ssgd.run.orphans)
            procs.append(subprocess.Popen(worker_command(config_path), env=rank_env(base, r, P, port)))
        return watch(procs)
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
    """The launcher received SIGTERM or SIGHUP (`signum`)."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = int(signum)


def _terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


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


def run(cfg: DictConfig, run_dir: Path) -> int:
    """`python src/train.py backend=torch`: launch (or, with dist.launch=false, print the commands).
    Returns the exit status; ConfigError for bad input found before any rank starts."""
    if not OmegaConf.select(cfg, "dist.launch", default=True):
        print_commands(cfg, run_dir)
        return 0
    return launch(cfg, run_dir)            # src/train.py turns a non-zero status into its one line

