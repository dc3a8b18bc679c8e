"""Who a rank is, from fake launcher environments (ssgd.worlds.rendezvous), and the `dist:` config node.

torchrun, srun, Open MPI and MPICH each say it differently; every function here is pure, so every launcher is
tested without one. A missing or malformed variable is one line naming it.
"""
from __future__ import annotations

import pytest

from conftest import make_cfg
from ssgd.run import build
from ssgd.errors import ConfigError
from ssgd.run.launch_torch import describe_exit, rank_env
from ssgd.worlds.rendezvous import (MPI_LOCAL, TORCH_LOCAL, LocalRank, first_host, local_rank, master, rank_device,
                             ranks)

TORCHRUN = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "node01",
            "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"}
SRUN = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0", "SLURM_NODEID": "1",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_JOB_ID": "1234", "SLURM_STEP_NODELIST": "gpu[07-08]"}


def test_torchrun_variables():
    who = ranks(TORCHRUN)
    assert (who.rank, who.size, who.local) == (5, 8, LocalRank(1, 4, "LOCAL_RANK"))
    assert master(TORCHRUN) == ("node01", 29500)


def test_srun_variables_and_the_master_from_the_node_list():
    who = ranks(SRUN)
    assert (who.rank, who.size, who.local) == (3, 4, LocalRank(1, 2, "SLURM_LOCALID"))
    assert master(SRUN) == ("gpu07", 20000 + 1234)                  # derived port: 20000 + job id mod 10000
    assert master(SRUN, port=31000) == ("gpu07", 31000)             # dist.master_port
    assert master({**SRUN, "MASTER_PORT": "12345"}, port=31000) == ("gpu07", 12345)   # the environment wins
    assert master(SRUN, addr="login1") == ("login1", 21234)         # dist.master_addr


def test_torchrun_variables_win_over_slurms():
    """srun + torchrun: torchrun's RANK / LOCAL_RANK describe the process, SLURM's the task that started torchrun."""
    assert ranks({**SRUN, **TORCHRUN}).rank == 5


