"""`make simgrid-calibrate`: fit SimGrid's platform of the testbed and write it as a `cluster` YAML.

    python -m ssgd.tools.simgrid_calibrate --pingpong outputs/testbed/pingpong.json \
        --allreduce outputs/testbed/calibration/testbed_1gbit.json --bw 1gbit --hosts 4 \
        --out outputs/testbed/simgrid_1gbit.yaml

What SimGrid's LV08 model makes of a message of n bytes on an idle route of the star (docs/simgrid-validation.md):
the route crosses two NIC links (the sender's up, the receiver's down), so it takes

    2 x latency_s x latency_factor + n x share / (bandwidth_factor x bandwidth)

where `share` is 1 for a message alone and `CROSS_TRAFFIC` (1.05) when the reverse direction carries a message
of the same size at once (LV08 charges every flow 5 % of its rate on its reverse route: SimGrid's
`network/crosstraffic`, on by default). The TCP window's cap, tcp_gamma / (2 x route latency), is far above the
fitted rates (39 GB/s at 26.7 us) and plays no part. So, from times alone, only two numbers are identifiable: the
product latency_s x latency_factor and bandwidth_factor (the bandwidth is tc's rate, known). We fix
latency_factor = 1 and fit (`fit`)

  * latency_s: half the median one-way time of the ping-pong's messages of at most `SMALL_MAX` bytes, which
    pass in the token bucket's burst at the host's speed (their time is the latency alone);
  * bandwidth_factor: relative least squares (closed form, linear in 1 / bandwidth_factor) over the ping-pong's
    messages of at least `LARGE_MIN` bytes, one message alone, and the 2-host dense allreduce (a ring:
    2 (P - 1) steps in which both hosts send one chunk each way, share 1.05), measured by bench/testbed_comm.py
    at one size (`--calibration-d`, default 4M elements): every other point of the validation is held out.
The ping-pong's sizes in between pass mostly in the burst, which SimGrid's flow model has no term for.

`load_platform(path)` reads such a file back into a `ssgd.perf.platform.Platform` (bench/testbed_simgrid.py).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ssgd.perf.cost import ring_chunks
from ssgd.perf.platform import Platform, TcpModel, gbps
from ssgd.utils.atomic import full_disk_is_one_line, write_text_atomic

CROSS_TRAFFIC = 1.05          # LV08: a flow loads its reverse route with 5 % of its rate (network/crosstraffic)
SMALL_MAX, LARGE_MIN = 8192, 2 * 2**20
TCP_GAMMA = 4194304.0
CALIBRATION_D = 4 * 2**20


class CalibrationError(ValueError):
    """Inputs the fit cannot use (one line naming the file or key and what is allowed)."""


@dataclass(frozen=True)
class Observation:
    """One measured time and what SimGrid's model charges for it: `messages` route latencies on the critical
    path, `nbytes` bytes on it, each crossing its link with `share` flows' worth of load (1: alone)."""

    messages: float
    nbytes: float
    share: float
    seconds: float
    source: str = ""


@dataclass(frozen=True)
class Fit:
    """The fitted platform parameters (latency_factor fixed at 1) and each observation's relative residual
    (predicted / measured - 1)."""

    latency_s: float
    bandwidth_factor: float
    residuals: tuple[float, ...]
    latency_points: int = 0       # residuals[:latency_points] are the latency observations', the rest the rate ones'

    def predict(self, obs: Observation, rate: float) -> float:
        """SimGrid's time for `obs` on links of `rate` bytes/s with these parameters (module docstring)."""
        return obs.messages * 2 * self.latency_s + obs.nbytes * obs.share / (self.bandwidth_factor * rate)


def pingpong_observations(nbytes: Sequence[float], seconds: Sequence[float], small_max: float = SMALL_MAX,
                          large_min: float = LARGE_MIN) -> tuple[list[Observation], list[Observation]]:
    """The ping-pong's one-way times as (latency observations: messages <= `small_max` bytes, charged no bytes
    since they pass in the burst at the host's speed; rate observations: messages >= `large_min` bytes), one
    message alone each. The sizes in between are left out (module docstring)."""
    if len(nbytes) != len(seconds):
        raise CalibrationError(f"ping-pong: {len(nbytes)} sizes but {len(seconds)} times")
    small = [Observation(1, 0, 1.0, t, f"ping-pong {n:.0f} B") for n, t in zip(nbytes, seconds) if n <= small_max]
    large = [Observation(1, n, 1.0, t, f"ping-pong {n:.0f} B") for n, t in zip(nbytes, seconds) if n >= large_min]
    return small, large


