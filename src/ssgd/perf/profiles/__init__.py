"""Shipped iteration-time profiles (JSON), calibrated to the gTop-k paper's hardware.

Written by `python -m ssgd.tools.make_profiles` from the gTop-k paper's numbers (`ssgd.perf.paper`);
each file's "derivation" field says where every number comes from. Load one with `load("resnet20")`.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from ssgd.perf.iteration import Profile


def directory() -> Path:
    """Folder holding the shipped *.json profiles (inside the installed package)."""
    return Path(str(resources.files(__name__)))


def names() -> list[str]:
    """Names of the shipped profiles, sorted."""
    return sorted(p.stem for p in directory().glob("*.json"))


def load(name: str) -> Profile:
    """The shipped profile `name` (one of `names()`)."""
    path = directory() / f"{name}.json"
    if not path.is_file():
        raise ValueError(f"profile {name!r}: not shipped; available: {', '.join(names()) or 'none'}")
    return Profile.load(path)
