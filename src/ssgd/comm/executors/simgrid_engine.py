"""SimGrid's engine and the platform it simulates, one per process (SimGrid's rule, not ours).

SimGrid keeps one engine per process, and its platform cannot grow once a simulation has run. So a
process builds the platform of the first `Platform` it is asked for and reuses it for every later call
on the same network with at most as many hosts (`Platform.same_network`); another network in the same
process is refused with a one-line error (run it in its own process). Durations are differences of the
engine's clock, which keeps running from one call to the next.

`load()` imports the bindings or raises `SimGridMissing`, one line naming the install commands.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ssgd.errors import ConfigError
from ssgd.perf.platform import Platform

INSTALL = ("SimGrid's Python bindings are not importable: install them with `make simgrid` (root: "
           "apt-get install python3-simgrid, linked into .venv) or `conda env create -f environment.yml`; "
           "docs/simgrid.md#install")


class SimGridMissing(ConfigError):
    """SimGrid's bindings cannot be imported (exit 2, one line naming the install)."""


def load() -> ModuleType:
    """The `simgrid` module; `SimGridMissing` when it cannot be imported."""
    try:
        with _quiet_stderr():             # importing the bindings announces their thread contexts on stderr
            import simgrid
    except ImportError:
        raise SimGridMissing(INSTALL) from None
    return simgrid


@dataclass
class Session:
    """The process's engine, its platform and the hosts built for it (`hosts[r]` runs rank r)."""

    sg: ModuleType
    engine: Any
    platform: Platform
    hosts: list[Any]
    calls: int = 0

    def next_call(self) -> int:
        """A fresh number for a call's mailboxes (names stay unique across calls)."""
        self.calls += 1
        return self.calls


_SESSION: list[Session] = []      # at most one: SimGrid's engine is process-wide


def session(platform: Platform) -> Session:
    """The process's session for `platform`, built on first use (module docstring). ConfigError when this
    process already simulates another network or fewer hosts."""
    if _SESSION:
        built = _SESSION[0]
        if not built.platform.same_network(platform):
            raise ConfigError(f"SimGrid simulates one platform per process: this one has {built.platform}, asked "
                              f"for {platform}; run the other in its own process")
        return built
    sg = load()
    engine = sg.Engine(["ssgd", "--log=root.thres:critical", *platform.tcp.engine_args()])
    _SESSION.append(Session(sg, engine, platform, _build(sg, platform)))
    return _SESSION[0]


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 points at /dev/null inside the block (C code's writes included)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _build(sg: ModuleType, p: Platform) -> list[Any]:
    """The star of docs/simgrid.md: one split-duplex NIC link per host, plus the backbone when there is one."""
    zone = sg.NetZone.create_star_zone("cluster")
    backbone = None
    if p.switch == "backbone":
        backbone = zone.create_link("backbone", p.backbone_bandwidth).set_latency(p.backbone_latency).seal()
    up, down = sg.LinkInRoute.Direction.UP, sg.LinkInRoute.Direction.DOWN
    hosts = []
    for i in range(p.hosts):
        host = zone.create_host(f"h{i}", "1Gf")
        nic = zone.create_split_duplex_link(f"nic{i}", p.bandwidth).set_latency(p.latency).seal()
        out = [sg.LinkInRoute(nic, up)] + ([sg.LinkInRoute(backbone)] if backbone is not None else [])
        zone.add_route(host.netpoint, None, None, None, out, False)
        zone.add_route(None, host.netpoint, None, None, [sg.LinkInRoute(nic, down)], False)
        hosts.append(host)
    zone.seal()
    return hosts
