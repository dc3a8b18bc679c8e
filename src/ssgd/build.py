"""Turn a composed config into the objects of one run: checked once (`spec`), built once (`trainer`).

`spec(cfg)` does every check that needs no data and no world (the MPI launcher runs it before it starts
any rank) and builds the cheap objects: the network model, the scheme's factories, the LR schedule and
the optimizer factory. `trainer(spec, run_dir)` then loads the data, builds the model and the world and
wires the trainer, without building anything a second time.

Every problem is a `ConfigError` whose message names the offending key and what is allowed;
`src/train.py` prints it as one line and exits with status 2. Constructors below this layer raise
ValueError/TypeError with messages of the form `param=value: ...`; `built` prefixes the config node.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ssgd.capture import Capture
from ssgd.compress.base import Compressor
from ssgd.config import Config, check_all_targets, check_keys, one_line, to_plain
from ssgd.data.base import TensorData
from ssgd.errors import ConfigError
from ssgd.models.dropout import has_global_dropout
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.schedule import LRSchedule
from ssgd.sync import DensitySchedule, Scheme
from ssgd.trainer import Trainer
from ssgd.utils import wandb_run
from ssgd.utils.metrics import MetricWriter
from ssgd.utils.seeding import rank_generator
from ssgd.world import ThreadWorld, World

T = TypeVar("T")
OptimizerFactory = Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]


def built(key: str, make: Callable[[], T], node: Any = None) -> T:
    """make(), with a failure turned into a one-line ConfigError about config node `key`.

    A ValueError/TypeError "name=value: reason" from a constructor becomes "key.name=value: reason" when
    `name` is a key of `node`; any other message becomes "key: message". ConfigErrors pass through.
    """
    try:
        return make()
    except ConfigError:
        raise
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, ConfigError):
            raise cause from None
        message = str(cause) if isinstance(cause, (ValueError, TypeError)) else str(err).splitlines()[0]
    except (ValueError, TypeError) as err:
        message = str(err)
    message = message.strip().splitlines()[0] if message.strip() else "invalid value"
    name = re.match(r"^(\w+)=", message)
    if name and isinstance(node, DictConfig) and name.group(1) in node:
        raise ConfigError(f"{key}.{message}") from None
    raise ConfigError(f"{key}: {message}") from None


@dataclass(frozen=True)
class RunSpec:
    """A checked configuration and the objects that need neither data nor a world."""

    cfg: DictConfig                   # the composed config, typed by the schema
    config: Config                    # the same as dataclasses (`trainer`, `capture`, `wandb`, ...)
    network: AlphaBeta
    scheme: Scheme
    schedule: LRSchedule
    make_optimizer: OptimizerFactory
    device: torch.device

    @property
    def world_size(self) -> int:
        return self.config.cluster.world_size


def typed(cfg: DictConfig) -> Config:
    """The config as schema dataclasses; their `__post_init__` range checks run here."""
    try:
        return OmegaConf.to_object(cfg)  # type: ignore[return-value]
    except OmegaConfBaseException as err:
        if isinstance(err.__cause__, ConfigError):
            raise err.__cause__ from None
        raise ConfigError(one_line(err)) from None


def spec(cfg: DictConfig) -> RunSpec:
    """Check `cfg` completely (except what needs the data or a world) and build its cheap objects."""
    check_keys(cfg)
    check_all_targets(cfg)
    config = typed(cfg)
    P = config.cluster.world_size
    net = config.cluster.network
    make_optimizer = optimizer_factory(cfg)
    return RunSpec(cfg=cfg, config=config, network=AlphaBeta(alpha=net.alpha, beta=net.beta),
                   scheme=scheme(cfg, config.seed), schedule=lr_schedule(cfg, P), make_optimizer=make_optimizer,
                   device=device(config.device))


def network(cfg: DictConfig) -> AlphaBeta:
    net = cfg.cluster.network
    return AlphaBeta(alpha=net.alpha, beta=net.beta)


def scheme(cfg: DictConfig, seed: int) -> Scheme:
    c = cfg.compressor
    make_compress = built("compressor.compress", lambda: instantiate(c.compress), c.compress)
    make_memory = built("compressor.memory", lambda: instantiate(c.memory), c.memory)
    collective = built("compressor.collective", lambda: instantiate(c.collective), c.collective)
    density = built("compressor", lambda: DensitySchedule(c.density, tuple(c.density_warmup or ())), c)

    def make_compressor(rank: int) -> Compressor:
        return make_compress(generator=rank_generator(seed, rank, "compressor"))

    built("compressor.compress", lambda: make_compressor(0), c.compress)     # the constructor's own checks
    return Scheme(name=c.name, make_compressor=make_compressor,
                  make_memory=lambda d, device="cpu": make_memory(d=d, device=device),
                  collective=collective, density=density)


def lr_schedule(cfg: DictConfig, P: int) -> LRSchedule:
    make = built("schedule", lambda: instantiate(cfg.schedule), cfg.schedule)
    return built("schedule", lambda: make(lr=learning_rate(cfg), world_size=P), cfg.schedule)


def learning_rate(cfg: DictConfig) -> float:
    if "lr" not in cfg.optimizer:
        raise ConfigError(f"optimizer: needs an `lr` key (the LR schedule scales it); {cfg.optimizer._target_} has none")
    return built("optimizer", lambda: LRSchedule(lr=cfg.optimizer.lr).lr, cfg.optimizer)


def optimizer_factory(cfg: DictConfig) -> OptimizerFactory:
    """The configured torch.optim class with its settings, applied to the aggregated gradient.

    Called once here on a throwaway parameter, so torch's own argument checks run before training."""
    learning_rate(cfg)
    make = built("optimizer", lambda: instantiate(cfg.optimizer), cfg.optimizer)
    built("optimizer", lambda: make([torch.nn.Parameter(torch.zeros(1))]), cfg.optimizer)
    return make


