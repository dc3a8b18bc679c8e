"""Train with data-parallel (sparse) S-SGD on P workers. Entry point; thin on purpose.

    python src/train.py                                   # FNN-3, embedded MNIST, gTop-k, 4 workers
    python src/train.py compressor=gtopk cluster=32x1gbe  # 32 virtual workers, 1 GbE modelled
    python src/train.py -m compressor=dense,topk,gtopk    # Hydra multirun (also glob(*), choice(...), range(...))

Outputs go to the Hydra run directory: .hydra/ (composed config), train.log (every line the run logs),
metrics.jsonl, summary.json, wandb/ (offline). Returns the final val/acc (the objective of
`hydra/sweeper=optuna`). Bad configuration: one line on stderr, exit status 2.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("MALLOC_ARENA_MAX", "2")   # glibc keeps freed memory per thread otherwise
os.environ.setdefault("WANDB_SILENT", "true")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # run from a checkout without installing

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

import ssgd.config  # noqa: E402,F401  (registers the schema `base_config` in Hydra's ConfigStore)
from ssgd.errors import ConfigError  # noqa: E402
from ssgd.hydra_errors import COMPOSITION_ERRORS, one_line_error  # noqa: E402

EXIT_BAD_INPUT = 2
# Hydra 1.3 warns that a launcher file named like the plugin's own schema is validated against it: harmless.
warnings.filterwarnings("ignore", message=r"'hydra/launcher/submitit_\w+' is validated against ConfigStore schema")
log = logging.getLogger("ssgd.train")   # Hydra routes it: stdout / stderr and <run dir>/train.log


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float:
    from ssgd import build  # after Hydra has parsed the command line: `--help` stays fast
    from ssgd.config import Backend
    from ssgd.report import report

    logging.captureWarnings(True)            # warnings into the run's log too
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        spec = build.spec(cfg)
        if spec.config.backend is Backend.mpi:
            from ssgd.launch import launch, prepare, worker_command

            if not spec.config.mpi.launch:        # the user runs the workers under their own mpirun / srun
                command = " ".join(worker_command(prepare(cfg, run_dir)))
                log.info(f"wrote {run_dir / 'worker_config.yaml'}; run the {spec.world_size} workers with\n"
                         f"  mpirun -np {spec.world_size} [your mpirun options] {command}")
                return 0.0
            status = launch(cfg, run_dir)
            if status != 0:
                log.error(f"error: backend=mpi: the MPI job failed with exit status {status} (see the rank messages "
                          "above)")
                sys.exit(status)
            return final_val_acc(json.loads((run_dir / "summary.json").read_text()))   # rank 0 reported
        if spec.config.backend is Backend.torch:      # P local torch.distributed ranks (ssgd.launch_torch)
            from ssgd.launch_torch import run as run_torch

            if (status := run_torch(cfg, run_dir)) != 0:
                sys.exit(status)
            summary_path = run_dir / "summary.json"
            return final_val_acc(json.loads(summary_path.read_text())) if summary_path.exists() else 0.0
        trainer, writer, world = build.trainer(spec, run_dir)
    except ConfigError as err:
        log.error(f"error: {err}")
        sys.exit(EXIT_BAD_INPUT)
    try:
        summary = trainer.fit()
    except ConfigError as err:
        log.error(f"error: {err}")
        sys.exit(EXIT_BAD_INPUT)
    finally:
        world.close()
        writer.close()
    log.info(report(summary))
    log.info(f"  outputs: {run_dir}")
    return final_val_acc(summary)


def final_val_acc(summary: dict) -> float:
    """The value a Hydra sweeper optimizes: the final validation accuracy (0.0 if none was measured)."""
    return float(summary.get("val/acc", 0.0))


if __name__ == "__main__":
    full = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"     # let composition errors reach us instead of Hydra's report
    try:
        main()
    except COMPOSITION_ERRORS as err:        # bad overrides or group files (ours exit inside main)
        if full:
            raise
        print(f"error: {one_line_error(err)}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
