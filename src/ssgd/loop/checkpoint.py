"""Checkpoints: shared state (weights, optimizer, position, the running totals of the summary and the run's
wandb id) plus every rank's own state (residual, compressor RNG, dropout RNG, batch-norm buffers), so that a
resumed run continues bitwise as if it had never stopped, and reports the same summary.

A checkpoint also records what identifies its run (its run identity, under the key `identity`: scheme,
density, seed, P, batch size, dataset, optimizer class and hyper-parameters; `ssgd.run.build.run_identity`);
continuing it under another run identity is refused with the mismatch named, unless
`trainer.resume_weights_only=true` asks for a new run that starts from its weights only, or
`trainer.resume_changes=[key, ...]` allows those keys to change (each change is appended to the run's
`resumes.jsonl`).

Checkpoints are read with `torch.load(..., weights_only=True)`: tensors, numbers, strings and containers
only, so a file whose pickle names code is refused instead of running it. A file missing what a resume
needs is refused with one line too (`ConfigError`, exit 2), never a traceback.
"""
from __future__ import annotations

import json
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ssgd.errors import AlreadyFinished, ConfigError
from ssgd.utils.atomic import append_whole, open_appending, replacing

FILENAME = "checkpoint.pt"
AUTO = "auto"
RESUMES = "resumes.jsonl"
"""One JSON line per identity key a resume changed: step, key, old and new value."""
SHARED_KEYS = {"params": list, "optimizer": dict, "epoch": int, "step": int, "P": int, "d": int}
"""What the shared state of a checkpoint must hold, and of which type."""


@dataclass(frozen=True)
class Resume:
    """A checkpoint read for this process: shared state, the states of its local ranks, and whether only
    the weights are taken (a new run that starts from them)."""

    path: Path
    shared: dict
    ranks: dict[int, dict]
    weights_only: bool = False


