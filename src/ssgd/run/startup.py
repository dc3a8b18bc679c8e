"""Start-up of the training app: the checks that need no torch, and the time each start-up phase took.

`check_before_imports` refuses keys, options, value ranges and data paths before torch is imported
(importing torch alone takes seconds), so bad input costs about as long as composing the config; the
typed config it returns is the one the run is built from (the checks run once).
`Phases` records when each phase of a run ended; `ssgd-train --profile ...` prints them on stderr.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ssgd.config import Config, check_keys, one_line
from ssgd.errors import ConfigError

PROFILE_FLAG = "--profile"
PATH_KEYS = ("data_dir",)        # dataset keys that name a directory the loader reads


def typed_config(cfg: DictConfig) -> Config:
    """The config as schema dataclasses (the typed config every layer below trusts); their `__post_init__`
    range checks run here (one-line ConfigError)."""
    try:
        return OmegaConf.to_object(cfg)  # type: ignore[return-value]
    except OmegaConfBaseException as err:
        if isinstance(err.__cause__, ConfigError):
            raise err.__cause__ from None
        raise ConfigError(one_line(err)) from None


def check_paths(cfg: DictConfig) -> None:
    """ConfigError for a dataset directory that does not exist (relative paths: from the working directory)."""
    node = cfg.get("dataset")
    if not isinstance(node, DictConfig):
        return
    name = str(node.get("_target_", "?")).rsplit(".", 1)[-1]
    for key in PATH_KEYS:
        value = node.get(key)
        if isinstance(value, str) and not Path(value).expanduser().is_dir():
            raise ConfigError(f"dataset.{key}={value!r}: no such directory (dataset={name} reads its files there; "
                              f"point dataset.{key} at them, or use dataset=mnist_embedded, which needs none)")


def checked_config(cfg: DictConfig) -> Config:
    """The schema's checks (unknown keys, types, value ranges); returns the typed config, else ConfigError."""
    check_keys(cfg)
    return typed_config(cfg)


def check_before_imports(cfg: DictConfig) -> Config:
    """Every check that needs neither torch nor the package's heavy modules: the schema's (`checked_config`)
    and the dataset paths. Returns the typed config, which the app hands down (`ssgd.run.build.spec`), so
    the checks run once; ConfigError (one line) otherwise."""
    config = checked_config(cfg)
    check_paths(cfg)
    return config


def process_age() -> float | None:
    """Seconds since this process started (from /proc; None where there is none)."""
    try:
        start_ticks = int(Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)


class Phases:
    """When each start-up phase ended: `mark(name)` closes the phase that began at the previous mark.

    The first phase, "python + imports", runs from the process's start (from /proc, 10 ms ticks) to the
    Phases' creation."""

    def __init__(self) -> None:
        age = process_age()
        self.t0 = time.perf_counter()
        self.durations: list[tuple[str, float]] = [("python + imports", age)] if age is not None else []
        self.last = self.t0

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.durations.append((name, now - self.last))
        self.last = now

    def line(self) -> str:
        """One line: each phase's seconds, then the time since the last mark (the phase that ended the
        process, e.g. by an error), and the total."""
        rest = time.perf_counter() - self.last
        durations = self.durations + ([("until exit", rest)] if rest >= 0.005 else [])
        total = sum(d for _, d in durations)
        cells = [f"{name} {seconds:.2f} s" for name, seconds in durations]
        return "profile: " + " | ".join(cells + [f"total {total:.2f} s"])


def take_profile_flag(argv: list[str]) -> bool:
    """Remove `--profile` from `argv` (Hydra would refuse it); True when it was there."""
    found = PROFILE_FLAG in argv
    while PROFILE_FLAG in argv:
        argv.remove(PROFILE_FLAG)
    return found


def print_profile(phases: Phases) -> None:
    print(phases.line(), file=sys.stderr, flush=True)
