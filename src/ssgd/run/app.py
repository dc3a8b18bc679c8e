"""The training application: data-parallel (sparse) S-SGD on P workers, as a Hydra app.

    ssgd-train                                            # FNN-3, embedded MNIST, gTop-k, 4 workers
    python -m ssgd / python src/train.py                  # the same app
    python src/train.py compressor=gtopk cluster=32x1gbe  # 32 virtual workers, 1 GbE modelled
    python src/train.py -m compressor=dense,topk,gtopk    # Hydra multirun (also glob(*), choice(...), range(...))

Outputs go to the Hydra run directory (unique per run): .hydra/ (composed config), train.log (every line
the run logs), metrics.jsonl, summary.json, wandb/ (offline). A refused run (exit status 2) leaves that
directory as it found it (`ssgd.run.rundir.give_back`). Returns the final val/acc (the objective of
`hydra/sweeper=optuna`). Exit status (docs/faults.md): 0 ok, 2 bad input (one line on stderr),
3 diverged, 130/143 interrupted by SIGINT/SIGTERM (after a checkpoint), other non-zero: a rank failed.
A multirun runs every point, records a failed point's line in its folder's error.txt, prints a table of
the failed points at the end and exits with the first one's status.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import traceback
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

os.environ.setdefault("MALLOC_ARENA_MAX", "2")   # glibc keeps freed memory per thread otherwise
os.environ.setdefault("WANDB_SILENT", "true")

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from hydra.types import RunMode  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

import ssgd.config  # noqa: E402,F401  (registers the schema `base_config` in Hydra's ConfigStore)
import ssgd.run.rundir  # noqa: E402,F401  (registers the run directory resolvers of conf/config.yaml)
from ssgd.errors import (EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_FAILED, AlreadyFinished, ConfigError,  # noqa: E402
                         Interrupted, RunEnded)
from ssgd.run.hydra_errors import COMPOSITION_ERRORS, one_line_error, refused_characters  # noqa: E402
from ssgd.loop.stop import exit_status  # noqa: E402
from ssgd.run.startup import Phases, check_before_imports, print_profile, take_profile_flag  # noqa: E402
from ssgd.run.sweep import (PointFailed, hydra_write_failure, install_hydra_config_writer, record_failure,  # noqa: E402
                            skipped_note)

if TYPE_CHECKING:
    from ssgd.run.build import RunSpec

# Hydra 1.3 warns that a launcher file named like the plugin's own schema is validated against it: harmless.
# (Its message starts with a newline, and `message` must match from the start.)
warnings.filterwarnings("ignore", message=r"\s*'hydra/launcher/submitit_\w+' is validated against ConfigStore schema")
log = logging.getLogger("ssgd.train")   # Hydra routes it: stdout / stderr and <run dir>/train.log
logging.raiseExceptions = False         # a line a full disk refuses to train.log is dropped, not a traceback
install_hydra_config_writer()           # .hydra/ written atomically; a full disk there fails the point, not the sweep
PHASES: dict[str, Phases] = {}          # this process's start-up timeline, made by `cli` (one per process)


def run(cfg: DictConfig, run_dir: Path, phases: Phases | None = None) -> float:
    """One run: check, then train here (a backend whose ranks live in this process) or start the ranks
    (ssgd.run.backends); returns the final val accuracy. Raises ConfigError (bad input) or RunEnded (diverged,
    interrupted, a rank failed). `phases` records when each start-up phase ended (`--profile`)."""
    phases = phases or Phases()
    config = check_before_imports(cfg)         # keys, value ranges, data paths: before torch is imported
    phases.mark("checks")
    from ssgd.run import backends, build  # after the checks and Hydra's parsing: `--help` and bad input stay fast

    phases.mark("import torch + ssgd")
    parts = backends.parts(config.backend)
    if not parts.in_process:                   # this process checks the optimizer's settings but never steps it
        from ssgd.utils import lazy_dynamo
        lazy_dynamo.defer()                    # so it need not import torch._dynamo (ssgd.utils.lazy_dynamo)
    spec = build.spec(cfg, config)
    phases.mark("spec")
    build.preflight(spec)                      # before any rank starts or any state is allocated
    phases.mark("preflight")
    if parts.in_process:
        return train_here(spec, run_dir, phases)
    launcher = parts.launcher_module()
    if parts.prints_only(config):              # the user starts the ranks (their mpirun, torchrun, srun, sbatch)
        launcher.print_start(cfg, run_dir)
        return 0.0
    launcher.start(cfg, run_dir)
    phases.mark(f"{parts.name} job")
    log_figure(run_dir)
    return final_val_acc(json.loads((run_dir / "summary.json").read_text()))   # rank 0 wrote it


def train_here(spec: RunSpec, run_dir: Path, phases: Phases) -> float:
    """Train every rank in this process; returns the final val accuracy."""
    from ssgd.loop.stop import StopRequest
    from ssgd.run import build
    from ssgd.run.final_lines import diverged, final_lines

    stop = StopRequest()
    with stop.installed():                     # SIGTERM / SIGINT: checkpoint at the next step boundary
        try:
            trainer, writer, world = build.trainer(spec, run_dir, stop=stop)
        except AlreadyFinished as done:         # resuming a finished run: say so, change nothing
            log.info(str(done))
            ssgd.run.rundir.give_back()        # not even .hydra/ or train.log
            return final_val_acc(done.summary)
        phases.mark("build (data, model, world)")
        ssgd.run.rundir.started()              # past every refusal: an error from here keeps the folder as it is
        try:
            summary = trainer.fit()
            phases.mark("train")
        finally:
            world.close()
            writer.close()
    log.info(final_lines(summary))
    log.info(f"  outputs: {run_dir}")
    log_figure(run_dir)
    if diverged(summary):
        raise RunEnded(diverged(summary), EXIT_DIVERGED)
    return final_val_acc(summary)


def log_figure(run_dir: Path) -> None:
    """Write the run's figure (ssgd.utils.result_files.run_figure) and name it in the run's last log line; a
    figure that cannot be drawn costs one warning line, never the run's results."""
    from ssgd.utils.result_files import run_figure

    try:
        log.info(f"  report: {run_figure(run_dir)}  (python -m ssgd.report {run_dir} draws it again)")
    except Exception as err:  # noqa: BLE001 -- the run's results are written; the figure is an extra
        log.warning(f"  report: no figure drawn ({type(err).__name__}: {err})")


