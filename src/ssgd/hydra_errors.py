"""Hydra's composition errors as the one line this project prints for bad input.

Hydra reports a missing group option or a bad override over many lines (with its config search
path); `src/train.py` turns them into `error: <one line>` and exit status 2.
"""
from __future__ import annotations

import re

from hydra.errors import HydraException, MissingConfigException
from omegaconf.errors import OmegaConfBaseException

COMPOSITION_ERRORS = (HydraException, OmegaConfBaseException)


def one_line_error(err: BaseException) -> str:
    """One line naming the override or config file at fault and what is allowed."""
    text = str(err).strip()
    if isinstance(err, MissingConfigException):
        missing = re.search(r"Could not find '([^']+)/([^'/]+)'", text)
        if missing:
            group, option = missing.groups()
            allowed = re.search(rf"Available options in '{re.escape(group)}':\n((?:\t.*\n?)+)", text)
            choices = ", ".join(line.strip() for line in allowed.group(1).splitlines()) if allowed else "none"
            return f"{group}={option}: no such option; allowed: {choices}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    cause = err.__cause__
    merging = re.match(r"Error merging override (.+)", lines[0]) if lines else None
    if merging and cause is not None:
        return f"{merging.group(1)}: {_first(cause)}"
    if lines and lines[0].startswith("In '") and len(lines) > 1:          # a bad key inside a group file
        full_key = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("full_key:")), None)
        where = lines[0].split(":", 1)[0]
        return f"{where}: {lines[1]}" + (f" ({full_key})" if full_key else "")
    if cause is not None and not lines:
        return _first(cause)
    return lines[0] if lines else type(err).__name__


def _first(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__
