"""Checkpoints at epoch boundaries: shared state (weights, optimizer) plus every rank's own state
(residual, compressor RNG, dropout RNG, batch-norm buffers), so that a resumed run continues
bitwise as if it had never stopped."""
from __future__ import annotations

import os
from pathlib import Path

import torch

from ssgd.errors import ConfigError

FILENAME = "checkpoint.pt"


def save_checkpoint(run_dir: Path, shared: dict, ranks: dict[int, dict], is_root: bool = True) -> Path:
    """Write run_dir/checkpoint.pt atomically (temporary file + rename)."""
    path = Path(run_dir) / FILENAME
    if is_root:
        tmp = path.with_suffix(".pt.tmp")
        torch.save({"shared": shared, "ranks": ranks}, tmp)
        os.replace(tmp, path)
    return path


def load_checkpoint(path: Path, local_ranks: list[int], P: int, d: int) -> tuple[dict, dict[int, dict]]:
    """Shared state and the states of `local_ranks`; ConfigError if the file does not fit this run."""
    path = Path(path)
    if path.is_dir():
        path = path / FILENAME
    if not path.is_file():
        raise ConfigError(f"trainer.resume={str(path)!r}: no such checkpoint file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
        shared, ranks = state["shared"], state["ranks"]
    except Exception as err:  # any unreadable file is the user's input problem
        raise ConfigError(f"trainer.resume={str(path)!r}: not a checkpoint of this project ({err})") from err
    if shared["P"] != P or shared["d"] != d:
        raise ConfigError(f"trainer.resume={str(path)!r}: written with world_size={shared['P']} and {shared['d']} "
                          f"parameters; this run has world_size={P} and {d} parameters")
    return shared, {r: ranks[r] for r in local_ranks}
