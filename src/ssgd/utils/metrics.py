"""Run outputs: `metrics.jsonl` (one JSON object per record), `summary.json`, and wandb.

Keys are slash-namespaced (`train/loss`, `target/comm_s`, ...). wandb receives the same records;
its mode is `disabled`, `offline` (default: writes under the run directory, needs no network) or
`online`. The run's name, group, tags and logged config come from `ssgd.utils.wandb_run.init_kwargs`.

One run directory holds one run's records: a new run refuses a `metrics.jsonl` that already has records,
and a resumed run keeps exactly the records its checkpoint had seen (`keep_records`), so that no step is
logged twice. A resumed run continues its wandb run (`wandb_id`, saved in the checkpoint).
"""
from __future__ import annotations

import json
import logging
import netrc
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ssgd.errors import ConfigError, DiskFull

from ssgd.utils import wandb_run
from ssgd.utils.atomic import (append_whole, check_space, disk_full, no_space_reason, open_appending,
                               write_text_atomic)

WANDB_MODES = ("disabled", "offline", "online")
METRICS = "metrics.jsonl"
log = logging.getLogger("ssgd.train")
WANDB_FILES = "wandb's own files"
WANDB_START_BYTES = 256 * 1024    # about what wandb writes when a run starts (logs, metadata; measured: ~50 KB)
ONLINE_INIT_TIMEOUT_S = 20.0      # wandb's own default (90 s) is how long a run without network waits silently


def wandb_credentials() -> bool:
    """Whether wandb.mode=online can log in: WANDB_API_KEY is set, or ~/.netrc (or $NETRC) has an entry for
    the wandb host ($WANDB_BASE_URL, default api.wandb.ai), which is where `wandb login` saves the key."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _complete(lines: list[str]) -> list[str]:
    """`lines` without a last line that is partial: cut before its newline, or not a JSON object."""
    if not lines:
        return lines
    last = lines[-1]
    try:
        whole = last.endswith("\n") and isinstance(json.loads(last), dict)
    except ValueError:
        whole = False
    return lines if whole else lines[:-1]


def keep_metrics(path: Path, keep: int | None) -> int:
    """Prepare `path` (metrics.jsonl) for a run; returns how many records it then holds.

    keep None (a new run): the file must be absent or empty, else ConfigError. keep = n (a resumed run whose
    checkpoint had seen n records): a partial last record (cut mid-line: a full disk, a killed copy) is
    dropped, and so are the records after the first n, written after the checkpoint by the run that stopped
    (the resumed run writes them again), atomically. A dropped partial record, or records missing below n,
    cost one warning line naming the file and what was dropped or is missing."""
    if not path.is_file():
        return 0
    lines = path.read_text(errors="replace").splitlines(keepends=True)
    if keep is None:
        if lines:
            raise ConfigError(f"{path}: already holds the records of another run; one run directory holds one "
                              "run (a new one gets its own; continue this one with trainer.resume=auto)")
        return 0
    whole = _complete(lines[:keep])
    said = []
    if len(whole) < min(len(lines), keep):
        said.append(f"dropped its last record, cut mid-line ({lines[len(whole)][:60].strip()!r}...)")
    if len(lines) > len(whole):
        write_text_atomic(path, "".join(whole), "the run's metrics")
    if len(whole) < keep < sys.maxsize:          # (sys.maxsize: a checkpoint without a record count)
        said.append(f"it holds {len(whole)} of the {keep} records the checkpoint had seen: records "
                    f"{len(whole) + 1}-{keep} are missing (lost before this resume; the run goes on from the "
                    "checkpoint and does not write them again)")
    if said:
        log.warning(f"{path}: " + "; ".join(said))
    return len(whole)


def write_json_atomic(path: Path, obj: Any, what: str = "the file") -> None:
    """Write JSON to a temporary file, then rename: a crash never leaves a half-written file, a full disk
    raises DiskFull with the temporary file removed (ssgd.utils.atomic)."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n", what)