def tensor_bytes(obj: Any) -> int:
    """Bytes of the tensors inside `obj` (nested dicts, lists, tuples): about what a checkpoint of it takes."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def save_checkpoint(run_dir: Path, shared: dict, ranks: dict[int, dict], is_root: bool = True) -> Path:
    """Write run_dir/checkpoint.pt atomically (temporary file + rename, ssgd.utils.atomic.replacing). A write
    that cannot fit (checked first against the bytes of its tensors, then ENOSPC or a quota in any disguise:
    an OSError, or torch's RuntimeError `unexpected pos` from its zip writer) deletes its temporary file, keeps
    the previous checkpoint, and raises DiskFull naming the path, the bytes the checkpoint needs and those
    free (a ConfigError: exit status 2). Torch's zip records carry a CRC32 of each entry, which
    `load_checkpoint` checks."""
    path = Path(run_dir) / FILENAME
    if is_root:
        state = {"shared": shared, "ranks": ranks}
        with replacing(path, "the checkpoint", tensor_bytes(state)) as tmp:
            with open(tmp, "wb") as f:             # a file object: torch then raises the OSError itself
                torch.save(state, f)
    return path


def finished_without_checkpoint(run_dir: Path) -> None:
    """AlreadyFinished when run_dir holds the summary.json of a run that finished and left no checkpoint
    (`trainer.checkpoint_every=0`): `trainer.resume=auto` there has nothing to continue from, and training it
    again from step 0 would silently rewrite its outputs."""
    summary_path = run_dir / "summary.json"
    if not summary_path.is_file():
        return
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError):
        summary = {}
    steps = summary.get("steps", "?") if isinstance(summary, dict) else "?"
    raise AlreadyFinished(f"{run_dir}: this run already finished at step {steps} (summary.json) and has no "
                          "checkpoint to continue from; nothing to do, nothing changed (a new run needs a new "
                          "directory)", summary if isinstance(summary, dict) else {})


def resume_path(resume: str | None, run_dir: Path) -> Path | None:
    """The checkpoint `trainer.resume` names: None for none; `auto`: run_dir/checkpoint.pt when it exists
    (else None: a fresh start, or AlreadyFinished when run_dir holds a finished run's summary.json);
    otherwise a checkpoint file or a run directory holding one (ConfigError if there is none)."""
    if resume is None or resume == "":
        return None
    if resume == AUTO:
        path = Path(run_dir) / FILENAME
        if not path.is_file():
            finished_without_checkpoint(Path(run_dir))
        return path if path.is_file() else None
    path = Path(resume)
    if path.is_dir():
        path = path / FILENAME
    if not path.is_file():
        raise ConfigError(f"trainer.resume={str(path)!r}: no such checkpoint file")
    return path


def _unpickler_reason(err: BaseException) -> str:
    """The one line of torch's error that says what was wrong (not its paragraph about weights_only)."""
    text = str(err).strip()
    if "WeightsUnpickler error:" in text:
        rest = [line.strip() for line in text.split("WeightsUnpickler error:", 1)[1].splitlines() if line.strip()]
        return rest[0] if rest else type(err).__name__
    return text.splitlines()[0] if text else type(err).__name__


def _check_shape(state: Any) -> str | None:
    """What is missing or mistyped in a loaded checkpoint, or None when it has what a resume needs."""
    if not isinstance(state, dict) or not isinstance(state.get("shared"), dict) \
            or not isinstance(state.get("ranks"), dict):
        return "expected a dict with 'shared' and 'ranks' dicts"
    shared = state["shared"]
    for key, kind in SHARED_KEYS.items():
        if not isinstance(shared.get(key), kind) or isinstance(shared.get(key), bool):
            return f"shared state has no {kind.__name__} {key!r}"
    if not all(isinstance(p, torch.Tensor) for p in shared["params"]):
        return "shared 'params' holds something that is not a tensor"
    if not all(isinstance(r, int) and isinstance(v, dict) for r, v in state["ranks"].items()):
        return "'ranks' must map rank numbers to dicts"
    return None


def damaged_entry(path: Path) -> str | None:
    """What is damaged in the zip file `path` (torch's checkpoint format): its first entry whose bytes do not
    match the CRC32 its zip record carries, or a zip record that cannot be read; None when every entry matches
    (or `path` is not a zip file: torch's legacy format, or a truncated file, which `torch.load` judges)."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError):
        return None
    with archive:
        try:
            bad = archive.testzip()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as err:
            return f"{type(err).__name__}: {err}"
    return None if bad is None else f"its entry {bad} does not match the CRC32 written with it"


def load_checkpoint(path: Path, local_ranks: list[int]) -> tuple[dict, dict[int, dict]]:
    """Shared state and the states of `local_ranks` (those the file has); ConfigError if damaged (an entry
    whose CRC32 does not match its bytes), unreadable, if its pickle names anything but tensors, numbers,
    strings and containers (`weights_only=True`: nothing in the file runs), or if it lacks what a resume
    needs."""
    where = f"trainer.resume={str(path)!r}"
    damaged = damaged_entry(path)
    if damaged is not None:
        raise ConfigError(f"{where}: damaged ({damaged}: a disk or copy error); resume from an undamaged "
                          "copy, or start a new run")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # any unreadable file is the user's input problem
        named = re.search(r"GLOBAL (\S+)", str(err))
        if named:
            raise ConfigError(f"{where}: refused, its pickle names {named.group(1)}, not tensors, numbers, "
                              "strings or containers (a checkpoint of this project never does; nothing "
                              "in it was run)") from err
        raise ConfigError(f"{where}: not a checkpoint of this project ({_unpickler_reason(err)})") from err
    problem = _check_shape(state)
    if problem:
        raise ConfigError(f"{where}: not a checkpoint of this project ({problem})")
    shared, ranks = state["shared"], state["ranks"]
    return shared, {r: ranks[r] for r in local_ranks if r in ranks}


def _show(run_identity: dict[str, Any], keys: list[str]) -> str:
    return ", ".join(f"{k}={run_identity.get(k, '(unset)')}" for k in keys)


def check_fits(shared: dict, path: Path, run_identity: dict[str, Any], d: int, weights_only: bool,
               changes: list[str] | tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """ConfigError unless the checkpoint `shared` (read from `path`) can continue a run with `run_identity`
    and `d` parameters. Every key of the run identity that differs is named; a key the checkpoint does not
    record is not compared. With `weights_only` only the model (its number of parameters) must match. Keys
    named in `changes` (`trainer.resume_changes`) may differ: returns those changes as records {step, key,
    old, new} (for `record_changes`)."""
    if shared["d"] != d:
        raise ConfigError(f"trainer.resume={str(path)!r}: written for a model with {shared['d']} parameters; this "
                          f"run's model has {d} (another model or dataset)")
    if weights_only:
        return []
    unknown = [k for k in changes if k not in run_identity]
    if unknown:
        raise ConfigError(f"trainer.resume_changes={list(changes)}: {unknown[0]!r} is not a key of a run's identity; "
                          f"allowed: {', '.join(sorted(run_identity))}")
    saved = {"cluster.world_size": shared["P"], **shared.get("identity", {})}
    keys = [*run_identity, *(k for k in saved if k.startswith("optimizer.") and k not in run_identity)]
    differ = [k for k in keys if k in saved and saved[k] != run_identity.get(k)]
    refused = [k for k in differ if k not in changes]
    if refused:
        hint = ("trainer.resume_changes=[" + ",".join(refused) + "] allows the change, "
                "trainer.resume_weights_only=true starts a new run from its weights only")
        raise ConfigError(f"trainer.resume={str(path)!r}: written by a run with {_show(saved, refused)}; this run "
                          f"has {_show(run_identity, refused)} ({hint})")
    return [{"step": shared["step"], "key": k, "old": saved.get(k), "new": run_identity.get(k)} for k in differ]


def record_changes(run_dir: Path, changes: list[dict[str, Any]]) -> None:
    """Append each allowed change of a resume to run_dir/resumes.jsonl (one JSON line each)."""
    if changes:                      # one write of every line, or none (ssgd.utils.atomic: DiskFull on a full disk)
        path = Path(run_dir) / RESUMES                       # (its folder is made: a resume into a new run directory)
        with open_appending(path, "the record of the resume's changes") as f:
            append_whole(f, "".join(json.dumps(change) + "\n" for change in changes).encode(), path,
                         f"the record of the resume's changes ({', '.join(c['key'] for c in changes)})",
                         "the records before it are kept")