def allreduce_observation(P: int, d: int, seconds: float, itemsize: int = 4) -> Observation:
    """A ring allreduce of `d` elements on `P` hosts (reduce-scatter, then allgather): 2 (P - 1) steps, each the
    largest chunk, every host sending and receiving at once (share `CROSS_TRAFFIC`)."""
    if P < 2 or d < P:
        raise CalibrationError(f"allreduce: P={P}, d={d}: needs P >= 2 and d >= P")
    steps = 2 * (P - 1)
    return Observation(steps, steps * itemsize * max(ring_chunks(d, P)), CROSS_TRAFFIC, seconds,
                       f"dense allreduce P={P} d={d}")


def fit(latency_obs: Sequence[Observation], rate_obs: Sequence[Observation], rate: float) -> Fit:
    """The platform of the observations on links of `rate` bytes/s, in two steps, each robust to the odd slow
    point of a shared machine: latency_s = half the median one-way time of `latency_obs` (single messages whose
    bytes pass in the burst); then bandwidth_factor minimising the squared relative errors of `rate_obs` with
    that latency (closed form: linear in 1 / bandwidth_factor). CalibrationError without a latency observation,
    or a rate observation with bytes, or when no positive factor fits."""
    if not latency_obs or any(o.messages != 1 for o in latency_obs):
        raise CalibrationError(f"fit: {len(latency_obs)} latency observations; needs >= 1, each one message")
    rated = [o for o in rate_obs if o.nbytes > 0 and o.seconds > 0]
    if not rated:
        raise CalibrationError("fit: no rate observation with bytes and a positive time")
    latency = statistics.median(o.seconds for o in latency_obs) / 2
    a = [o.messages * 2 * latency / o.seconds for o in rated]
    c = [o.nbytes * o.share / (rate * o.seconds) for o in rated]
    inv = sum(ci * (1 - ai) for ai, ci in zip(a, c)) / sum(ci * ci for ci in c)
    if not inv > 0 or not math.isfinite(inv):
        raise CalibrationError(f"fit: no positive bandwidth factor fits (1 / factor = {inv:.3g}): the latency "
                               "observations take longer than the rate observations")
    result = Fit(latency, 1.0 / inv, ())
    return Fit(latency, 1.0 / inv, tuple(result.predict(o, rate) / o.seconds - 1 for o in [*latency_obs, *rated]),
               len(latency_obs))


def cluster_yaml(name: str, hosts: int, bw_gbps: float, result: Fit, alphabeta: tuple[float, float],
                 sources: str) -> str:
    """The `cluster` YAML of the fitted platform (conf/cluster/*.yaml's format, engine simgrid)."""
    today = datetime.date.today().isoformat()
    rated = result.residuals[result.latency_points:]
    worst = max((abs(r) for r in rated), default=0.0)
    return (f"# {name}: SimGrid's platform of the testbed, fitted by `make simgrid-calibrate` on {today}\n"
            f"# (ssgd.tools.simgrid_calibrate; docs/simgrid-validation.md) from\n# {sources}.\n"
            f"# Fitted: latency_s (half the median one-way time of {result.latency_points} ping-pong messages "
            "<= 8 KiB)\n"
            f"# and tcp.bandwidth_factor ({len(rated)} observations, largest relative residual {worst:.1%});\n"
            f"# latency_factor held at 1: only its product with latency_s is identifiable.\n"
            f"name: {name}\nworld_size: {hosts}\nnetwork:\n"
            f"  alpha: {alphabeta[0]:.6g}          # the ping-pong's alpha/beta by regime (make alphabeta-testbed)\n"
            f"  beta: {alphabeta[1]:.6g}\n"
            f"  engine: simgrid\n  simgrid:\n"
            f"    bandwidth_gbps: {bw_gbps:g}      # tc's rate\n"
            f"    latency_s: {result.latency_s:.6g}\n    switch: star\n"
            f"    tcp: {{model: LV08, latency_factor: 1.0, bandwidth_factor: {result.bandwidth_factor:.6g}, "
            f"tcp_gamma: {TCP_GAMMA:.0f}}}\n"
            f"hostfile: null\nmpiexec_args: []\n")


