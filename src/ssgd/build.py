"""Turn a composed Hydra config into the objects of one run, validating it on the way.

Every check raises `ConfigError` with a message that names the offending key and what is allowed;
`src/train.py` prints it as one line and exits with status 2.
"""
from __future__ import annotations

from functools import partial
from pathlib import Path

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from ssgd.capture import Capture, CaptureConfig
from ssgd.compress.base import Compressor
from ssgd.data.base import TensorData
from ssgd.errors import ConfigError
from ssgd.models.dropout import has_global_dropout
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.schedule import LRSchedule
from ssgd.sync import DensitySchedule, Scheme
from ssgd.trainer import Trainer, TrainConfig
from ssgd.utils.metrics import WANDB_MODES, MetricWriter
from ssgd.utils.seeding import rank_generator
from ssgd.world import ThreadWorld, World

BACKENDS = ("thread", "mpi")


def _instantiate(node: DictConfig, key: str, **kwargs):
    """hydra.utils.instantiate with its errors turned into one-line ConfigErrors naming `key`."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        cause = err.__cause__ if isinstance(err.__cause__, ConfigError) else None
        if cause is not None:
            raise cause from None
        raise ConfigError(f"{key}: {str(err).splitlines()[0]}") from None


def _positive_int(value, key: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}={value!r}: must be an integer >= {minimum}")
    return value


def world_size(cfg: DictConfig) -> int:
    return _positive_int(cfg.cluster.world_size, "cluster.world_size")


def network(cfg: DictConfig) -> AlphaBeta:
    net = cfg.cluster.network
    return AlphaBeta(alpha=net.alpha, beta=net.beta)


def scheme(cfg: DictConfig, seed: int) -> Scheme:
    c = cfg.compressor
    density = DensitySchedule(c.density, tuple(c.density_warmup or ()))
    make_compress = _instantiate(c.compress, "compressor.compress")
    make_memory = _instantiate(c.memory, "compressor.memory")

    def make_compressor(rank: int) -> Compressor:
        return make_compress(generator=rank_generator(seed, rank, "compressor"))

    return Scheme(name=c.name, make_compressor=make_compressor,
                  make_memory=lambda d, device="cpu": make_memory(d=d, device=device),
                  collective=_instantiate(c.collective, "compressor.collective"), density=density)


def train_config(cfg: DictConfig) -> TrainConfig:
    t = OmegaConf.to_container(cfg.trainer, resolve=True)
    try:
        tc = TrainConfig(**t)
    except TypeError as err:
        raise ConfigError(f"trainer: {err}") from None
    _positive_int(tc.batch_size, "trainer.batch_size")
    _positive_int(tc.epochs, "trainer.epochs")
    _positive_int(tc.eval_every, "trainer.eval_every")
    _positive_int(tc.log_every, "trainer.log_every")
    _positive_int(tc.checkpoint_every, "trainer.checkpoint_every", minimum=0)
    if tc.max_steps is not None:
        _positive_int(tc.max_steps, "trainer.max_steps")
    if tc.grad_clip is not None and not tc.grad_clip > 0:
        raise ConfigError(f"trainer.grad_clip={tc.grad_clip!r}: must be null or > 0")
    return tc


def capture_config(cfg: DictConfig) -> CaptureConfig:
    c = OmegaConf.to_container(cfg.get("capture") or {}, resolve=True)
    if not isinstance(c.get("u_steps", []) or [], list):
        raise ConfigError(f"capture.u_steps={c['u_steps']!r}: must be a list of step numbers, e.g. [1,100]")
    try:
        return CaptureConfig(**{**c, "u_steps": tuple(c.get("u_steps") or ())})
    except TypeError as err:
        raise ConfigError(f"capture: {err}") from None


def lr_schedule(cfg: DictConfig, P: int) -> LRSchedule:
    s, lr = cfg.schedule, cfg.optimizer.lr
    start = lr / P if s.warmup_start is None else s.warmup_start
    return LRSchedule(lr=lr, warmup_epochs=s.warmup_epochs, warmup_start=start,
                      milestones=tuple(s.milestones), gamma=s.gamma)


def optimizer_factory(cfg: DictConfig):
    o = cfg.optimizer
    for key in ("momentum", "weight_decay"):
        if not o[key] >= 0:
            raise ConfigError(f"optimizer.{key}={o[key]!r}: must be >= 0")
    return partial(torch.optim.SGD, lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay,
                   nesterov=o.nesterov)


def dataset(cfg: DictConfig) -> TensorData:
    return _instantiate(cfg.dataset, "dataset")


def device(cfg: DictConfig) -> torch.device:
    """`device`: cpu (default; the bitwise guarantees are measured there), cuda or cuda:N."""
    try:
        dev = torch.device(cfg.device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"device={cfg.device!r}: must be cpu, cuda or cuda:N") from None
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"device={cfg.device!r}: must be cpu, cuda or cuda:N")
    if dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()):
        raise ConfigError(f"device={cfg.device!r}: no such CUDA device here (torch.cuda.is_available() is "
                          f"{torch.cuda.is_available()}); use device=cpu")
    return dev


def model(cfg: DictConfig, data: TensorData, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)            # identical initial weights on every rank and backend
    m = _instantiate(cfg.model, "model", spec=data.spec)
    if has_global_dropout(m):
        raise ConfigError("model: uses torch.nn.Dropout (process-global RNG, nondeterministic with virtual "
                          "workers); use ssgd.models.GenDropout")
    return m.to(device(cfg))


def validate(cfg: DictConfig) -> None:
    """The checks that need no data or model: run by the MPI launcher before it starts ranks."""
    if cfg.backend not in BACKENDS:
        raise ConfigError(f"backend={cfg.backend!r}: must be one of {', '.join(BACKENDS)}")
    _positive_int(cfg.seed, "seed", minimum=0)
    # each builder below raises ConfigError on a bad value; the objects themselves are not needed here
    lr_schedule(cfg, world_size(cfg))
    network(cfg)
    train_config(cfg)
    capture_config(cfg)
    optimizer_factory(cfg)
    scheme(cfg, cfg.seed)
    if cfg.threads is not None:
        _positive_int(cfg.threads, "threads")
    device(cfg)
    if cfg.wandb.mode not in WANDB_MODES:
        raise ConfigError(f"wandb.mode={cfg.wandb.mode!r}: must be one of {', '.join(WANDB_MODES)}")


def trainer(cfg: DictConfig, run_dir: Path, world: World | None = None) -> tuple[Trainer, MetricWriter, World]:
    """Validate `cfg` and build everything a run needs; `world` defaults to a `ThreadWorld`
    (the MPI worker passes its `MPIWorld`)."""
    validate(cfg)
    seed, P, net, tc = cfg.seed, world_size(cfg), network(cfg), train_config(cfg)
    sch, schedule, make_opt = scheme(cfg, seed), lr_schedule(cfg, P), optimizer_factory(cfg)
    data = dataset(cfg)
    mdl = model(cfg, data, seed)
    labels = {"compressor": cfg.compressor.name, "cluster": cfg.cluster.name, "model": cfg.model._target_,
              "dataset": data.spec.name, "backend": cfg.backend, "seed": seed}
    world = world or ThreadWorld(P, cfg.threads)
    try:
        writer = MetricWriter(run_dir, cfg.wandb.mode, cfg.wandb.project,
                              OmegaConf.to_container(cfg, resolve=True), cfg.wandb.name, enabled=world.is_root)
    except BaseException:
        world.close()
        raise
    cap = capture_config(cfg)
    try:
        capture = Capture(cap, run_dir, seed, world.is_root, sch.name) if cap.enabled else None
        tr = Trainer(tc, world, mdl, data, sch, make_opt, schedule, net, writer, seed, run_dir, labels, capture)
    except BaseException:
        world.close()
        writer.close()
        raise
    return tr, writer, world