def dataset(cfg: DictConfig) -> TensorData:
    return built("dataset", lambda: instantiate(cfg.dataset), cfg.dataset)


def device(name: str) -> torch.device:
    """`device`: cpu (default; the bitwise guarantees are measured there), cuda or cuda:N."""
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError):
        raise ConfigError(f"device={name!r}: must be cpu, cuda or cuda:N") from None
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"device={name!r}: must be cpu, cuda or cuda:N")
    if dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()):
        raise ConfigError(f"device={name!r}: no such CUDA device here (torch.cuda.is_available() is "
                          f"{torch.cuda.is_available()}); use device=cpu")
    return dev


def model(cfg: DictConfig, data: TensorData, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)            # identical initial weights on every rank and backend
    m = built("model", lambda: instantiate(cfg.model, spec=data.spec), cfg.model)
    if has_global_dropout(m):
        raise ConfigError("model: uses torch.nn.Dropout (process-global RNG, nondeterministic with virtual "
                          "workers); use ssgd.models.GenDropout")
    return m.to(device(cfg.device))


def trainer(cfg: DictConfig | RunSpec, run_dir: Path, world: World | None = None) -> tuple[Trainer, MetricWriter, World]:
    """Build everything a run needs (checking `cfg` first unless it is already a `RunSpec`); `world`
    defaults to a `ThreadWorld` (the MPI worker passes its `MPIWorld`)."""
    s = cfg if isinstance(cfg, RunSpec) else spec(cfg)
    c = s.config
    data = dataset(s.cfg)
    mdl = model(s.cfg, data, c.seed)
    d = sum(p.numel() for p in mdl.parameters() if p.requires_grad)
    built("compressor.collective", lambda: s.scheme.collective.check_numel(d))
    labels = {"compressor": c.compressor.name, "cluster": c.cluster.name, "model": s.cfg.model._target_,
              "dataset": data.spec.name, "backend": c.backend.value, "seed": c.seed}
    world = world or ThreadWorld(s.world_size, c.threads)
    try:
        init = wandb_run.init_kwargs(to_plain(s.cfg), *wandb_run.hydra_context(run_dir))
        writer = MetricWriter(run_dir, c.wandb.mode.value, c.wandb.project, enabled=world.is_root, wandb_init=init)
    except BaseException:
        world.close()
        raise
    try:
        capture = Capture(c.capture, run_dir, c.seed, world.is_root, s.scheme.name) if c.capture.enabled else None
        tr = Trainer(c.trainer, world, mdl, data, s.scheme, s.make_optimizer, s.schedule, s.network, writer, c.seed,
                     run_dir, labels, capture)
    except BaseException:
        world.close()
        writer.close()
        raise
    return tr, writer, world
