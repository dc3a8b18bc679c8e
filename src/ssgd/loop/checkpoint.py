"""Checkpoints: shared state (weights, optimizer, position, the running totals of the summary and the run's
wandb id) plus every rank's own state (residual, compressor RNG, dropout RNG, batch-norm buffers), so that a
resumed run continues bitwise as if it had never stopped, and reports the same summary.

A checkpoint also records what identifies its run (`identity`: scheme, density, seed, P, batch size,
dataset); continuing it under another identity is refused with the mismatch named, unless
`trainer.resume_weights_only=true` asks for a new run that starts from its weights only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ssgd.errors import ConfigError

FILENAME = "checkpoint.pt"
AUTO = "auto"


@dataclass(frozen=True)
class Resume:
    """A checkpoint read for this process: shared state, the states of its local ranks, and whether only
    the weights are taken (a new run that starts from them)."""

    path: Path
    shared: dict
    ranks: dict[int, dict]
    weights_only: bool = False


def save_checkpoint(run_dir: Path, shared: dict, ranks: dict[int, dict], is_root: bool = True) -> Path:
    """Write run_dir/checkpoint.pt atomically (temporary file + rename)."""
    path = Path(run_dir) / FILENAME
    if is_root:
        tmp = path.with_suffix(".pt.tmp")
        torch.save({"shared": shared, "ranks": ranks}, tmp)
        os.replace(tmp, path)
    return path


def resume_path(resume: str | None, run_dir: Path) -> Path | None:
    """The checkpoint `trainer.resume` names: None for none; `auto`: run_dir/checkpoint.pt when it exists
    (else None: a fresh start); otherwise a checkpoint file or a run directory holding one (ConfigError if
    there is none)."""
    if resume is None or resume == "":
        return None
    if resume == AUTO:
        path = Path(run_dir) / FILENAME
        return path if path.is_file() else None
    path = Path(resume)
    if path.is_dir():
        path = path / FILENAME
    if not path.is_file():
        raise ConfigError(f"trainer.resume={str(path)!r}: no such checkpoint file")
    return path


def load_checkpoint(path: Path, local_ranks: list[int]) -> tuple[dict, dict[int, dict]]:
    """Shared state and the states of `local_ranks` (those the file has); ConfigError if unreadable."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
        shared, ranks = state["shared"], state["ranks"]
    except Exception as err:  # any unreadable file is the user's input problem
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"trainer.resume={str(path)!r}: not a checkpoint of this project ({first})") from err
    return shared, {r: ranks[r] for r in local_ranks if r in ranks}


def _show(identity: dict[str, Any], keys: list[str]) -> str:
    return ", ".join(f"{k}={identity[k]}" for k in keys)


def check_fits(shared: dict, path: Path, identity: dict[str, Any], d: int, weights_only: bool) -> None:
    """ConfigError unless the checkpoint `shared` (read from `path`) can continue a run with `identity` and
    `d` parameters. Every key of the identity that differs is named; with `weights_only` only the model
    (its number of parameters) must match."""
    if shared["d"] != d:
        raise ConfigError(f"trainer.resume={str(path)!r}: written for a model with {shared['d']} parameters; this "
                          f"run's model has {d} (another model or dataset)")
    if weights_only:
        return
    saved = {"cluster.world_size": shared["P"], **shared.get("identity", {})}
    differ = [k for k in identity if k in saved and saved[k] != identity[k]]
    if differ:
        raise ConfigError(f"trainer.resume={str(path)!r}: written by a run with {_show(saved, differ)}; this run has "
                          f"{_show(identity, differ)} (trainer.resume_weights_only=true starts a new run from its "
                          "weights only)")