class MetricWriter:
    """Appends records to run_dir/metrics.jsonl and mirrors them to wandb (rank 0 only)."""

    def __init__(self, run_dir: str | Path, wandb_mode: str = "offline", project: str = "ssgd",
                 config: dict | None = None, name: str | None = None, enabled: bool = True,
                 keep_records: int | None = None, wandb_id: str | None = None,
                 wandb_init: dict[str, Any] | None = None) -> None:
        if wandb_mode not in WANDB_MODES:
            raise ValueError(f"wandb_mode={wandb_mode!r}: must be one of {', '.join(WANDB_MODES)}")
        self.run_dir, self.enabled, self.wandb_mode = Path(run_dir), enabled, wandb_mode
        self.file = None
        self.wandb_run = None
        self.records = 0                  # lines in metrics.jsonl (a checkpoint saves it: see keep_metrics)
        if not enabled:
            return
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.records = keep_metrics(self.run_dir / METRICS, keep_records)
            self.file = open_appending(self.run_dir / METRICS, "the run's metrics")   # each record one write
        except OSError as err:
            raise ConfigError(f"{self.run_dir}: cannot write the run's outputs there ({err.strerror}); "
                              "choose another directory with hydra.run.dir=...") from None
        if wandb_mode != "disabled":
            check_space(self.wandb_dir, WANDB_FILES, WANDB_START_BYTES, "nothing was written")
            self.wandb_run = self._wandb(wandb_mode, project, config, name, wandb_id, wandb_init)

    @property
    def wandb_dir(self) -> Path:
        """The folder of wandb's own files (offline runs, logs): `<run>/wandb`."""
        return self.run_dir / "wandb"

    def _wandb_full(self, err: BaseException) -> DiskFull | None:
        """`err`, raised by wandb, as the one line naming `wandb_dir` when it is a full disk (any disguise; wandb's
        files are wandb's to write, so this is the line, not an atomic write); None when `err` is another failure,
        or already a DiskFull (one of the files written here), to be raised as it is."""
        reason = None if isinstance(err, DiskFull) else no_space_reason(err)
        if reason is None:
            return None
        return disk_full(self.wandb_dir, WANDB_FILES, 0, reason, "the run's own files written before are kept")

    def _wandb(self, mode: str, project: str, config: dict | None, name: str | None, run_id: str | None,
               wandb_init: dict[str, Any] | None) -> Any:
        """wandb.init with `wandb_init` (name, group, tags, config: `ssgd.utils.wandb_run.init_kwargs`) over
        `config`/`name`; a saved `run_id` continues that run."""
        import wandb  # imported lazily: ~1 s, and not needed when disabled

        timeout = float(os.environ.get("WANDB_INIT_TIMEOUT") or ONLINE_INIT_TIMEOUT_S)   # read here: wandb reads
        settings = {"settings": wandb.Settings(init_timeout=timeout)} if mode == "online" else {}  # it once per process
        try:
            init = {"config": config, "name": name, **(wandb_init or {})}
            run = wandb.init(mode=mode, project=project, dir=str(self.run_dir), reinit="finish_previous", id=run_id,
                             resume="allow" if run_id else None, **init, **settings)
        except Exception as err:      # wandb's errors (no key, no network) have no common base we can name
            self.close()
            if isinstance(err, DiskFull):
                raise
            full = self._wandb_full(err)
            if full is not None:
                raise full from err
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConfigError(f"wandb.mode={mode}: {first} (wandb.mode=offline needs no network; "
                              "`wandb sync` uploads later)") from None
        wandb_run.define_summaries(run)
        return run

    @property
    def wandb_id(self) -> str | None:
        """The wandb run's id (saved in checkpoints, so that a resumed run continues the same wandb run)."""
        return None if self.wandb_run is None else self.wandb_run.id

    def log(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self._append((json.dumps(record) + "\n").encode())
        self.records += 1
        if self.wandb_run is not None:
            try:
                self.wandb_run.log({k: v for k, v in record.items() if k != "step"}, step=int(record["step"]))
            except Exception as err:      # noqa: BLE001 -- a full disk is the one line; anything else as it is
                full = self._wandb_full(err)
                if full is None:
                    raise
                raise full from err

    def _append(self, data: bytes) -> None:
        """Append one whole record to metrics.jsonl, or nothing: a write the disk cannot take (ENOSPC, a quota)
        is cut back to the file's length before it and raises DiskFull (exit status 2)."""
        append_whole(self.file, data, self.run_dir / METRICS, f"record {self.records + 1} of the run's metrics",
                     f"its {self.records} records before it are kept")

    def summary(self, summary: dict[str, Any]) -> None:
        if not self.enabled:
            return
        write_json_atomic(self.run_dir / "summary.json", summary, "the run's summary")
        if self.wandb_run is not None:
            try:
                self.wandb_run.summary.update(wandb_run.final_summary(summary))
            except Exception as err:      # noqa: BLE001 -- a full disk is the one line; anything else as it is
                full = self._wandb_full(err)
                if full is None:
                    raise
                raise full from err

    def close(self) -> None:
        """Close metrics.jsonl and finish the wandb run (offline: its readable files first). A full disk met
        in wandb's part raises DiskFull naming its file or `<run>/wandb`, unless close runs while another error
        is on its way (a `finally:` after the run's first DiskFull): that first error stays the run's one line."""
        failing = sys.exc_info()[1] is not None
        if self.file is not None:
            self.file.close()
            self.file = None
        if self.wandb_run is None:
            return
        run, self.wandb_run = self.wandb_run, None
        try:
            try:
                if self.wandb_mode == "offline":
                    wandb_run.write_readable_files(run)
            finally:
                run.finish()
        except Exception as err:          # noqa: BLE001 -- see the docstring
            if failing:
                log.debug(f"wandb while closing after an error: {type(err).__name__}: {err}")
                return
            full = self._wandb_full(err)
            if full is None:
                raise
            raise full from err
