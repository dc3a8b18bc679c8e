"""The configuration schema: one dataclass per config node, registered in Hydra's ConfigStore.

`conf/config.yaml` composes `base_config` (the `Config` dataclass below) with one YAML file per group:
the dataclass fields hold every default and every type, the YAML files are instances that set
values. Composition refuses a wrong type (`trainer.batch_size=abc`) or an unknown key inside a group
file; `check_keys` refuses keys appended with `+` (`+trainer.foo=1`, `+foo=1`), which Hydra itself lets
through. Range checks live in `__post_init__` and name the full key, so one bad value gives one line.

Nodes with a `_target_` (model, dataset, optimizer, schedule and the compressor's compress /
collective / memory) take their schema from the target's signature: `check_target` refuses a key
that is not a parameter of the target, and the target's constructor checks the values.

This module imports nothing else from the package, so any layer may take its dataclasses as input.
"""
from __future__ import annotations

import importlib
import importlib.resources
import inspect
import math
import os
from collections.abc import Callable
from dataclasses import MISSING as DC_MISSING
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Optional, TypeVar

from hydra.core.config_store import ConfigStore
from hydra.errors import InstantiationException
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf

from ssgd.errors import BadArgument, ConfigError

RANK_HOOK_ENV = "SSGD_RANK_HOOK"   # a file whose attach(trainer, world, cfg) each rank calls (ssgd.run.worker)


class Backend(Enum):
    """How the P ranks run: all in this process (`thread`), or one process per rank under MPI (`mpi`) or
    torch.distributed (`torch`: gloo on CPU, NCCL on GPUs). Each has its row in ssgd.run.backends."""

    thread = "thread"
    mpi = "mpi"
    torch = "torch"


class DistBackend(Enum):
    """The torch.distributed process group of backend=torch (`auto`: nccl when device is cuda, else gloo)."""

    auto = "auto"
    gloo = "gloo"
    nccl = "nccl"


class DistEmit(Enum):
    """What a backend=torch run that does not start its ranks prints (`command`: torchrun / srun lines; `sbatch`:
    a whole SLURM batch script on stdout, also saved as `<run dir>/job.sbatch`)."""

    command = "command"
    sbatch = "sbatch"


class WandbMode(Enum):
    disabled = "disabled"
    offline = "offline"     # files under the run directory, no network (default)
    online = "online"


# raise: the rank raises an exception | kill: the rank sends itself SIGKILL ("raise" is a keyword: functional API)
FailMode = Enum("FailMode", [("raise", "raise"), ("kill", "kill")])


def _int_at_least(value: object, key: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}={value!r}: must be an integer >= {minimum}")


def _finite_at_least(value: object, key: str, minimum: float, strict: bool = False, what: str = "") -> None:
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
          and (value > minimum if strict else value >= minimum))
    if not ok:
        raise ConfigError(f"{key}={value!r}: must be a finite number {'>' if strict else '>='} {minimum:g}{what}")