def load_platform(path: Path, hosts: int | None = None) -> Platform:
    """The `Platform` of `cluster.network.simgrid` in the cluster YAML at `path` (as `cluster_yaml` writes it,
    or any conf/cluster/*.yaml), with `hosts` hosts (default: its world_size). CalibrationError naming the
    file and key when one is missing; `Platform` checks the values."""
    from omegaconf import OmegaConf

    if not path.is_file():
        raise CalibrationError(f"{path}: no such file (make simgrid-calibrate writes it)")
    cfg = OmegaConf.to_container(OmegaConf.load(path))
    try:
        sg = cfg["network"]["simgrid"]
        tcp = sg.get("tcp", {})
        backbone = sg.get("backbone_gbps")
        return Platform(hosts=hosts or cfg["world_size"], bandwidth=gbps(sg["bandwidth_gbps"]),
                        latency=sg["latency_s"], switch=sg.get("switch", "star"),
                        backbone_bandwidth=None if backbone is None else gbps(backbone),
                        backbone_latency=sg.get("backbone_latency_s", 0.0),
                        tcp=TcpModel(tcp.get("model", "LV08"), tcp.get("latency_factor", 13.01),
                                     tcp.get("bandwidth_factor", 0.97), tcp.get("tcp_gamma", TCP_GAMMA)))
    except (KeyError, TypeError, AttributeError) as err:
        raise CalibrationError(f"{path}: cluster.network.simgrid lacks {err}: needs bandwidth_gbps and latency_s "
                               "(conf/cluster/*.yaml's format)") from None


def allreduce_points(path: Path, calibration_d: int) -> list[Observation]:
    """The dense allreduce rows at P = 2 and d = `calibration_d` of bench/testbed_comm.py's JSON at `path`."""
    rows = _read_json(path).get("rows", [])
    obs = [allreduce_observation(r["P"], r["d"], r["measured_ms"] / 1e3) for r in rows
           if r.get("collective") == "dense_allreduce" and r.get("P") == 2 and r.get("d") == calibration_d]
    if not obs:
        raise CalibrationError(f"{path}: no dense_allreduce row at P=2, d={calibration_d} (run bench/testbed_comm.py "
                               f"--P 2 --sizes {calibration_d})")
    return obs


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CalibrationError(f"{path}: not readable JSON ({err})") from None


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pingpong", type=Path, required=True, help="make alphabeta-testbed's points (pingpong.json)")
    ap.add_argument("--allreduce", type=Path, required=True, help="bench/testbed_comm.py's JSON with dense P=2 rows")
    ap.add_argument("--bw", required=True, help="the testbed's tc rate (1gbit, 10gbit, ...)")
    ap.add_argument("--hosts", type=int, default=4, help="world_size of the written cluster (default %(default)s)")
    ap.add_argument("--calibration-d", type=int, default=CALIBRATION_D,
                    help="d of the dense allreduce rows fitted (default %(default)s = 4M); others are held out")
    ap.add_argument("--name", default="testbed-simgrid", help="the cluster's name (default %(default)s)")
    ap.add_argument("--out", type=Path, required=True, help="the cluster YAML to write")
    return ap


@full_disk_is_one_line
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        rate = tc_rate(args.bw)
        if args.hosts < 2:
            raise CalibrationError(f"--hosts {args.hosts}: must be >= 2")
        pp = _read_json(args.pingpong)
        small, large = pingpong_observations(pp["nbytes"], pp["seconds"])
        large += allreduce_points(args.allreduce, args.calibration_d)
        result, obs = fit(small, large, rate), small + large
    except KeyError as err:
        print(f"error: {args.pingpong}: lacks {err} (make alphabeta-testbed writes them)", file=sys.stderr)
        return 2
    except CalibrationError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for o, r in zip(obs, result.residuals):
        print(f"{o.source:>36}: measured {o.seconds * 1e3:10.4f} ms, SimGrid {result.predict(o, rate) * 1e3:10.4f} ms "
              f"({r:+.1%})")
    print(f"latency_s = {result.latency_s:.4g} s (latency_factor 1), bandwidth_factor = {result.bandwidth_factor:.4f} "
          f"on {args.bw} ({rate * result.bandwidth_factor / 1e6:.1f} MB/s)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sources = f"{args.pingpong.name} and the P=2 dense allreduce at d={args.calibration_d} ({args.allreduce.name})"
    text = cluster_yaml(args.name, args.hosts, rate * 8 / 1e9, result, (pp.get("alpha", 0.0), pp.get("beta", 0.0)),
                        sources)
    write_text_atomic(args.out, text, "the cluster config")
    print(f"wrote {args.out}")
    return 0


def tc_rate(bw: str) -> float:
    """A tc rate ('1gbit', '10gbit', '100mbit', '125mbps') in bytes per second; CalibrationError otherwise."""
    import re

    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([kmgt]?)(bit|bps)", bw.strip().lower())
    if not m:
        raise CalibrationError(f"--bw {bw!r}: not a tc rate such as 1gbit, 10gbit, 100mbit")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)] / \
        (8 if m.group(3) == "bit" else 1)


if __name__ == "__main__":
    sys.exit(main())
