"""Train one run in a process forked from a warm server, instead of a fresh interpreter.

`make figs` trains about 90 short runs. Started as `python src/train.py ...`, each one pays again for
the interpreter, `import torch` (and `torch._dynamo`, which `torch.optim`'s first step imports), Hydra,
the lab and matplotlib (the run's report figure): 2-4 s of CPU per run, a few minutes of the whole.
Python's `forkserver` start method imports those once, in a server process, and forks a child of it for
every run. The child is still a process of its own, started from nothing the lab has touched: no torch
op ran in the server (so no thread pool exists to break across the fork), and the run sets its seeds,
threads and signal handlers itself, as it does in a fresh interpreter. `--fresh` in runs.py starts
fresh interpreters instead; both give the same results (tests/unit/test_figs_forked.py).

A child runs `src/train.py` with the given argv, in the given directory and environment, with its
stdout and stderr (file descriptors 1 and 2, so C-level output too) sent to a log file; its exit status
is the run's.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import runpy
import sys
from multiprocessing import forkserver
from multiprocessing.context import BaseContext
from pathlib import Path

# What every run imports; a module that fails to import here is imported by the run itself instead.
PRELOAD = ["torch", "torch._dynamo", "torch.optim", "hydra", "omegaconf", "ssgd.run.app", "ssgd.run.build",
           "ssgd.loop.trainer", "ssgd.utils.result_files", "matplotlib.pyplot"]


def server(env: dict[str, str]) -> BaseContext:
    """A forkserver context preloading PRELOAD, its server started now with `env` on top of this process's
    environment (restored after). Thread counts such as OMP_NUM_THREADS are read once, when the OpenMP
    runtime loads with torch, so they must be in the server's environment, before it imports torch. The
    server is one per process: a second call reuses the first's."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        forkserver.ensure_running()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return ctx


def child(train_py: str, argv: list[str], cwd: str, env: dict[str, str], log: str) -> None:
    """The child's body: `python train_py *argv` in `cwd` with `env` added, output to `log`."""
    os.chdir(cwd)
    os.environ.update(env)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.argv = [train_py, *argv]
    runpy.run_path(train_py, run_name="__main__")


def train(ctx: BaseContext, train_py: Path, argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> int:
    """Run `train_py argv` in a child forked from ctx's server; its exit status (0 on success, -N when
    signal N killed it)."""
    proc = ctx.Process(target=child, args=(str(train_py), argv, str(cwd), env, str(log)))
    proc.start()
    proc.join()
    return int(proc.exitcode if proc.exitcode is not None else 1)
