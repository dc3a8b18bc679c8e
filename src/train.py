"""Train with data-parallel (sparse) S-SGD on P workers. Entry point; thin on purpose.

    python src/train.py                                   # FNN-3, embedded MNIST, gTop-k, 4 workers
    python src/train.py compressor=gtopk cluster=32x1gbe  # 32 virtual workers, 1 GbE modelled
    python src/train.py -m compressor=dense,topk,gtopk    # Hydra multirun

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

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from ssgd.errors import ConfigError  # noqa: E402


GROUPS = ("model", "dataset", "compressor", "cluster")
CONF = Path(__file__).resolve().parent.parent / "conf"


def check_group_choices(argv: list[str]) -> str | None:
    """One-line error for `group=option` overrides naming no file in conf/<group>/ (Hydra's own
    message spans many lines); None when every choice exists. Multirun lists are checked item by item."""
    if any(a.startswith(("-cd", "--config-dir", "-cp", "--config-path")) for a in argv):
        return None   # another config tree: leave the checks to Hydra
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+~") in GROUPS:
            group = key.lstrip("+~")
            allowed = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
            for option in value.split(","):
                if option not in allowed:
                    return f"{group}={option}: no such option; allowed: {', '.join(allowed)}"
    return None


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float:
    from ssgd import build  # after Hydra has parsed the command line: `--help` stays fast
    from ssgd.report import report

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        if cfg.backend == "mpi":
            from ssgd.launch import launch, prepare, worker_command

            build.validate(cfg)
            if not cfg.mpi.launch:        # the user runs the workers under their own mpirun / srun
                command = " ".join(worker_command(prepare(cfg, run_dir)))
                print(f"wrote {run_dir / 'worker_config.yaml'}; run the {cfg.cluster.world_size} workers with\n"
                      f"  mpirun -np {cfg.cluster.world_size} [your mpirun options] {command}")
                return 0.0
            status = launch(cfg, run_dir)
            if status != 0:
                print(f"error: backend=mpi: the MPI job failed with exit status {status} (see the rank messages above)",
                      file=sys.stderr)
                sys.exit(status)
            return 0.0
        trainer, writer, world = build.trainer(cfg, run_dir)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    try:
        summary = trainer.fit()
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    finally:
        world.close()
        writer.close()
    print(report(summary))
    print(f"  outputs: {run_dir}")
    return float(summary.get("val/acc", 0.0))


if __name__ == "__main__":
    if (problem := check_group_choices(sys.argv[1:])) is not None:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    main()
