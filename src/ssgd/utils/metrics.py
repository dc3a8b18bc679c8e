"""Run outputs: `metrics.jsonl` (one JSON object per record), `summary.json`, and wandb.

Keys are slash-namespaced (`train/loss`, `time/comm_model_s`, ...). wandb receives the same records;
its mode is `disabled`, `offline` (default: writes under the run directory, needs no network) or
`online`. The run's name, group, tags and logged config come from `ssgd.utils.wandb_run.init_kwargs`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ssgd.utils import wandb_run

WANDB_MODES = ("disabled", "offline", "online")


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to a temporary file, then rename: a crash never leaves a half-written file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


class MetricWriter:
    """Appends records to run_dir/metrics.jsonl and mirrors them to wandb (rank 0 only)."""

    def __init__(self, run_dir: str | Path, wandb_mode: str = "offline", project: str = "ssgd",
                 config: dict | None = None, name: str | None = None, enabled: bool = True,
                 wandb_init: dict[str, Any] | None = None) -> None:
        if wandb_mode not in WANDB_MODES:
            raise ValueError(f"wandb_mode={wandb_mode!r}: must be one of {', '.join(WANDB_MODES)}")
        self.run_dir, self.enabled = Path(run_dir), enabled
        self.file = None
        self.wandb_run = None
        if not enabled:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.file = open(self.run_dir / "metrics.jsonl", "a", buffering=1)
        if wandb_mode != "disabled":
            import wandb  # imported lazily: ~1 s, and not needed when disabled

            init = {"config": config, "name": name, **(wandb_init or {})}   # wandb_init: name, group, tags, ...
            self.wandb_run = wandb.init(mode=wandb_mode, project=project, dir=str(self.run_dir),
                                        reinit="finish_previous", **init)
            wandb_run.define_summaries(self.wandb_run)

    def log(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self.file.write(json.dumps(record) + "\n")
        if self.wandb_run is not None:
            self.wandb_run.log({k: v for k, v in record.items() if k != "step"}, step=int(record["step"]))

    def summary(self, summary: dict[str, Any]) -> None:
        if not self.enabled:
            return
        write_json_atomic(self.run_dir / "summary.json", summary)
        if self.wandb_run is not None:
            self.wandb_run.summary.update(wandb_run.final_summary(summary))

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None
