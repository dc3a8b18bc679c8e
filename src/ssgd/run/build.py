"""Turn a composed config into the objects of one run: checked once (`spec`), built once (`trainer`).

`spec(cfg)` does every check that needs no data and no world (the MPI launcher runs it before it starts
any rank) and builds the cheap objects: the network model, the scheme's factories, the LR schedule and
the optimizer factory. `preflight(spec)` then checks what needs the data's size and the model's but no
world (P x batch size against the data, the memory of P ranks against this host's, wandb's credentials)
without loading or allocating anything; `src/train.py` runs it before it starts the ranks or the thread
backend. `trainer(spec, run_dir)` then loads the data, builds the model and the world, reads the
checkpoint to resume (checked against this run) and wires the trainer, without building anything twice.

Every problem is a `ConfigError` whose message names the offending key and what is allowed;
`src/train.py` prints it as one line and exits with status 2. Constructors below this layer raise
ValueError/TypeError with messages of the form `param=value: ...`; `config_errors` prefixes the config node.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from ssgd.comm.executors import simgrid_engine
from ssgd.loop import checkpoint
from ssgd.run import backends, footprint, target_profile
from ssgd.loop.capture import Capture
from ssgd.config import Config, NetEngine, TrainConfig, WandbMode, check_all_targets, config_errors, locate, to_plain
from ssgd.data.base import DataSpec, TensorData
from ssgd.data.loader import ShardedLoader, steps_per_epoch
from ssgd.data.probe import probe
from ssgd.errors import AlreadyFinished, ConfigError
from ssgd.models.dropout import has_global_dropout
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.perf.platform import Platform, from_cluster
from ssgd.loop.schedule import LRSchedule
from ssgd.loop.stop import StopRequest
from ssgd.loop.replica import Replicas
from ssgd.loop.sync import Scheme, SyncStep
from ssgd.loop.trainer import RunOutput, Trainer, TrainerParts
from ssgd.run.startup import checked_config
from ssgd.scheme_config import build_scheme
from ssgd.utils import wandb_run
from ssgd.utils.metrics import MetricWriter, wandb_credentials
from ssgd.worlds.base import World

OptimizerFactory = Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]


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
    target_profile: target_profile.UserProfile | None = None   # cluster.compute_profile, read and checked

    @property
    def world_size(self) -> int:
        return self.config.cluster.world_size


def spec(cfg: DictConfig, config: Config | None = None) -> RunSpec:
    """Check `cfg` completely (except what needs the data or a world) and build its cheap objects. `config`:
    the typed config the caller's checks returned (`ssgd.run.startup.check_before_imports`), trusted as it is;
    None: the schema's checks run here (`ssgd.run.startup.checked_config`). The `_target_` nodes are checked
    here, after the imports their targets need."""
    config = checked_config(cfg) if config is None else config
    check_all_targets(cfg)
    if platform(config) is not None:       # a bad cluster.network.simgrid value fails here, in one line
        simgrid_engine.load()              # and so do missing SimGrid bindings
    P = config.cluster.world_size
    net = config.cluster.network
    make_optimizer = optimizer_factory(cfg)
    return RunSpec(cfg=cfg, config=config, network=AlphaBeta(alpha=net.alpha, beta=net.beta),
                   scheme=scheme(cfg, config.seed), schedule=lr_schedule(cfg, P), make_optimizer=make_optimizer,
                   device=device(config.device, present=not prints_only(config)),
                   target_profile=target_profile.read(config.cluster.compute_profile))


def prints_only(config: Config) -> bool:
    """Whether this run only writes the worker config and prints the commands that start its ranks (its
    backend's rule, ssgd.run.backends: `mpi.launch=false`, `dist.launch=false`, `dist.emit=sbatch`): such a run
    prepares a job for other machines (e.g. GPU nodes, from a CPU login node), so it needs neither their device
    nor their number of cores."""
    return backends.parts(config.backend).prints_only(config)


def platform(config: Config) -> Platform | None:
    """The SimGrid platform of `cluster.network.simgrid` when `cluster.network.engine=simgrid`, else None;
    ConfigError naming the key of a bad value."""
    net = config.cluster.network
    if net.engine is not NetEngine.simgrid:
        return None
    return from_cluster(net.simgrid, config.cluster.world_size)


def network(cfg: DictConfig) -> AlphaBeta:
    net = cfg.cluster.network
    return AlphaBeta(alpha=net.alpha, beta=net.beta)


def scheme(cfg: DictConfig, seed: int) -> Scheme:
    """The scheme of `cfg.compressor` (`ssgd.scheme_config.build_scheme`)."""
    return build_scheme(cfg.compressor, seed)


def lr_schedule(cfg: DictConfig, P: int) -> LRSchedule:
    make = config_errors("schedule", lambda: instantiate(cfg.schedule), cfg.schedule)
    return config_errors("schedule", lambda: make(lr=learning_rate(cfg), world_size=P), cfg.schedule)


def learning_rate(cfg: DictConfig) -> float:
    if "lr" not in cfg.optimizer:
        raise ConfigError(f"optimizer: needs an `lr` key (the LR schedule scales it); {cfg.optimizer._target_} has none")
    return config_errors("optimizer", lambda: LRSchedule(lr=cfg.optimizer.lr).lr, cfg.optimizer)


def optimizer_factory(cfg: DictConfig) -> OptimizerFactory:
    """The configured torch.optim class with its settings, applied to the aggregated gradient.

    Called once here on a throwaway parameter, so torch's own argument checks run before training."""
    learning_rate(cfg)
    check_numbers(cfg.optimizer, "optimizer")
    make = config_errors("optimizer", lambda: instantiate(cfg.optimizer), cfg.optimizer)
    config_errors("optimizer", lambda: make([torch.nn.Parameter(torch.zeros(1))]), cfg.optimizer)
    return make


def check_numbers(node: DictConfig, key: str) -> None:
    """ConfigError naming `key.<name>` where a setting whose default in the target's signature is a number
    (e.g. torch.optim.SGD's momentum) holds something that is not a number, before the target's own check
    fails with a message that names no key."""
    import inspect

    target = locate(str(node._target_), key)
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return
    for name, value in OmegaConf.to_container(node, resolve=True).items():
        default = params[name].default if name in params else None
        numeric = isinstance(default, (int, float)) and not isinstance(default, bool)
        if numeric and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConfigError(f"{key}.{name}={value}: must be a number (the default of {node._target_} is {default})")


def dataset(cfg: DictConfig) -> TensorData:
    return config_errors("dataset", lambda: instantiate(cfg.dataset), cfg.dataset)


def device(name: str, present: bool = True) -> torch.device:
    """`device`: cpu (default; the bitwise guarantees are measured there), cuda or cuda:N. With `present`
    a CUDA device must exist here; without (a run that only prints commands, `prints_only`) only the
    name is checked."""
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError):
        raise ConfigError(f"device={name!r}: must be cpu, cuda or cuda:N") from None
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"device={name!r}: must be cpu, cuda or cuda:N")
    if present and dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()):
        raise ConfigError(f"device={name!r}: no such CUDA device here (torch.cuda.is_available() is "
                          f"{torch.cuda.is_available()}); use device=cpu")
    return dev