def check_density(value: object, key: str = "density") -> float:
    """`value` as a float when it is a number in (0, 1] (k = max(int(d * density), 1)); else BadArgument
    (a ConfigError, a ValueError) "key=value: must be a number in (0, 1]". The one density check of the package."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise BadArgument(key, value, "must be a number in (0, 1]")
    return float(value)


def conf_dir() -> Path:
    """The shipped configuration tree (`ssgd/conf`: compressor, cluster, model, ... groups), package data
    found through importlib.resources, so it is there in a checkout and in an installed wheel alike."""
    return Path(str(importlib.resources.files("ssgd") / "conf"))


def compressor_names() -> list[str]:
    """The shipped compressor configs, sorted (conf/compressor/*.yaml stems)."""
    return sorted(p.stem for p in (conf_dir() / "compressor").glob("*.yaml"))


def compressor_config(name: str) -> DictConfig:
    """conf/compressor/<name>.yaml; ConfigError (a ValueError) naming the allowed names when there is none."""
    path = conf_dir() / "compressor" / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"compressor {name!r}: no conf/compressor/{name}.yaml; allowed: {', '.join(compressor_names())}")
    return OmegaConf.load(path)


T = TypeVar("T")


def config_errors(key: str, make: Callable[[], T], node: Any = None) -> T:
    """make(), with a failure turned into a one-line ConfigError about config node `key`: the translator from a
    constructor's errors to the config's.

    A `BadArgument` ("name=value: reason") from a constructor becomes "key.name=value: reason" when `name`
    is a key of `node`; any other ValueError/TypeError message becomes "key: message". ConfigErrors pass.
    """
    try:
        return make()
    except BadArgument as err:
        failure: BaseException | str = err
    except ConfigError:
        raise
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, ConfigError) and not isinstance(cause, BadArgument):
            raise cause from None
        failure = cause if isinstance(cause, (ValueError, TypeError)) else str(err).splitlines()[0]
    except (ValueError, TypeError) as err:
        failure = err
    if isinstance(failure, BadArgument) and isinstance(node, DictConfig) and failure.name in node:
        raise ConfigError(f"{key}.{failure}") from None
    message = str(failure).strip()
    message = message.splitlines()[0] if message else "invalid value"
    raise ConfigError(f"{key}: {message}") from None


class NetEngine(Enum):
    """How the target cluster's network is timed (`cluster.network.engine`)."""

    alphabeta = "alphabeta"   # closed forms of ssgd.perf.cost (target/comm_s only)
    simgrid = "simgrid"       # every collective also runs on SimGrid: target/comm_sim_s (docs/simgrid.md)


@dataclass
class TcpConfig:
    """`cluster.network.simgrid.tcp:` SimGrid's network model settings (ssgd.perf.platform.TcpModel)."""

    model: str = "LV08"                   # LV08 (latency and bandwidth factors apply) | CM02 (no factors)
    latency_factor: float = 13.01         # SimGrid's defaults; `make simgrid-calibrate` fits them on the testbed
    bandwidth_factor: float = 0.97
    tcp_gamma: float = 4194304.0          # bytes: the TCP window that caps one flow at gamma / (2 x latency)
    crosstraffic: bool = True             # acknowledgements load the reverse links (SimGrid's default)


@dataclass
class SimGridConfig:
    """`cluster.network.simgrid:` the simulated cluster (ssgd.perf.platform.Platform; docs/simgrid.md)."""

    bandwidth_gbps: float = 1.0           # each host's NIC, each direction
    latency_s: float = 5e-5               # one way, host to switch
    switch: str = "star"                  # star (full bisection) | backbone (one shared switching capacity)
    backbone_gbps: Optional[float] = None
    backbone_latency_s: float = 0.0
    tcp: TcpConfig = field(default_factory=TcpConfig)


@dataclass
class NetworkConfig:
    """alpha-beta model of one link of the target cluster (Hockney), and its SimGrid platform."""

    alpha: float = MISSING  # seconds per message (latency)
    beta: float = MISSING   # seconds per byte (inverse bandwidth)
    engine: NetEngine = NetEngine.alphabeta
    simgrid: SimGridConfig = field(default_factory=SimGridConfig)

    def __post_init__(self) -> None:
        _finite_at_least(self.alpha, "cluster.network.alpha", 0.0, what=" (seconds per message)")
        _finite_at_least(self.beta, "cluster.network.beta", 0.0, what=" (seconds per byte)")


@dataclass
class ClusterConfig:
    """`cluster:` the TARGET cluster: how many workers, how fast their network is (conf/cluster/) and,
    optionally, the compute profile of its workers (`compute_profile`, checked by `ssgd.run.target_profile`)."""

    name: str = MISSING
    world_size: int = MISSING                  # P, the number of workers
    network: NetworkConfig = MISSING
    hostfile: Optional[str] = None             # backend=mpi: mpiexec --hostfile (null: every rank on this machine)
    mpiexec_args: list[str] = field(default_factory=list)   # extra mpiexec arguments
    agent: Optional[str] = None                # backend=torch with a hostfile: `agent <host> <command>` starts a rank there
    compute_profile: Optional[str] = None      # a Profile JSON (`make profile`): the target's compute (null: a shipped one, matched by d)

    def __post_init__(self) -> None:
        _int_at_least(self.world_size, "cluster.world_size", 1)


WIRE_VALUES = ("fp32", "fp16", "bf16")


def check_wire_values(value: object) -> str:
    """`compressor.wire.values` when it is one of `WIRE_VALUES`; else ConfigError naming the key. The one
    check of the key: the schema and `ssgd.scheme_config` (files read without the schema) call it."""
    if value not in WIRE_VALUES:
        raise ConfigError(f"compressor.wire.values={value!r}: allowed: {', '.join(WIRE_VALUES)}")
    return str(value)


def check_min_compression(value: object) -> float:
    """`compressor.min_compression` as a float when it is a finite number >= 0 (0: the rule is off); else
    ConfigError naming the key. The one check of the key, called as `check_wire_values` is."""
    _finite_at_least(value, "compressor.min_compression", 0.0, what=" (0: off)")
    return float(value)  # type: ignore[arg-type]


@dataclass
class WireConfig:
    """`compressor.wire:` how payload values travel (ssgd.comm.wire; docs/compressors.md#wire-formats)."""

    values: str = "fp32"                       # fp32 | fp16 | bf16 (indices: ssgd.comm.wire.index_bytes)

    def __post_init__(self) -> None:
        check_wire_values(self.values)


@dataclass
class OkTopkConfig:
    """`compressor.oktopk:` Ok-Topk's periods, in steps (Li and Hoefler, PPoPP 2022)."""

    tau: int = 32           # exact local and global thresholds every tau steps, reused in between
    tau_prime: int = 128    # region boundaries recomputed every tau_prime steps

    def __post_init__(self) -> None:
        _int_at_least(self.tau, "compressor.oktopk.tau", 1)
        _int_at_least(self.tau_prime, "compressor.oktopk.tau_prime", 1)


@dataclass
class CompressorConfig:
    """`compressor:` one communication scheme (conf/compressor/): a local compressor, the collective that
    aggregates its payloads, the error-feedback memory, and the density with its per-epoch warm-up."""

    name: str = MISSING
    density: float = MISSING                   # k = max(int(d * density), 1)
    density_warmup: list[float] = field(default_factory=list)   # densities of epochs 0, 1, ... before `density`
    compress: Any = MISSING                    # _target_: a ssgd.compress.base.Compressor (partial: takes generator)
    collective: Any = MISSING                  # _target_: a ssgd.comm.base.Collective
    memory: Any = MISSING                      # _target_: error-feedback memory (partial: takes d, device)
    wire: WireConfig = field(default_factory=WireConfig)
    min_compression: float = 0.0               # go dense when sparse bytes save less than this factor (0: never)
    oktopk: Optional[OkTopkConfig] = None      # compressor=oktopk: its periods (conf/compressor/oktopk.yaml)

    def __post_init__(self) -> None:
        check_density(self.density, "compressor.density")
        check_min_compression(self.min_compression)
        for i, v in enumerate(self.density_warmup):
            check_density(v, f"compressor.density_warmup[{i}]")


@dataclass
class TrainConfig:
    """`trainer:` the S-SGD loop."""

    batch_size: int = 32             # samples per worker per step: weak scaling, global batch = P x batch_size
    epochs: int = 30                 # 4,000 embedded digits: 31 steps per epoch at P = 4 (930 steps), 3 at P = 32
    max_steps: Optional[int] = None  # stop after this many steps in total (null: run all epochs)
    eval_every: int = 5              # epochs between evaluations (and always after the last step)
    eval_batch: int = 1000           # samples per evaluation forward pass
    log_every: int = 10              # steps per metrics.jsonl record (values are interval means)
    grad_clip: Optional[float] = None  # max L2 norm of the aggregated gradient (PTB: 0.25)
    checkpoint_every: int = 0        # epochs between checkpoints in the run directory (0: never)
    checkpoint_every_steps: int = 0  # steps between checkpoints (0: never), for epochs that take hours
    resume: Optional[str] = None     # a checkpoint.pt (or its run directory) to continue from; `auto`: this
    #                                  run directory's checkpoint if there is one, else a fresh start
    resume_weights_only: bool = False  # with resume: a new run that starts from the checkpoint's weights only
    resume_changes: list[str] = field(default_factory=list)  # identity keys (optimizer.lr, ...) a resume may
    #                                  change; each change is recorded in the run's resumes.jsonl
    progress: bool = True            # progress bar on stderr on a TTY, else a status line every status_every_s
    status_every_s: float = 30.0     # seconds between status lines off a TTY (0: none)

    def __post_init__(self) -> None:
        for key in ("batch_size", "epochs", "eval_every", "eval_batch", "log_every"):
            _int_at_least(getattr(self, key), f"trainer.{key}", 1)
        _finite_at_least(self.status_every_s, "trainer.status_every_s", 0.0, what=" (0: no status lines)")
        _int_at_least(self.checkpoint_every, "trainer.checkpoint_every", 0)
        _int_at_least(self.checkpoint_every_steps, "trainer.checkpoint_every_steps", 0)
        if self.resume_weights_only and self.resume in (None, "", "auto"):
            raise ConfigError(f"trainer.resume_weights_only=true needs trainer.resume=<a checkpoint.pt or run "
                              f"directory> (got trainer.resume={self.resume})")
        if self.max_steps is not None:
            _int_at_least(self.max_steps, "trainer.max_steps", 1)
        if self.grad_clip is not None:
            _finite_at_least(self.grad_clip, "trainer.grad_clip", 0.0, strict=True, what=" or null")


@dataclass
class CaptureConfig:
    """`capture:` analysis of u = g + e (off by default; see ssgd.loop.capture and docs/analysis-figures.md)."""

    stats: bool = False              # every `every` steps rank 0 appends the statistics of its u to capture/stats.jsonl
    every: int = 1
    delta: bool = True               # with stats: the IJCAI ratio's parts (one extra dense allreduce per captured step)
    u_steps: list[int] = field(default_factory=list)   # steps at which rank 0 saves u and its selection

    def __post_init__(self) -> None:
        _int_at_least(self.every, "capture.every", 1)
        for s in self.u_steps:
            _int_at_least(s, "capture.u_steps[]", 1)

    @property
    def enabled(self) -> bool:
        return self.stats or bool(self.u_steps)


@dataclass
class MPIConfig:
    """`mpi:` settings of backend=mpi."""

    launch: bool = True              # false: only write <run dir>/worker_config.yaml and print the worker command
    mpiexec: Optional[str] = None    # the MPI launcher to call (null: the virtual environment's own mpiexec)
    timeout_s: float = 300.0         # a rank whose heartbeat stops this long ends the job (ssgd.run.heartbeat)

    def __post_init__(self) -> None:
        _finite_at_least(self.timeout_s, "mpi.timeout_s", 0.0, strict=True, what=" (seconds)")


@dataclass
class DistConfig:
    """`dist:` settings of backend=torch (torch.distributed; docs/gpu-clusters.md)."""

    backend: DistBackend = DistBackend.auto   # auto: nccl for device=cuda, gloo for device=cpu
    timeout_s: float = 300.0         # a collective (or the rendezvous) waiting longer than this fails the rank
    master_addr: Optional[str] = None  # rank 0's host when MASTER_ADDR is unset (null: SLURM's first node)
    master_port: Optional[int] = None  # its port when MASTER_PORT is unset (null: from SLURM_JOB_ID)
    launch: bool = True              # false: only write <run dir>/worker_config.yaml and print torchrun / srun commands
    emit: DistEmit = DistEmit.command  # sbatch: print an sbatch script instead (and start nothing, as launch=false)

    def __post_init__(self) -> None:
        _finite_at_least(self.timeout_s, "dist.timeout_s", 0.0, strict=True, what=" (seconds)")
        if self.master_port is not None and (isinstance(self.master_port, bool) or not 1 <= self.master_port <= 65535):
            raise ConfigError(f"dist.master_port={self.master_port!r}: must be a port number in 1..65535 or null")


@dataclass
class WandbConfig:
    """`wandb:` run tracking (ssgd.utils.wandb_run names, groups and tags each run from its composed choices)."""

    mode: WandbMode = WandbMode.offline
    project: str = "ssgd"
    name: Optional[str] = None       # null: <scheme>-<model>-<dataset>-<cluster>[-<overrides>]-s<seed>
    group: Optional[str] = None      # null: the name without the seed, so the seeds of one setting aggregate
    tags: list[str] = field(default_factory=list)   # added to the automatic tags (backend, device)


@dataclass
class DebugConfig:
    """Fault injection, to test that backend=mpi and backend=torch never hang: read by the tests' rank hook
    (tests/rank_faults.py, named by SSGD_RANK_HOOK; ssgd.run.worker); without the hook, setting `fail_rank` is refused)."""

    fail_rank: Optional[int] = None  # this rank (backend=mpi or torch) fails ...
    fail_step: int = 1               # ... when it starts this step (1-based)
    fail_mode: FailMode = FailMode["raise"]

    def __post_init__(self) -> None:
        if self.fail_rank is not None and not os.environ.get(RANK_HOOK_ENV):
            raise ConfigError(f"debug.fail_rank={self.fail_rank}: fault injection runs in the tests' rank hook only; set "
                              f"{RANK_HOOK_ENV}=tests/rank_faults.py (docs/faults.md)")


@dataclass
class Config:
    """The whole run (conf/config.yaml composes it; print it with `python src/train.py --cfg job`)."""

    model: Any = MISSING             # _target_: a model factory taking the dataset's spec (conf/model/)
    dataset: Any = MISSING           # _target_: a dataset loader (conf/dataset/)
    compressor: CompressorConfig = MISSING
    cluster: ClusterConfig = MISSING
    optimizer: Any = MISSING         # _target_: a torch.optim class, partial (conf/optimizer/)
    schedule: Any = MISSING          # _target_: an LR schedule, partial (conf/schedule/)
    seed: int = 1
    backend: Backend = Backend.thread
    threads: Optional[int] = None    # pool threads of the thread backend (null: usable cores, capped at P)
    device: str = "cpu"              # cpu | cuda | cuda:N (bitwise determinism is promised on cpu only)
    trainer: TrainConfig = field(default_factory=TrainConfig)
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    mpi: MPIConfig = field(default_factory=MPIConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)

    def __post_init__(self) -> None:
        _int_at_least(self.seed, "seed", 0)
        if self.threads is not None:
            _int_at_least(self.threads, "threads", 1)
        if (self.backend is Backend.torch and self.dist.backend is DistBackend.nccl
                and not str(self.device).startswith("cuda")):
            raise ConfigError(f"dist.backend=nccl needs device=cuda (NCCL moves CUDA tensors only; device={self.device}); "
                              "use dist.backend=gloo or auto for CPU tensors")
        if self.cluster.network.engine is NetEngine.simgrid and self.backend is not Backend.thread:
            raise ConfigError(f"cluster.network.engine=simgrid needs backend=thread (every rank in one process, "
                              f"each on its own simulated host); got backend={self.backend.value}")
        if self.dist.emit is DistEmit.sbatch and self.backend is not Backend.torch:
            raise ConfigError(f"dist.emit=sbatch needs backend=torch (got backend={self.backend.value}); for "
                              "backend=mpi submit scripts/slurm/mpi_mpirun.sbatch or mpi_srun.sbatch")


# Registered on import; Hydra imports `hydra_plugins.ssgd_schema` (which imports this module) whenever it
# starts, so every program that composes conf/ finds `base_config` without importing it first.
ConfigStore.instance().store(name="base_config", node=Config)

TARGET_NODES = ("model", "dataset", "optimizer", "schedule", "compressor.compress", "compressor.collective",
                "compressor.memory")


# -- checks Hydra does not do ----------------------------------------------------------------------
def check_keys(cfg: DictConfig, schema: type = Config, path: str = "") -> None:
    """ConfigError for the first key of `cfg` that `schema` (a dataclass) does not declare, recursing
    into nested dataclasses. Hydra's `+key=value` appends keys even to structured nodes."""
    declared = {f.name: f for f in fields(schema)}
    for key in cfg:
        full = f"{path}{key}"
        if key not in declared:
            raise ConfigError(f"{full}: unknown key; allowed: {', '.join(sorted(declared))}")
        sub = _dataclass_type(declared[key])
        if sub is not None and isinstance(cfg[key], DictConfig):
            check_keys(cfg[key], sub, f"{full}.")


def _dataclass_type(f: Any) -> type | None:
    t = f.type
    if isinstance(t, str):                   # `from __future__ import annotations`: resolve by name
        t = globals().get(t)
    return t if isinstance(t, type) and is_dataclass(t) else None


def locate(target: str, key: str) -> Any:
    """The object a `_target_` string names, or ConfigError naming `key`."""
    module, _, name = target.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        raise ConfigError(f"{key}._target_={target!r}: cannot be imported") from None
    return obj


def parameters_of(obj: Any) -> tuple[set[str], bool]:
    """Keyword parameters of a callable (a class: its __init__) and whether it takes **kwargs."""
    sig = inspect.signature(obj)
    names = {p.name for p in sig.parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return names, any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())


def check_target(node: Any, key: str) -> None:
    """Refuse keys of a `_target_` node that its target does not take (the target's signature is the
    node's schema); keys starting with `_` are Hydra's (`_partial_`, `_recursive_`, ...)."""
    if not isinstance(node, DictConfig) or "_target_" not in node:
        raise ConfigError(f"{key}: must be a mapping with a _target_ (got {OmegaConf.to_container(node) if isinstance(node, (DictConfig, ListConfig)) else node!r})")
    names, open_ended = parameters_of(locate(str(node._target_), key))
    if open_ended:
        return
    for name in node:
        if not str(name).startswith("_") and name not in names:
            raise ConfigError(f"{key}.{name}: unknown key for {node._target_}; allowed: {', '.join(sorted(names))}")


def check_all_targets(cfg: DictConfig) -> None:
    for key in TARGET_NODES:
        check_target(OmegaConf.select(cfg, key), key)


def to_plain(cfg: DictConfig) -> dict:
    """The resolved config as plain Python data (enums as their strings): what is saved and logged."""
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def load(data: Any) -> DictConfig:
    """A plain mapping (e.g. a saved worker_config.yaml) merged into the schema: typed and checked like
    a composed config. ConfigError on an unknown key or a wrong type."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.merge(OmegaConf.structured(Config), data)
    except OmegaConfBaseException as err:
        raise ConfigError(one_line(err)) from None


def one_line(err: BaseException) -> str:
    """OmegaConf's multi-line message as one line: 'full_key: first line'."""
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    key = getattr(err, "full_key", None)
    return f"{key}: {first}" if key else first


def default_of(schema: type, name: str) -> Any:
    """The declared default of a schema field (for docs and tests)."""
    for f in fields(schema):
        if f.name == name:
            if f.default is not DC_MISSING:
                return f.default
            if f.default_factory is not DC_MISSING:  # type: ignore[misc]
                return f.default_factory()            # type: ignore[misc]
    raise KeyError(name)
