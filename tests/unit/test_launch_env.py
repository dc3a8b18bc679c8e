"""backend=mpi launcher: single-host Open MPI settings only on one host; `mpi.mpiexec` picks the launcher.

The decision is a pure function of the environment, so every batch system is tested here without one.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ssgd.errors import ConfigError
from ssgd.run.launch_mpi import (MULTI_HOST_VARIABLES, mpiexec_command, mpiexec_path, multi_host_reason,
                         single_host_settings, worker_env)

LOCAL = {"OMPI_MCA_btl": "self,sm", "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe"}


def test_a_plain_shell_is_one_host():
    assert multi_host_reason({"HOME": "/root", "PATH": "/usr/bin"}) is None
    assert single_host_settings({"PATH": "/usr/bin"}) == LOCAL


@pytest.mark.parametrize("nodes_var", ["SLURM_JOB_NUM_NODES", "SLURM_NNODES"])
def test_a_single_node_slurm_allocation_keeps_the_fast_local_settings(nodes_var):
    env = {"SLURM_JOB_ID": "42", nodes_var: "1"}
    assert multi_host_reason(env) is None
    assert single_host_settings(env) == LOCAL


@pytest.mark.parametrize("nodes_var", ["SLURM_JOB_NUM_NODES", "SLURM_NNODES"])
def test_a_multi_node_slurm_allocation_forces_nothing(nodes_var):
    env = {"SLURM_JOB_ID": "42", nodes_var: "4"}
    assert multi_host_reason(env) == "SLURM job 42 on 4 nodes"
    assert single_host_settings(env) == {}


@pytest.mark.parametrize("nodes", [None, "", "2-4", "x"])
def test_a_slurm_allocation_of_unknown_size_counts_as_several_hosts(nodes):
    env = {"SLURM_JOB_ID": "7"} | ({} if nodes is None else {"SLURM_NNODES": nodes})
    assert "unknown number of nodes" in multi_host_reason(env)
    assert single_host_settings(env) == {}


def test_slurm_variables_without_a_job_id_are_not_an_allocation():
    assert multi_host_reason({"SLURM_NNODES": "8"}) is None     # e.g. left over in a login shell


@pytest.mark.parametrize("name", MULTI_HOST_VARIABLES)
def test_every_batch_system_or_hostfile_variable_means_several_hosts(name):
    env = {name: "/var/spool/hosts"}
    assert multi_host_reason(env) == f"{name} is set"
    assert single_host_settings(env) == {}
    assert multi_host_reason({name: ""}) is None                  # set but empty: nothing detected


def test_a_hostfile_wins_even_inside_a_single_node_allocation():
    env = {"SLURM_JOB_ID": "42", "SLURM_NNODES": "1"}
    assert multi_host_reason(env, hostfile="hosts.txt") == "hostfile hosts.txt"
    assert single_host_settings(env, hostfile="hosts.txt") == {}


def test_a_value_the_user_set_is_kept():
    assert single_host_settings({"OMPI_MCA_btl": "self,tcp"}) == {
        "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe"}
    env = worker_env(local=True, environ={"OMPI_MCA_btl": "self,tcp"})
    assert env["OMPI_MCA_btl"] == "self,tcp"


def test_worker_env_applies_the_decision():
    assert {k: worker_env(local=True, environ={})[k] for k in LOCAL} == LOCAL
    multi = worker_env(local=True, environ={"SLURM_JOB_ID": "9", "SLURM_JOB_NUM_NODES": "2"})
    assert not set(LOCAL) & set(multi)
    assert not set(LOCAL) & set(worker_env(local=False, environ={}))    # the caller gives a hostfile
    single = worker_env(local=True, environ={"SLURM_JOB_ID": "9", "SLURM_JOB_NUM_NODES": "1"})
    assert single["OMP_NUM_THREADS"] == "1" and single["OMPI_MCA_btl"] == "self,sm"


def _cfg(mpiexec):
    return OmegaConf.create({"cluster": {"world_size": 3, "hostfile": None, "mpiexec_args": ["--bind-to", "none"]},
                             "mpi": {"launch": True, "mpiexec": mpiexec}})


def test_mpiexec_defaults_to_the_venvs_own():
    argv = mpiexec_command(_cfg(None), Path("w.yaml"))
    assert argv[0] == mpiexec_path() and argv[1:3] == ["-n", "3"]
    assert argv[3:5] == ["--bind-to", "none"] and argv[-1] == "w.yaml"


def test_mpi_mpiexec_names_the_launcher_with_its_own_arguments(tmp_path):
    launcher = tmp_path / "site mpirun"          # a path with a space, quoted as a user would
    launcher.write_text("#!/bin/sh\n")
    launcher.chmod(0o755)
    argv = mpiexec_command(_cfg(f"'{launcher}' --mca btl tcp,self"), Path("w.yaml"))
    assert argv[:6] == [str(launcher), "--mca", "btl", "tcp,self", "-n", "3"]
    assert argv[6:] == ["--bind-to", "none", sys.executable, "-m", "mpi4py", "-m", "ssgd.run.worker", "mpi", "w.yaml"]


def test_mpi_mpiexec_found_on_path():
    assert mpiexec_path("sh") == shutil.which("sh")


def test_a_missing_mpi_mpiexec_is_one_clear_error():
    with pytest.raises(ConfigError, match=r"mpi\.mpiexec='no-such-mpirun': no such executable"):
        mpiexec_command(_cfg("no-such-mpirun -x FOO"), Path("w.yaml"))