def model(cfg: DictConfig, data: TensorData, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)            # identical initial weights on every rank and backend
    m = config_errors("model", lambda: instantiate(cfg.model, spec=data.spec), cfg.model)
    if has_global_dropout(m):
        raise ConfigError("model: uses torch.nn.Dropout (process-global RNG, nondeterministic with virtual "
                          "workers); use ssgd.models.GenDropout")
    return m.to(device(cfg.device))


# -- checks before any rank starts ---------------------------------------------------------------
def preflight(s: RunSpec) -> None:
    """Checks that need the data's size and the model's but no world, run before any rank starts and before
    anything is allocated: P x batch size against the training samples and the memory P ranks need
    against this host's (for the datasets whose size is known without loading them: `ssgd.data.probe`), the
    model's d against cluster.compute_profile's, and that wandb.mode=online has credentials. ConfigError
    naming the key otherwise."""
    c = s.config
    if c.wandb.mode is WandbMode.online and not wandb_credentials():
        raise ConfigError("wandb.mode=online: no wandb API key here (set WANDB_API_KEY or run `wandb login`); "
                          "wandb.mode=offline (the default) needs none, and `wandb sync` uploads its runs later")
    size = data_size(s.cfg)
    if size is None:
        return
    samples, data_spec = size
    steps_per_epoch(samples, s.world_size, c.trainer.batch_size)
    d = parameter_count(s.cfg, data_spec)
    if d is not None:
        target_profile.check_d(s.target_profile, d)
    need = None if d is None or s.device.type != "cpu" else \
        backends.parts(c.backend).footprint(d, s.world_size, bool(c.cluster.hostfile))
    have = footprint.available_bytes()
    if need is not None and have is not None and need.bytes > have and not prints_only(c):   # ranks run elsewhere
        raise ConfigError(f"cluster.world_size={s.world_size}: needs about {need.bytes / 1e9:.1f} GB for {need.what}, "
                          f"but {have / 1e9:.1f} GB of memory is available here; lower cluster.world_size {need.remedy}")


