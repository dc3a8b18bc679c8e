"""bench/ddp_hook_profile.py: one short round on 2 gloo ranks prints every part of the hook's step, and bad
arguments are one-line errors (exit status 2)."""
import os
import re
import subprocess
import sys

import pytest

from tests.bench_modules import BENCH, load

PARTS = ("collective_b0", "collective_b1", "compress", "decode", "queue_wait_b0", "queue_wait_b1", "settle")


@pytest.mark.parametrize("argv", [["--steps", "5"], ["--rounds", "0"], ["--density", "0"]])
def test_bad_arguments_exit_2_with_one_line(argv, capsys):
    with pytest.raises(SystemExit) as err:
        load("ddp_hook_profile").main(argv)
    assert err.value.code == 2
    assert argv[0] in capsys.readouterr().err.strip().splitlines()[-1]


def test_cpu_per_step_by_kind_of_thread():
    """Two snapshots by hand: each thread's CPU goes to its kind, per step; a thread born in between counts from
    zero; one gone by the second snapshot is not counted."""
    cpu_per_step = load("ddp_hook_profile").cpu_per_step
    before = {1: ("python", 10_000_000), 2: ("python", 0), 3: ("gloo_tcp_loop", 4_000_000), 9: ("python", 5)}
    after = {1: ("python", 30_000_000), 2: ("python", 8_000_000), 3: ("gloo_tcp_loop", 6_000_000),
             4: ("pt_gloo_runloop", 2_000_000), 5: ("python", 1_000_000)}
    got = cpu_per_step(before, after, steps=2, main=1, comm={2})
    assert got == {"main": 10.0, "comm": 4.0, "gloo": 2.0, "other": 0.5}


def test_thread_cpu_ns_sees_a_busy_thread():
    """A thread that spins for 0.1 s of its own CPU (time.thread_time) shows 0.1 s more between two snapshots."""
    import threading
    import time

    bench = load("ddp_hook_profile")
    go, done, release = threading.Event(), threading.Event(), threading.Event()

    def spin() -> None:
        go.wait()
        until = time.thread_time() + 0.1
        while time.thread_time() < until:
            pass
        done.set()
        release.wait()                                  # alive until the second snapshot

    t = threading.Thread(target=spin)
    t.start()
    before = bench.thread_cpu_ns()
    go.set()
    done.wait()
    after = bench.thread_cpu_ns()
    release.set()
    t.join()
    spent = after[t.native_id][1] - before[t.native_id][1]
    assert 0.1e9 <= spent < 0.15e9, spent


@pytest.mark.slow
def test_one_round_reports_every_part_of_the_hooks_step():
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(BENCH / "ddp_hook_profile.py"), "--rounds", "1", "--steps", "8", "--hooks", "allreduce",
                           "gtopk"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(s for s in proc.stdout.splitlines() if s.startswith("round 0 gtopk:"))
    assert re.search(r"step [\d.]+ ms, [\d.]+x allreduce", line), line
    spent = dict(re.findall(r"(\w+) ([\d.]+)(?:,|$)", line.split("hook ms per step: ")[1]))
    assert set(spent) == set(PARTS) and all(float(v) >= 0 for v in spent.values()), line
    assert float(spent["compress"]) > 0 and float(spent["collective_b1"]) > 0
    assert "load average" in proc.stdout
    cpu = next(s for s in proc.stdout.splitlines() if s.startswith("round 0 gtopk: cpu ms per step:"))
    kinds = dict(re.findall(r"(\w+) ([\d.]+)(?:,|$)", cpu.split("cpu ms per step: ")[1]))
    assert set(kinds) == {"main", "comm", "gloo", "other"} and float(kinds["comm"]) > 0, cpu
    plain = next(s for s in proc.stdout.splitlines() if s.startswith("round 0 allreduce: cpu ms per step:"))
    assert " comm 0.00" in plain, plain                     # plain DDP has no communication thread
