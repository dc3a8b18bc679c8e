"""The launcher's reachability probe (ssgd.run.reach): what it says about answering and silent hosts.

Only loopback is probed here; a silent host (a link taken down) is tested on the testbed
(tests/testbed/test_faults.py)."""
import socket

import pytest

from ssgd.run import reach


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_a_host_that_refuses_answers():
    assert reach.answers("127.0.0.1", 1.0, closed_port())


def test_a_host_that_accepts_answers():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        assert reach.answers("127.0.0.1", 1.0, s.getsockname()[1])


def test_a_silent_host_is_named_only_beside_answering_ones(monkeypatch):
    up = {"10.0.0.1": True, "10.0.0.2": False, "10.0.0.3": True}
    monkeypatch.setattr(reach, "answers", lambda a, t, p: up[a])
    assert reach.unreachable(["10.0.0.1", "10.0.0.2", "10.0.0.2", "10.0.0.3"]) == ["10.0.0.2"]
    assert reach.stalled_hosts(["10.0.0.1", "10.0.0.2", "10.0.0.3"]) == ["10.0.0.2"]
    up.update({"10.0.0.1": False, "10.0.0.3": False})
    assert reach.stalled_hosts(["10.0.0.1", "10.0.0.2", "10.0.0.3"]) == []     # all silent: a firewall, not a host


def test_hostfile_addresses_follow_by_slot_placement(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("# cluster\n10.98.0.1 slots=2\n\n10.98.0.2   # one slot\nnode3 max_slots=1 slots=3\n")
    assert reach.hostfile_addresses(str(f)) == ["10.98.0.1", "10.98.0.1", "10.98.0.2", "node3", "node3", "node3"]