def data_size(cfg: DictConfig) -> tuple[int, DataSpec] | None:
    """(training samples, spec) of the configured dataset without loading it, or None where only loading
    can tell (the user's own files)."""
    node = cfg.dataset
    kwargs = {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if not str(k).startswith("_")}
    return config_errors("dataset", lambda: probe(locate(str(node._target_), "dataset"), kwargs), node)


def parameter_count(cfg: DictConfig, data_spec: DataSpec) -> int | None:
    """Trainable parameters of the configured model, built on the meta device (no memory, no init); None if
    the model cannot be built there. A model that refuses the data raises its ConfigError here already."""
    try:
        with torch.device("meta"):
            m = instantiate(cfg.model, spec=data_spec)
    except InstantiationException as err:
        if isinstance(err.__cause__, ConfigError):
            raise err.__cause__ from None
        return None
    except ConfigError:
        raise
    except Exception:   # an estimate only: the real build reports its own errors
        return None
    return sum(p.numel() for p in m.parameters() if p.requires_grad)


# -- the run's objects -----------------------------------------------------------------------------
def run_identity(c: Config, data: TensorData, optimizer: DictConfig | None = None) -> dict:
    """What a checkpoint must share with the run that continues it (`ssgd.loop.checkpoint.check_fits`):
    the scheme, its wire format (`compressor.wire.values`: the values the residual keeps follow its rounding),
    seed, P, batch size, dataset, and the optimizer's class and hyper-parameters."""
    ident = {"compressor": c.compressor.name, "compressor.density": c.compressor.density,
             "compressor.wire.values": c.compressor.wire.values,
             "compressor.density_warmup": list(c.compressor.density_warmup), "seed": c.seed,
             "cluster.world_size": c.cluster.world_size, "trainer.batch_size": c.trainer.batch_size,
             "dataset": data.spec.name}
    if optimizer is not None:
        plain = to_plain(optimizer)
        ident["optimizer"] = plain.get("_target_")
        ident.update({f"optimizer.{k}": v for k, v in sorted(plain.items()) if not k.startswith("_")})
    return ident


def resume_state(t: TrainConfig, run_dir: Path, world: World, d: int, ident: dict) -> checkpoint.Resume | None:
    """The checkpoint `trainer.resume` names, read for this process's ranks and checked against this run."""
    path = checkpoint.resume_path(t.resume, run_dir)
    if path is None:
        return None
    shared, ranks = checkpoint.load_checkpoint(path, world.local_ranks)
    changes = checkpoint.check_fits(shared, path, ident, d, t.resume_weights_only, list(t.resume_changes))
    if world.is_root:
        checkpoint.record_changes(run_dir, changes)
    return checkpoint.Resume(path, shared, ranks, t.resume_weights_only)


def finished(resume: checkpoint.Resume | None, run_dir: Path, total_steps: int) -> None:
    """AlreadyFinished when `resume` continues the run in `run_dir` from a checkpoint at or past its last
    step and that run wrote its summary: resuming it would only rewrite the summary's wall-clock time."""
    if resume is None or resume.weights_only or resume.path.parent.resolve() != Path(run_dir).resolve():
        return
    summary_path = Path(run_dir) / "summary.json"
    if resume.shared["step"] >= total_steps and summary_path.is_file():
        try:
            summary = json.loads(summary_path.read_text())
        except (OSError, ValueError):
            return                      # an unreadable summary: finishing again rewrites it
        raise AlreadyFinished(f"{run_dir}: this run already finished at step {resume.shared['step']} (summary.json); "
                              "nothing to do, nothing changed", summary)


