"""Preparing a job on a login node: a run that only prints its ranks' commands (mpi.launch=false,
dist.launch=false) needs neither the device nor the memory of the machines it is for."""
import pytest
import torch

from ssgd.errors import ConfigError
from ssgd.run import build
from tests.conftest import make_cfg

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")


@needs_no_gpu
@pytest.mark.parametrize("overrides", [("backend=torch", "dist.launch=false"), ("backend=mpi", "mpi.launch=false")])
def test_printing_the_commands_needs_no_cuda_device_here(overrides):
    spec = build.spec(make_cfg(*overrides, "device=cuda"))
    assert spec.device == torch.device("cuda")
    build.preflight(spec)


@needs_no_gpu
@pytest.mark.parametrize("overrides", [("backend=torch",), ("backend=mpi",), ("backend=thread",)])
def test_a_run_that_trains_here_still_needs_the_device(overrides):
    with pytest.raises(ConfigError, match="device='cuda': no such CUDA device here"):
        build.spec(make_cfg(*overrides, "device=cuda"))


def test_printing_the_commands_skips_this_hosts_memory_check_but_not_the_data_check(monkeypatch):
    monkeypatch.setattr(build.footprint, "available_bytes", lambda: 1)         # as if this host had no memory
    with pytest.raises(ConfigError, match="memory"):
        build.preflight(build.spec(make_cfg("backend=mpi", "cluster.world_size=8")))
    build.preflight(build.spec(make_cfg("backend=mpi", "mpi.launch=false", "cluster.world_size=8")))
    with pytest.raises(ConfigError):                                          # P x batch > samples: still refused
        build.preflight(build.spec(make_cfg("backend=mpi", "mpi.launch=false", "cluster.world_size=4096",
                                            "trainer.batch_size=512")))
