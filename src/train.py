"""Train with data-parallel (sparse) S-SGD on P workers. Entry point; thin on purpose.

    python src/train.py                                   # FNN-3, embedded MNIST, gTop-k, 4 workers
    python src/train.py compressor=gtopk cluster=32x1gbe  # 32 virtual workers, 1 GbE modelled
    python src/train.py -m compressor=dense,topk,gtopk    # Hydra multirun (also glob(*), choice(...), range(...))

Outputs go to the Hydra run directory: .hydra/ (composed config), metrics.jsonl, summary.json,
wandb/ (offline). Bad configuration: one line on stderr, exit status 2.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("MALLOC_ARENA_MAX", "2")   # glibc keeps freed memory per thread otherwise
os.environ.setdefault("WANDB_SILENT", "true")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # run from a checkout without installing

import warnings  # noqa: E402

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

import ssgd.config  # noqa: E402,F401  (registers the schema `base_config` in Hydra's ConfigStore)
from ssgd.errors import ConfigError  # noqa: E402
from ssgd.hydra_errors import COMPOSITION_ERRORS, one_line_error  # noqa: E402

EXIT_BAD_INPUT = 2
# Hydra 1.3 warns that a launcher file named like the plugin's own schema is validated against it: harmless.
warnings.filterwarnings("ignore", message=r"'hydra/launcher/submitit_\w+' is validated against ConfigStore schema")


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float:
    from ssgd import build  # after Hydra has parsed the command line: `--help` stays fast
    from ssgd.config import Backend
    from ssgd.report import report

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        spec = build.spec(cfg)
        if spec.config.backend is Backend.mpi:
            from ssgd.launch import launch, prepare, worker_command

            if not spec.config.mpi.launch:        # the user runs the workers under their own mpirun / srun
                command = " ".join(worker_command(prepare(cfg, run_dir)))
                print(f"wrote {run_dir / 'worker_config.yaml'}; run the {spec.world_size} workers with\n"
                      f"  mpirun -np {spec.world_size} [your mpirun options] {command}")
                return 0.0
            status = launch(cfg, run_dir)
            if status != 0:
                print(f"error: backend=mpi: the MPI job failed with exit status {status} (see the rank messages above)",
                      file=sys.stderr)
                sys.exit(status)
            return 0.0
        trainer, writer, world = build.trainer(spec, run_dir)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    try:
        summary = trainer.fit()
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    finally:
        world.close()
        writer.close()
    print(report(summary))
    print(f"  outputs: {run_dir}")
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