def metric_writer(s: RunSpec, run_dir: Path, world: World, resume: checkpoint.Resume | None) -> MetricWriter:
    """The run's MetricWriter. A run that continues its own directory keeps exactly the metrics.jsonl
    records its checkpoint had seen and continues its wandb run; `trainer.resume=auto` without a
    checkpoint starts afresh (dropping a failed attempt's records); any other run needs an empty file."""
    c = s.config
    keep, run_id = None, None
    if resume is not None and not resume.weights_only:
        run = resume.shared.get("run", {})
        run_id = run.get("wandb_id")
        if resume.path.parent.resolve() == Path(run_dir).resolve():
            keep = run.get("records", sys.maxsize)       # a checkpoint without a record count: keep every record
    elif resume is None and c.trainer.resume == checkpoint.AUTO:
        keep = 0
    init = wandb_run.init_kwargs(to_plain(s.cfg), *wandb_run.hydra_context(run_dir))
    return MetricWriter(run_dir, c.wandb.mode.value, c.wandb.project, enabled=world.is_root, keep_records=keep,
                        wandb_id=run_id, wandb_init=init)


def parts(s: RunSpec, world: World, mdl: torch.nn.Module, data: TensorData) -> TrainerParts:
    """The trainer's parts on `world`: the per-rank batches first (a global batch larger than the data fails
    there, before P ranks' state is allocated), then the replicas, the sync step and the optimizer."""
    c = s.config
    loader = ShardedLoader(data.x_train, data.y_train, world.size, c.trainer.batch_size, c.seed)
    replicas = Replicas(mdl, world, c.seed)
    sync = SyncStep(s.scheme, world, replicas.params)
    selection = next(iter(sync.ranks.values())).compressor.selection_cost
    target = target_profile.compute(s.target_profile, replicas.d, c.trainer.batch_size, selection)
    return TrainerParts(world, data, loader, replicas, sync, s.make_optimizer(replicas.params), s.schedule, s.network,
                        target)


def local_world(c: Config) -> World:
    """The World of a backend whose ranks all live in this process (ssgd.run.backends); ValueError for a backend
    whose ranks are processes (each rank's worker makes its own)."""
    parts = backends.parts(c.backend)
    if not parts.in_process:
        raise ValueError(f"backend={parts.name}: every rank is a process; pass the rank's World (ssgd.run.worker)")
    sim = platform(c)
    return parts.make_world(c.cluster.world_size, c.threads, *([sim] if sim is not None else []))


def trainer(cfg: DictConfig | RunSpec, run_dir: Path, world: World | None = None,
            stop: StopRequest | None = None) -> tuple[Trainer, MetricWriter, World]:
    """Build everything a run needs (checking `cfg` first unless it is already a `RunSpec`); `world`
    defaults to the backend's World when its ranks live in this process (`local_world`; a rank of a backend
    whose ranks are processes passes its own, ssgd.run.worker); `stop` is the entry point's signal handler (the
    trainer stops at the step boundary after it fires)."""
    s = cfg if isinstance(cfg, RunSpec) else spec(cfg)
    c = s.config
    data = dataset(s.cfg)
    mdl = model(s.cfg, data, c.seed)
    labels = {"compressor": c.compressor.name, "cluster": c.cluster.name, "model": s.cfg.model._target_,
              "dataset": data.spec.name, "backend": c.backend.value, "seed": c.seed}
    ident = run_identity(c, data, s.cfg.optimizer)
    d = sum(p.numel() for p in mdl.parameters() if p.requires_grad)
    config_errors("compressor.collective", lambda: s.scheme.collective.check_numel(d))
    spe = steps_per_epoch(data.x_train.shape[0], s.world_size, c.trainer.batch_size)   # before P ranks' state
    total = c.trainer.epochs * spe if c.trainer.max_steps is None else min(c.trainer.max_steps, c.trainer.epochs * spe)
    own = world is None                # a world the caller passed is the caller's to close
    world = world or local_world(c)
    try:
        resume = resume_state(c.trainer, run_dir, world, d, ident)
        finished(resume, run_dir, total)
        writer = metric_writer(s, run_dir, world, resume)
    except BaseException:
        if own:
            world.close()
        raise
    try:
        capture = Capture(c.capture, run_dir, c.seed, world.is_root, s.scheme.name) if c.capture.enabled else None
        out = RunOutput(writer, Path(run_dir), labels, ident, capture)
        tr = Trainer(c.trainer, parts(s, world, mdl, data), out, resume=resume, stop=stop)
    except BaseException:
        if own:
            world.close()
        writer.close()
        raise
    return tr, writer, world
