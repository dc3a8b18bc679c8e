"""`TorchWorld.close` frees the process group: gloo's worker threads are gone before interpreter shutdown.

Were the group still alive at shutdown, a gloo thread that drops a finished collective's tensors needs the GIL,
is ended by the interpreter and aborts the rank after a complete run (SIGABRT; about 1 run in 20 under torchrun
on 2 busy cores). What kept it alive: `torch.distributed.nn.functional`'s `group=group.WORLD` default
arguments, evaluated when the optimizer's first use of `torch._dynamo` imports that module after
`init_process_group`. Run in a fresh interpreter, so that the import order is the worker's.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT

RANK = r"""
import json, os, sys, time
import torch, torch.distributed as dist
from ssgd.worlds.torch_dist import TorchWorld

def gloo_threads():
    names = []
    for t in os.listdir("/proc/self/task"):
        try:
            names.append(open(f"/proc/self/task/{t}/comm").read().strip())
        except OSError:          # a thread that ended while listed
            pass
    return sorted(n for n in names if "gloo" in n)

def started_gloo_threads(within_s=20.0):
    # the gloo threads, once started and named: a thread names itself after it starts, so a loaded machine
    # may list it a moment later
    end = time.monotonic() + within_s
    while not gloo_threads() and time.monotonic() < end:
        time.sleep(0.05)
    return gloo_threads()

assert "torch._dynamo" not in sys.modules, "the optimizer below must be the first to import torch._dynamo"
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
world = TorchWorld.joined()
opened = started_gloo_threads()
torch.optim.SGD([torch.zeros(3, requires_grad=True)], lr=0.1)   # imports torch._dynamo, as the trainer's does
world.allgather([{"step": 1}])
world.close(together=True)
print(json.dumps({"dynamo": "torch._dynamo" in sys.modules, "opened": opened, "closed": gloo_threads()}))
"""


@pytest.mark.slow
def test_close_joins_the_gloo_threads(tmp_path):
    done = subprocess.run([sys.executable, "-c", RANK, str(tmp_path / "store")], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1",
                                                      "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["dynamo"] and seen["opened"], seen        # the case under test happened: threads, then dynamo
    assert seen["closed"] == [], seen