def final_val_acc(summary: dict) -> float:
    """The value a Hydra sweeper optimizes: the final validation accuracy (0.0 if none was measured)."""
    return float(summary.get("val/acc", 0.0))


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")   # ssgd/conf, package data
def main(cfg: DictConfig) -> float | PointFailed:
    logging.captureWarnings(True)            # warnings into the run's log too
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    phases = PHASES.get("run") or Phases()
    phases.mark("compose")
    resume = ssgd.run.rundir.restart_resume(cfg.trainer.resume)
    if resume != cfg.trainer.resume:
        log.info(f"SLURM restart {ssgd.run.rundir.restart_count()} of this job: trainer.resume=auto "
                 f"(continuing from {run_dir / 'checkpoint.pt'} if the first start wrote one)")
        cfg.trainer.resume = resume
    try:
        hydra_write_failure(run_dir)           # a full disk kept Hydra from writing .hydra/: this run's one line
        return run(cfg, run_dir, phases)
    except (ConfigError, RunEnded) as err:
        status = err.status if isinstance(err, RunEnded) else EXIT_BAD_INPUT
        stopped = multirun and isinstance(err, Interrupted)
        log.error(f"error: {err}" + (f" ({skipped_note(int(hydra_cfg.job.num))})" if stopped else ""))
        if multirun and not isinstance(err, Interrupted):   # the sweep goes on (an interrupt stops it)
            return record_failure(run_dir, status, str(err))
        if status == EXIT_BAD_INPUT:          # refused: the run folder goes back to what it was
            ssgd.run.rundir.give_back()
        sys.exit(status)
    except Exception as err:
        if not multirun:
            raise
        line = f"{type(err).__name__}: {err}".splitlines()[0]
        log.error(f"error: {line} (traceback in {run_dir / 'error.txt'})")
        return record_failure(run_dir, EXIT_FAILED, line, traceback.format_exc())


WANDB_MODES = ("disabled", "offline", "online")


def honour_wandb_mode(argv: list[str], env: str | None) -> list[str]:
    """The command line with `WANDB_MODE` honoured: unset or empty, `argv` unchanged; set, and no
    `wandb.mode=` on the command line, `wandb.mode=<it>` appended (so `.hydra/config.yaml` records the mode
    the run uses). ConfigError when WANDB_MODE is not a mode, or contradicts `wandb.mode` on the command line."""
    if not env:
        return argv
    if env not in WANDB_MODES:
        raise ConfigError(f"WANDB_MODE={env}: must be one of {', '.join(WANDB_MODES)} (or unset)")
    given = [a.split("=", 1)[1] for a in argv if a.startswith(("wandb.mode=", "++wandb.mode="))]
    if any(v != env for v in given):
        raise ConfigError(f"WANDB_MODE={env} contradicts wandb.mode={given[-1]} on the command line: unset "
                          "WANDB_MODE or drop the override")
    return argv if given else [*argv, f"wandb.mode={env}"]


GRAMMAR_CHARS = set(",[]{}()'\"\\$= \t")
"""Characters with a meaning in Hydra's override grammar: a value that holds one is left as the user wrote it."""


def quote_non_ascii(argv: list[str]) -> list[str]:
    """The command line with each `key=value` whose value holds non-ASCII characters (`hydra.run.dir=out/ünï`)
    and nothing else Hydra's lexer refuses unquoted, nor anything of its grammar, quoted (`key="value"`): its lexer
    takes letters outside ASCII only in quoted values. A value that also holds a character the lexer refuses
    (`;`, `#`, ...) is left as written, as such a value in ASCII is: Hydra refuses it, and the one line names
    that character and the quoting (`ssgd.run.hydra_errors.lexer_hint`)."""
    out = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        plain = eq and not arg.startswith("-") and not (set(value) & GRAMMAR_CHARS) and not refused_characters(value)[0]
        plain = plain and not value.isascii()
        out.append(f'{key}="{value}"' if plain else arg)
    return out


def cli() -> None:
    """The console entry (`ssgd-train`, `python -m ssgd`, `python src/train.py`): Hydra's command line;
    composition errors and an early Ctrl-C become one line and their exit status."""
    profile = take_profile_flag(sys.argv)    # `--profile`: how long each start-up phase took, on stderr
    PHASES["run"] = Phases()
    full = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"     # let composition errors reach us instead of Hydra's report
    try:
        sys.argv[1:] = quote_non_ascii(honour_wandb_mode(sys.argv[1:], os.environ.get("WANDB_MODE")))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    try:
        main()
    except COMPOSITION_ERRORS as err:        # bad overrides or group files (ours exit inside main)
        if full:
            raise
        print(f"error: {one_line_error(err)}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:                # Ctrl-C before a run installed its own handler
        print("error: interrupted by SIGINT before training started", file=sys.stderr)
        sys.exit(exit_status(signal.SIGINT))
    finally:
        if profile:
            print_profile(PHASES["run"])