@pytest.mark.parametrize("env, line", [
    ({}, "backend=torch: no rank in the environment: RANK (torchrun) and SLURM_PROCID (srun) are both unset"),
    ({"RANK": "0"}, "backend=torch: WORLD_SIZE is not set (torchrun or `python src/train.py backend=torch` sets it)"),
    ({"RANK": "0", "WORLD_SIZE": "2"}, "backend=torch: LOCAL_RANK is not set"),
    ({"RANK": "x", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "RANK='x': must be an integer >= 0"),
    ({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "backend=torch: rank 2 is not below the world size 2"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, "backend=torch: SLURM_PROCID is set but SLURM_STEP_ID is not: this is the batch "
     "script itself"),
    ({"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_LOCALID": "0"}, "backend=torch: SLURM_NTASKS is not set (srun "
     "sets it)"),
    ({"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2"}, "backend=torch: SLURM_LOCALID is not set"),
])
def test_a_missing_or_bad_variable_is_named(env, line):
    with pytest.raises(ConfigError) as err:
        ranks(env)
    assert str(err.value).startswith(line) and "\n" not in str(err.value)


@pytest.mark.parametrize("env, line", [
    ({"RANK": "0"}, "backend=torch: no address of rank 0: MASTER_ADDR is not set"),
    ({"MASTER_ADDR": "h"}, "backend=torch: no port of rank 0: MASTER_PORT is not set"),
    ({"MASTER_ADDR": "h", "MASTER_PORT": "http"}, "MASTER_PORT='http': must be an integer >= 1"),
    ({"MASTER_ADDR": "h", "MASTER_PORT": "70000"}, "MASTER_PORT=70000: must be a port number in 1..65535"),
])
def test_a_missing_master_is_named(env, line):
    with pytest.raises(ConfigError, match=line.replace("(", r"\(").replace(")", r"\)")):
        master(env)


@pytest.mark.parametrize("nodelist, first", [
    ("node01", "node01"), ("gpu[07-09,12],cpu01", "gpu07"), ("cpu01,gpu[07-09]", "cpu01"), ("r[1-2]-n[03-04]", "r1-n03"),
    ("a[5]", "a5"), ("x-[001,003]-y", "x-001-y"), ("", None),
])
def test_first_host_of_a_slurm_node_list(nodelist, first):
    assert first_host(nodelist) == first


@pytest.mark.parametrize("env, want", [
    ({"LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4"}, LocalRank(2, 4, "LOCAL_RANK")),
    ({"SLURM_LOCALID": "1", "SLURM_STEP_TASKS_PER_NODE": "4(x2),1", "SLURM_NODEID": "2"}, LocalRank(1, 1, "SLURM_LOCALID")),
    ({"SLURM_LOCALID": "1", "SLURM_TASKS_PER_NODE": "3", "SLURM_NODEID": "0"}, LocalRank(1, 3, "SLURM_LOCALID")),
    ({"SLURM_LOCALID": "0"}, LocalRank(0, None, "SLURM_LOCALID")),
    ({}, None),
])
def test_local_rank_of_torch_ranks(env, want):
    assert local_rank(env, TORCH_LOCAL) == want


@pytest.mark.parametrize("env, want", [
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, LocalRank(3, 4, "OMPI_COMM_WORLD_LOCAL_RANK")),
    ({"MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}, LocalRank(1, 2, "MPI_LOCALRANKID")),            # MPICH (Hydra)
    ({"SLURM_LOCALID": "0"}, None),        # under mpirun in a batch script every rank inherits it: not trusted
])
def test_local_rank_of_mpi_ranks(env, want):
    assert local_rank(env, MPI_LOCAL) == want


def test_one_gpu_per_rank():
    assert rank_device("cpu", LocalRank(3, 4, "LOCAL_RANK"), 0) == "cpu"
    assert rank_device("cuda:1", LocalRank(3, 4, "LOCAL_RANK"), 2) == "cuda:1"           # explicit: kept
    assert [rank_device("cuda", LocalRank(r, 4, "LOCAL_RANK"), 4) for r in range(4)] == [f"cuda:{r}" for r in range(4)]
    assert rank_device("cuda", LocalRank(2, None, "SLURM_LOCALID"), 8) == "cuda:2"
    # the launcher bound one GPU to each rank (srun --gpus-per-task=1): every rank sees its own as cuda:0
    assert rank_device("cuda", LocalRank(3, 4, "SLURM_LOCALID"), 1, visible="5") == "cuda:0"


@pytest.mark.parametrize("local, gpus, line", [
    (LocalRank(0, 4, "LOCAL_RANK"), 2, "device=cuda: 4 ranks on this host but 2 GPU(s): one GPU per rank "
     "(cuda:LOCAL_RANK); start at most 2 ranks per host, or use device=cpu"),
    (LocalRank(2, None, "SLURM_LOCALID"), 2, "device=cuda: local rank 2 on this host but 2 GPU(s)"),
    (LocalRank(0, 1, "LOCAL_RANK"), 0, "device=cuda: no CUDA device on this host"),
    (LocalRank(1, 2, "OMPI_COMM_WORLD_LOCAL_RANK"), 1, "device=cuda: 2 ranks on this host but 1 GPU(s)"),
])
def test_fewer_gpus_than_local_ranks_is_one_line(local, gpus, line):
    """Every rank of the host fails alike when the local size is known (rank 0 too), so none waits for the others."""
    with pytest.raises(ConfigError) as err:
        rank_device("cuda", local, gpus, visible="0,1" if gpus else None)
    assert str(err.value).startswith(line) and "\n" not in str(err.value)


def test_the_local_launcher_sets_torchruns_variables():
    env = rank_env({"PATH": "/bin"}, 2, 4, 29511)
    assert ranks(env).rank == 2 and ranks(env).local == LocalRank(2, 4, "LOCAL_RANK")
    assert master(env) == ("127.0.0.1", 29511) and env["PATH"] == "/bin"
    assert describe_exit(3) == "exited with status 3" and describe_exit(-9) == "was killed by signal 9 (SIGKILL)"


# -- the `dist:` node ----------------------------------------------------------------------------------
def test_dist_keys_and_defaults():
    spec = build.spec(make_cfg("backend=torch"))
    d = spec.config.dist
    assert (d.backend.value, d.timeout_s, d.master_addr, d.master_port, d.launch) == ("auto", 300.0, None, None, True)


@pytest.mark.parametrize("overrides, line", [
    (["backend=torch", "dist.backend=nccl"], "dist.backend=nccl needs device=cuda (NCCL moves CUDA tensors only; "
     "device=cpu); use dist.backend=gloo or auto for CPU tensors"),
    (["dist.timeout_s=0"], "dist.timeout_s=0.0: must be a finite number > 0 (seconds)"),
    (["dist.master_port=70000"], "dist.master_port=70000: must be a port number in 1..65535 or null"),
])
def test_bad_dist_values_are_one_line(overrides, line):
    with pytest.raises(ConfigError) as err:
        build.spec(make_cfg(*overrides))
    assert str(err.value) == line


def test_process_group_backend_choice():
    from ssgd.worlds.torch_dist import process_group_backend

    assert process_group_backend("auto", "cpu") == "gloo" and process_group_backend("auto", "cuda:1") == "nccl"
    assert process_group_backend("gloo", "cuda:0") == "gloo"          # CUDA tensors staged through the host
