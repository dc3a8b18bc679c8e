"""The shared testbed fixture: `testbed`, the P hosts of scripts/testbed/testbed.sh (docs/testbed.md).

Session-scoped; it never builds or removes the testbed: bring it up first (`make testbed-up P=4`, as root; .ci/run
does it when it can). It skips, with the reason, when SSGD_NO_TESTBED=1, when the testbed's files are missing, or
when its namespaces are not all there.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "testbed" / "testbed.sh"
DIR = Path(os.environ.get("SSGD_TESTBED_DIR", ROOT / "outputs" / "testbed"))


@dataclass(frozen=True)
class TestbedHosts:
    __test__ = False    # a fixture's value, not a test class for pytest to collect
    hosts: int          # P
    rate: str           # the links' tc rate, e.g. 1gbit
    hostfile: Path


def read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


@pytest.fixture(scope="session")
def testbed() -> TestbedHosts:
    if os.environ.get("SSGD_NO_TESTBED") == "1":
        pytest.skip("SSGD_NO_TESTBED=1")
    if not (DIR / "env").is_file() or not (ROOT / "conf" / "cluster" / "testbed.yaml").is_file():
        pytest.skip(f"the testbed is not up ({DIR / 'env'} or conf/cluster/testbed.yaml missing): make testbed-up P=4")
    status = subprocess.run([str(SCRIPT), "status"], capture_output=True, text=True, timeout=30)
    if status.returncode != 0:
        pytest.skip(f"the testbed is not up: {status.stdout.strip().splitlines()[-1] if status.stdout else status.stderr}")
    env = read_env(DIR / "env")
    return TestbedHosts(int(env["SSGD_TESTBED_P"]), env["SSGD_TESTBED_BW"], DIR / "hosts")
