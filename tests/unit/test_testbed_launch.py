"""backend=torch across hosts (ssgd.run.launch_torch.host_ranks) and the testbed script's refusals, without a testbed.

host_ranks must place rank r on the hostfile's r-th slot with torchrun's variables (LOCAL_RANK among the ranks on
that host, MASTER_ADDR the first host) and hand the agent one shell command that `exec`s the rank; the testbed
script must refuse bad input and missing rights with one line and exit 2 before it makes anything.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ssgd.errors import ConfigError
from ssgd.run.launch_torch import host_ranks, hostfile_slots

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "testbed" / "testbed.sh"


def cfg(hostfile: Path | None, agent: str | None, P: int):
    return OmegaConf.create({"cluster": {"world_size": P, "hostfile": str(hostfile) if hostfile else None,
                                         "agent": agent}})


def test_hostfile_slots_expand_slots_and_skip_comments(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# the testbed\n10.98.0.1 slots=2\n\n10.98.0.2   # one slot\n")
    assert hostfile_slots(path) == ["10.98.0.1", "10.98.0.1", "10.98.0.2"]


@pytest.mark.parametrize("text", ["a slots=0\n", "a slots=x\n"])
def test_hostfile_slots_refuse_a_bad_count(tmp_path, text):
    (tmp_path / "hosts").write_text(text)
    with pytest.raises(ConfigError, match="line 1: slots="):
        hostfile_slots(tmp_path / "hosts")


def test_host_ranks_place_one_rank_per_slot(tmp_path):
    (tmp_path / "hosts").write_text("h1 slots=2\nh2\nh3\n")
    base = {"OMP_NUM_THREADS": "1", "PYTHONPATH": "/src", "HOME": "/not/forwarded"}
    commands = host_ranks(cfg(tmp_path / "hosts", "my-agent -q", 3), base, tmp_path / "w.yaml", 29555)
    assert [c[:3] for c in commands] == [["my-agent", "-q", "h1"], ["my-agent", "-q", "h1"], ["my-agent", "-q", "h2"]]
    words = [shlex.split(c[3]) for c in commands]
    assert all(w[:2] == ["exec", "env"] and w[-1] == str(tmp_path / "w.yaml") for w in words)
    envs = [dict(x.split("=", 1) for x in w[2:] if "=" in x and not x.startswith("/")) for w in words]
    assert [(e["RANK"], e["LOCAL_RANK"], e["LOCAL_WORLD_SIZE"]) for e in envs] == [("0", "0", "2"), ("1", "1", "2"),
                                                                                 ("2", "0", "1")]
    assert {(e["WORLD_SIZE"], e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs} == {("3", "h1", "29555")}
    assert all(e["PYTHONPATH"] == "/src" and "HOME" not in e for e in envs)


def test_host_ranks_need_both_a_hostfile_and_an_agent(tmp_path):
    (tmp_path / "hosts").write_text("h1\n")
    assert host_ranks(cfg(tmp_path / "hosts", None, 1), {}, tmp_path / "w.yaml", 1) is None
    assert host_ranks(cfg(None, "agent", 1), {}, tmp_path / "w.yaml", 1) is None
    with pytest.raises(ConfigError, match="1 slots for cluster.world_size=2"):
        host_ranks(cfg(tmp_path / "hosts", "agent", 2), {}, tmp_path / "w.yaml", 1)


@pytest.mark.parametrize("args, said", [(["up", "1"], "P=1: must be an integer in 2..64"),
                                        (["up", "4", "fast"], "BW=fast: must be a tc rate"),
                                        (["sideways"], "usage:")])
def test_testbed_script_refuses_bad_input_with_exit_2(args, said):
    proc = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_testbed_script_refuses_without_root_with_exit_2():
    argv = [str(SCRIPT), "up", "2"]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root and setpriv is not installed: cannot drop root to test the refusal")
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and proc.stderr.strip() == \
        "testbed: cannot build the testbed: needs root (network namespaces, veth, bridge, tc); run as root", proc.stderr
