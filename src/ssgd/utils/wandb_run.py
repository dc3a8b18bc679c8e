"""What a run tells wandb: its name, group, tags, config and summaries, from the composed config.

`init_kwargs` is a pure function of the resolved config, the Hydra group choices and the command-line
overrides; `MetricWriter` passes its result to `wandb.init`. The logged config is

    {<group>: <choice> for every config group (compressor, model, dataset, cluster, ...),
     "cfg": <the whole resolved config, nested>, "overrides": <the command-line overrides>}

The group choices sit at the top level because that is where a wandb sweep agent puts its parameters:
`wandb agent` merges the sweep's values into the run config and locks those keys, so a sweep setting
`compressor=topk` overwrites a top-level `compressor` key with the string "topk". Here that key already
holds the same string, and the composed compressor (density, compress, collective, memory) lives in
`cfg.compressor`, out of the sweep's reach. Flat sweep keys such as `compressor.density` stay beside it.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ssgd.utils.atomic import write_text_atomic

# define_metric summaries: the best validation values and the last throughput, not the last values only
# (keys: ssgd.utils.metric_names)
SUMMARIES: dict[str, str] = {"val/acc": "max", "val/loss": "min", "val/ppl": "min",
                             "throughput/here": "last", "throughput/target": "last"}
# overrides that do not change what a run computes (or that the name already shows): left out of names
IGNORED = ("wandb.", "hydra.", "trainer.progress", "trainer.status_every_s", "trainer.resume",
           "trainer.checkpoint_every", "trainer.log_every", "trainer.eval_batch", "threads", "backend", "device",
           "mpi.", "debug.", "capture.", "seed")
MAX_GROUP = 128     # wandb's limit on a group name


def hydra_context(run_dir: str | Path) -> tuple[dict[str, Any], list[str]]:
    """(group choices, command-line overrides) of the run in `run_dir`.

    Read from `<run_dir>/.hydra/hydra.yaml`, which Hydra writes before the run starts (so the MPI rank 0
    reads the same as the launcher); else from the live HydraConfig; else empty (a config composed in
    a test or a script, not by `src/train.py`)."""
    saved = Path(run_dir) / ".hydra" / "hydra.yaml"
    if saved.is_file():
        hydra = OmegaConf.load(saved).hydra
    else:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            return {}, []
        hydra = HydraConfig.get()
    choices = OmegaConf.to_container(hydra.runtime.choices, resolve=True) or {}
    overrides = list(OmegaConf.to_container(hydra.overrides.task, resolve=True) or [])
    return {str(k): v for k, v in choices.items() if not str(k).startswith("hydra")}, [str(o) for o in overrides]


def _tail(target: Any) -> str:
    return str(target).rpartition(".")[2].lower() if target else "?"


def _short(value: str) -> str:
    """A number with 4 significant digits (for names only; the config keeps the exact value)."""
    try:
        number = float(value)
    except ValueError:
        return value
    return value if number.is_integer() and "." not in value else f"{number:.4g}"


def varied(overrides: list[str], choices: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, value) of the overrides that change the result and that the name does not show already:
    not the group choices, not the seed, not bookkeeping keys (IGNORED)."""
    out = []
    for override in overrides:
        key, eq, value = override.lstrip("+~").partition("=")
        if not eq or key in choices or "/" in key or key.startswith(IGNORED):
            continue
        out.append((key, value))
    return out


def labels(cfg: dict, choices: dict[str, Any], overrides: list[str]) -> tuple[str, str]:
    """(name, group): `<scheme>-<model>-<dataset>-<cluster>[-<key>=<value>...]`, the name with `-s<seed>`.

    The group holds every setting but the seed, so wandb aggregates the seeds of one setting."""
    parts = [cfg["compressor"]["name"], choices.get("model") or _tail(cfg["model"].get("_target_")),
             choices.get("dataset") or _tail(cfg["dataset"].get("_target_")), cfg["cluster"]["name"]]
    extra = varied(overrides, choices)
    last = [k.rpartition(".")[2] for k, _ in extra]
    parts += [f"{k.rpartition('.')[2] if last.count(k.rpartition('.')[2]) == 1 else k}={_short(v)}" for k, v in extra]
    group = re.sub(r"[^\w.=,+-]", "_", "-".join(str(p) for p in parts))
    if len(group) > MAX_GROUP:
        group = group[:MAX_GROUP - 9] + "-" + hashlib.sha1(group.encode()).hexdigest()[:8]
    return f"{group}-s{cfg['seed']}", group


def init_kwargs(cfg: dict, choices: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """The keyword arguments of `wandb.init` (besides mode, project and dir) for the resolved config `cfg`
    (plain data, `ssgd.config.to_plain`). `wandb.name` / `wandb.group` replace the automatic ones;
    `wandb.tags` are added to the backend and device tags."""
    name, group = labels(cfg, choices, overrides)
    wb = cfg.get("wandb", {})
    tags = [str(cfg["backend"]), str(cfg["device"]).partition(":")[0], *wb.get("tags", [])]
    config = {**{k: v for k, v in choices.items() if k not in ("cfg", "overrides")}, "cfg": cfg,
              "overrides": list(overrides)}
    return {"name": wb.get("name") or name, "group": wb.get("group") or group, "tags": list(dict.fromkeys(tags)),
            "job_type": "train", "config": config}


def define_summaries(run: Any) -> None:
    """Summaries of the run: max val/acc, min val/loss and val/ppl, last throughput."""
    for key, summary in SUMMARIES.items():
        run.define_metric(key, summary=summary)


def final_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """The end-of-run summary for wandb: keys that `define_summaries` summarizes become `final/<key>`, so the
    final values do not overwrite the best ones."""
    return {(f"final/{k}" if k in SUMMARIES else k): v for k, v in summary.items()}


def write_readable_files(run: Any) -> list[Path]:
    """Write `files/config.yaml` and `files/wandb-summary.json` into an offline run's folder, as an online run
    has them (an offline run keeps both only inside its binary `run-*.wandb` until `wandb sync`), so that
    the run's config and summary can be read without a server. config.yaml has wandb's layout
    (`key: {value: ...}`); the summary is the run's summary so far (best values as `{"max": ...}` etc.).
    Returns the two paths."""
    import yaml

    files = Path(run.dir)
    files.mkdir(parents=True, exist_ok=True)
    config = {key: {"value": value} for key, value in run.config.as_dict().items()}
    summary = run.summary._as_dict() if hasattr(run.summary, "_as_dict") else dict(run.summary)
    out = [files / "config.yaml", files / "wandb-summary.json"]
    write_text_atomic(out[0], yaml.safe_dump(config, sort_keys=False), "wandb's offline config")
    write_text_atomic(out[1], json.dumps(summary, default=str, indent=1) + "\n", "wandb's offline summary")
    return out
