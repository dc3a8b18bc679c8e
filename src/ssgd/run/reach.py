"""Which hosts of a job the launcher can still reach: the host to name when a multi-host job stalls.

A host whose link is down (or whose machine is gone) leaves every rank alive and blocked in a
collective, so neither the ranks nor their exit statuses say which one failed. The launcher asks the
network instead: a TCP connect to each host's address on a port nobody listens on. A reachable host
answers at once, with a reset (connection refused) or an accept; an unreachable one does not answer
within `timeout_s`. The probe sends one SYN per host, to the job's own hosts only (their addresses
from the hostfile), and needs no listener on them.

A host behind a firewall that drops, instead of rejecting, looks unreachable too; `stalled_hosts`
therefore names hosts only when some answered and some did not.
"""
from __future__ import annotations

import errno
import socket
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

PROBE_PORT = 9          # discard: nothing listens there on a compute host; a refusal proves the host is up


def answers(address: str, timeout_s: float = 2.0, port: int = PROBE_PORT) -> bool:
    """True when `address` answers a TCP connect on `port` within timeout_s (refused counts: it answered)."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return True
    except ConnectionRefusedError:
        return True
    except OSError as e:
        return e.errno in (errno.ECONNREFUSED, errno.ECONNRESET)


def unreachable(addresses: Sequence[str], timeout_s: float = 2.0, port: int = PROBE_PORT) -> list[str]:
    """The addresses (in the given order, duplicates once) that do not answer within timeout_s, probed at once."""
    unique = list(dict.fromkeys(addresses))
    if not unique:
        return []
    with ThreadPoolExecutor(max_workers=min(32, len(unique))) as pool:
        ok = list(pool.map(lambda a: answers(a, timeout_s, port), unique))
    return [a for a, up in zip(unique, ok) if not up]


def stalled_hosts(addresses: Sequence[str], timeout_s: float = 2.0, port: int = PROBE_PORT) -> list[str]:
    """`unreachable`, or [] when none or every host failed to answer (then the probe tells nothing)."""
    lost = unreachable(addresses, timeout_s, port)
    return lost if len(lost) < len(dict.fromkeys(addresses)) else []


def silent_hosts_note(hosts: Sequence[str] | None, timeout_s: float = 2.0) -> str:
    """'' or '; host H (rank r) does not answer on the network (...)' for the hosts of a multi-host job
    (`hosts[r]`: rank r's host) that `stalled_hosts` finds silent: the launchers' words for a downed link."""
    if not hosts or len(set(hosts)) < 2:
        return ""
    lost = stalled_hosts(hosts, timeout_s)
    if not lost:
        return ""
    named = ", ".join(f"{h} (rank {', '.join(str(r) for r, x in enumerate(hosts) if x == h)})" for h in lost)
    return f"; host {named} does not answer on the network (its link is down or it is gone)"


def hostfile_addresses(path: str) -> list[str]:
    """Hosts of an Open MPI hostfile, one per slot, in rank order (by-slot placement: a host's `slots=n`
    ranks come before the next host's). Comments and blank lines are skipped."""
    out: list[str] = []
    with open(path) as f:
        for line in f:
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            slots = next((int(w.split("=", 1)[1]) for w in words[1:] if w.startswith("slots=")), 1)
            out += [words[0]] * max(slots, 1)
    return out
