"""`cluster.compute_profile`: a compute profile the user measured (`make profile`) as the target's compute.

The target clock (`ssgd.perf.target`) takes the target workers' compute from a per-layer profile: the
shipped one whose model has the run's d parameters, or the file this key names. The file is read once,
before anything is built (`read`), and its model must have exactly the run's d (`check_d`, before any rank
starts where the model's size is known without building it, else when the model is built). Every problem
is one ConfigError naming the key: no such file, not a Profile JSON, another d. The run records the file
and its SHA-256 beside the profile's name (summary.json: target/profile, target/profile_file,
target/profile_sha256), so its target time can be recomputed from the same bytes.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

from ssgd.errors import ConfigError
from ssgd.perf.iteration import Profile
from ssgd.perf.target import TargetCompute, target_compute

KEY = "cluster.compute_profile"


@dataclass(frozen=True)
class UserProfile:
    """The profile `cluster.compute_profile` names: the profile, the file (absolute) and its SHA-256."""

    profile: Profile
    file: str
    sha256: str


def read(path: str | None) -> UserProfile | None:
    """The profile of the file `path` (None: the key is unset); ConfigError naming the key when the file is
    missing, unreadable or not a Profile JSON (`ssgd.perf.iteration.Profile.to_dict`'s format)."""
    if path is None:
        return None
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"{KEY}={path!r}: no such file (write one with `make profile`, docs/scaling-model.md)")
    try:
        data = file.read_bytes()
        profile = Profile.from_dict(_json(data))
    except OSError as err:
        raise ConfigError(f"{KEY}={path!r}: cannot read it ({err.strerror})") from None
    except ValueError as err:
        raise ConfigError(f"{KEY}={path!r}: not a compute profile ({_first_line(err)}); "
                          "write one with `make profile`") from None
    return UserProfile(profile, str(file.resolve()), hashlib.sha256(data).hexdigest())


def check_d(user: UserProfile | None, d: int) -> None:
    """ConfigError naming the key when the profile describes another number of parameters than the run's d."""
    if user is not None and user.profile.d != d:
        raise ConfigError(f"{KEY}={user.file!r}: profile {user.profile.name!r} describes a model of "
                          f"{user.profile.d:,} parameters, this run's model has {d:,} (measure this model: "
                          "`make profile` with the run's model and dataset overrides)")


def compute(user: UserProfile | None, d: int, batch_size: int, selection: str) -> TargetCompute | None:
    """The run's target compute (`ssgd.perf.target.target_compute`): from the user's profile when the key is
    set (ConfigError for another d), else from the shipped profile of d, else None."""
    if user is None:
        return target_compute(d, batch_size, selection)
    check_d(user, d)
    found = target_compute(d, batch_size, selection, user.profile)
    assert found is not None            # a given profile of the right d always gives a target compute
    return replace(found, file=user.file, sha256=user.sha256)


def _json(data: bytes) -> object:
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"not JSON: {err}") from None


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
