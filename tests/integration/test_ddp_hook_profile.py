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
