"""A simulated cluster for SimGrid (`ssgd.comm.executors.simgrid`): hosts, their NIC links, the switch, and
SimGrid's TCP model settings. Pure data here; the executor builds the platform from it.

Topology (docs/simgrid.md):
  * every host has one full-duplex NIC link (`bandwidth` bytes/s each way, `latency` seconds one way) to
    one switch; host a -> host b crosses a's link up and b's link down;
  * `switch="star"`: the switch has full bisection (any set of disjoint pairs runs at the NIC rate);
  * `switch="backbone"`: every message also crosses one shared backbone of `backbone_bandwidth` bytes/s
    and `backbone_latency` s, the switch's total switching capacity (an oversubscribed switch or fabric:
    P hosts whose aggregate traffic exceeds it share it).

SimGrid's flow model (`tcp`): messages that share a link share its bandwidth (max-min fairness), and
the LV08 model corrects each message's time with a latency factor and a bandwidth factor (SimGrid's
defaults, 13.01 and 0.97, come from its authors' fits to TCP on Ethernet; `make simgrid-calibrate` fits
ours on the testbed), and caps one flow's rate at `tcp_gamma / (2 x route latency)` (the TCP window).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ssgd.errors import ConfigError

SWITCHES = ("star", "backbone")
MODELS = ("LV08", "CM02")


def positive(value: object, key: str) -> float:
    """`value` as a float when it is a finite number > 0; else ConfigError naming `key`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{key}={value!r}: must be a finite number > 0")
    return float(value)


def _non_negative(value: object, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{key}={value!r}: must be a finite number >= 0")
    return float(value)


@dataclass(frozen=True)
class TcpModel:
    """SimGrid's network model settings (`--cfg=network/...`): `model` LV08 (factors apply) or CM02 (plain
    max-min sharing, no factors); `latency_factor`, `bandwidth_factor` > 0; `tcp_gamma` bytes > 0 (the window);
    `crosstraffic`: each flow's TCP acknowledgements load the reverse links (SimGrid's default; a message then
    slows the messages going the other way)."""

    model: str = "LV08"
    latency_factor: float = 13.01
    bandwidth_factor: float = 0.97
    tcp_gamma: float = 4194304.0
    crosstraffic: bool = True

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ConfigError(f"cluster.network.simgrid.tcp.model={self.model!r}: allowed: {', '.join(MODELS)}")
        positive(self.latency_factor, "cluster.network.simgrid.tcp.latency_factor")
        positive(self.bandwidth_factor, "cluster.network.simgrid.tcp.bandwidth_factor")
        positive(self.tcp_gamma, "cluster.network.simgrid.tcp.tcp_gamma")
        if not isinstance(self.crosstraffic, bool):
            raise ConfigError(f"cluster.network.simgrid.tcp.crosstraffic={self.crosstraffic!r}: must be true or false")

    def engine_args(self) -> list[str]:
        """SimGrid command-line settings of this model."""
        args = [f"--cfg=network/model:{self.model}", f"--cfg=network/TCP-gamma:{self.tcp_gamma:.0f}",
                f"--cfg=network/crosstraffic:{int(self.crosstraffic)}"]
        if self.model == "LV08":
            args += [f"--cfg=network/latency-factor:{self.latency_factor!r}",
                     f"--cfg=network/bandwidth-factor:{self.bandwidth_factor!r}"]
        return args


@dataclass(frozen=True)
class Platform:
    """`hosts` hosts (>= 1) behind one switch (module docstring); bandwidths in bytes/s, latencies in s."""

    hosts: int
    bandwidth: float
    latency: float
    switch: str = "star"
    backbone_bandwidth: float | None = None
    backbone_latency: float = 0.0
    tcp: TcpModel = TcpModel()

    def __post_init__(self) -> None:
        if isinstance(self.hosts, bool) or not isinstance(self.hosts, int) or self.hosts < 1:
            raise ConfigError(f"cluster.world_size={self.hosts!r}: a platform needs an integer >= 1 hosts")
        positive(self.bandwidth, "Platform.bandwidth (bytes/s)")
        _non_negative(self.latency, "cluster.network.simgrid.latency_s")
        _non_negative(self.backbone_latency, "cluster.network.simgrid.backbone_latency_s")
        if self.switch not in SWITCHES:
            raise ConfigError(f"cluster.network.simgrid.switch={self.switch!r}: allowed: {', '.join(SWITCHES)}")
        if self.switch == "backbone":
            positive(self.backbone_bandwidth, "Platform.backbone_bandwidth (bytes/s; cluster.network.simgrid.backbone_gbps)")
        elif self.backbone_bandwidth is not None:
            raise ConfigError("cluster.network.simgrid.backbone_gbps: set only with switch=backbone")

    def same_network(self, other: "Platform") -> bool:
        """Whether `other` is this network with at most as many hosts (a star's idle hosts change nothing)."""
        return other.hosts <= self.hosts and _without_hosts(self) == _without_hosts(other)


def _without_hosts(p: Platform) -> tuple:
    return (p.bandwidth, p.latency, p.switch, p.backbone_bandwidth, p.backbone_latency, p.tcp)


def gbps(value: float) -> float:
    """Bytes per second of `value` Gbit/s."""
    return value * 1e9 / 8


def from_cluster(sg: Any, hosts: int) -> Platform:
    """The Platform of a `cluster.network.simgrid` node (a mapping, or the typed config) with `hosts` hosts: the one
    translation of its keys (Gbit/s to bytes/s, the TCP settings), for the trainer, the replay and the benchmarks.
    ConfigError naming the key of a bad value."""
    get = (lambda node, key, default=None: node.get(key, default)) if hasattr(sg, "get") else \
        (lambda node, key, default=None: getattr(node, key, default))
    tcp, backbone = get(sg, "tcp", {}) or {}, get(sg, "backbone_gbps")
    bandwidth = positive(get(sg, "bandwidth_gbps"), "cluster.network.simgrid.bandwidth_gbps")
    if backbone is not None:
        positive(backbone, "cluster.network.simgrid.backbone_gbps")
    return Platform(hosts=hosts, bandwidth=gbps(bandwidth), latency=float(get(sg, "latency_s")),
                    switch=str(get(sg, "switch", "star")),
                    backbone_bandwidth=None if backbone is None else gbps(float(backbone)),
                    backbone_latency=float(get(sg, "backbone_latency_s", 0.0)),
                    tcp=TcpModel(str(get(tcp, "model", "LV08")), float(get(tcp, "latency_factor", 13.01)),
                                 float(get(tcp, "bandwidth_factor", 0.97)), float(get(tcp, "tcp_gamma", 4194304.0)),
                                 bool(get(tcp, "crosstraffic", True))))
