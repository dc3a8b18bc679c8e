"""A sweep lands in one folder: the sweeping process hands its resolved hydra.sweep.dir to its job processes.

The end-to-end check (a submitit_local sweep with the default sweep dir leaves one folder) is
tests/integration/test_submitit_local.py; these pin the two pieces it rests on.
"""
import os
import subprocess
import sys

from omegaconf import OmegaConf

from ssgd.run import rundir


def test_sweep_dir_resolver_prefers_the_sweeping_process(monkeypatch):
    monkeypatch.delenv(rundir.SWEEP_DIR_ENV, raising=False)
    cfg = OmegaConf.create({"dir": "${ssgd_sweep_dir:multirun/a-${ssgd_unique:}}"})
    assert cfg.dir == f"multirun/a-{rundir.unique()}"
    monkeypatch.setenv(rundir.SWEEP_DIR_ENV, "/sweeps/one")
    assert OmegaConf.create({"dir": "${ssgd_sweep_dir:multirun/b}"}).dir == "/sweeps/one"


def test_multirun_start_exports_the_folder_to_child_processes(tmp_path, monkeypatch):
    monkeypatch.delenv(rundir.SWEEP_DIR_ENV, raising=False)
    sweep = tmp_path / "sweep"
    cfg = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}, "trainer": {"resume": None}})
    callback = rundir.RunDirectory()
    callback.on_multirun_start(cfg)
    child = subprocess.run([sys.executable, "-c", f"import os; print(os.environ['{rundir.SWEEP_DIR_ENV}'])"],
                           capture_output=True, text=True, check=True)
    assert child.stdout.strip() == str(sweep.resolve())
    callback.on_multirun_end(cfg)
    assert rundir.SWEEP_DIR_ENV not in os.environ      # a later run in this process draws its own folder
