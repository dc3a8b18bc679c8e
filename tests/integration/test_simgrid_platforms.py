"""SimGrid platforms other than the tests' shared one, each in its own process (SimGrid builds one per process):
a shared backbone divides its capacity among the flows that cross it; the shipped clusters' SimGrid values make one
message on an idle route take alpha + n beta of their alpha-beta fit, as their comments say."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
pytest.importorskip("simgrid", reason="SimGrid's Python bindings are not installed (make simgrid)")

SCRIPT = """
import json, sys, torch
from ssgd.comm.base import Collective, Reduced
from ssgd.comm.collectives.dense import DenseAllreduce
from ssgd.comm.executors.simgrid import run_simgrid
from ssgd.comm.ops import Recv, Send
from ssgd.payload import Dense
from ssgd.perf.platform import Platform, TcpModel
spec = json.loads(sys.argv[1])
tcp = TcpModel(**spec.pop("tcp"))
platform = Platform(**spec, tcp=tcp)
class OneMessage(Collective):
    name = "one_message"
    def program(self, rank, P, payload):
        if rank == 0:
            yield Send(1, torch.zeros(int(sys.argv[3]) // 4))
        elif rank == 1:
            yield Recv(0, torch.zeros(int(sys.argv[3]) // 4))
        return Reduced(payload, P)
    def model_seconds(self, net, P, d, counts):
        return 0.0
P, n = int(sys.argv[2]), int(sys.argv[3])
coll = DenseAllreduce() if sys.argv[4] == "dense" else OneMessage()
_, logs = run_simgrid(coll, [Dense(torch.zeros(n // 4)) for _ in range(P)], platform, cpu="none")
print(max(log.clock for log in logs))
"""


def simulate(spec: dict, P: int, nbytes: int, what: str) -> float:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(spec), str(P), str(nbytes), what],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return float(proc.stdout.strip().splitlines()[-1])


NO_FACTORS = {"model": "CM02", "crosstraffic": False}


@pytest.mark.parametrize("P", [2, 4])
def test_a_backbone_divides_its_capacity_among_the_flows_crossing_it(P):
    bw, lat, backbone, n = 125e6, 20e-6, 125e6, 4_000_000
    star = simulate({"hosts": P, "bandwidth": bw, "latency": lat, "tcp": NO_FACTORS}, P, n, "dense")
    shared = simulate({"hosts": P, "bandwidth": bw, "latency": lat, "switch": "backbone", "backbone_bandwidth": backbone,
                       "backbone_latency": 5e-6, "tcp": NO_FACTORS}, P, n, "dense")
    chunk = n / P
    assert star == pytest.approx(2 * (P - 1) * (2 * lat + chunk / bw), rel=1e-9)
    # every ring step's P flows cross the backbone at once: each gets backbone / P (less than its NIC when P > 1)
    assert shared == pytest.approx(2 * (P - 1) * (2 * lat + 5e-6 + chunk / min(bw, backbone / P)), rel=1e-9)


@pytest.mark.parametrize("cluster", ["32x1gbe", "32x10gbe"])
@pytest.mark.parametrize("nbytes", [8, 1_000_000])
def test_a_shipped_clusters_message_on_an_idle_route_is_its_alpha_beta(cluster, nbytes):
    import yaml
    net = yaml.safe_load((ROOT / "conf" / "cluster" / f"{cluster}.yaml").read_text())["network"]
    sg = net["simgrid"]
    spec = {"hosts": 2, "bandwidth": sg["bandwidth_gbps"] * 1e9 / 8, "latency": sg["latency_s"], "tcp": sg["tcp"]}
    seconds = simulate(spec, 2, nbytes, "message")
    assert seconds == pytest.approx(net["alpha"] + nbytes * net["beta"], rel=2e-3)
