"""Start-up (ssgd.run.startup): bad input is refused before torch is imported, and `--profile` lists the phases."""
import json
import os
import subprocess
import sys

import pytest

from ssgd.errors import ConfigError
from ssgd.run.startup import Phases, check_before_imports, check_paths, take_profile_flag
from tests.conftest import ROOT, make_cfg


@pytest.mark.parametrize("overrides, message", [
    (["+foo=1"], "foo: unknown key"),
    (["compressor.density=2"], "compressor.density=2"),
    (["trainer.batch_size=0"], "trainer.batch_size=0"),
    (["dataset=cifar10", "dataset.data_dir=/no/such/dir"], "dataset.data_dir='/no/such/dir': no such directory"),
])
def test_bad_input_is_refused_by_the_checks_before_the_imports(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("+", r"\+")):
        check_before_imports(make_cfg(*overrides))


def test_an_existing_data_dir_and_the_embedded_data_pass(tmp_path):
    check_paths(make_cfg("dataset=cifar10", f"dataset.data_dir={tmp_path}"))
    assert check_before_imports(make_cfg()).cluster.world_size >= 1


@pytest.mark.slow
def test_the_checks_import_no_torch():
    code = ("import json, sys\nfrom hydra import compose, initialize_config_dir\nfrom ssgd.run.startup import "
            "check_before_imports\nfrom ssgd.config import conf_dir\nwith initialize_config_dir(config_dir=str(conf_dir()), "
            "version_base='1.3'):\n    cfg = compose('config', ['compressor.density=2'])\ntry:\n    check_before_imports(cfg)\n"
            "except ValueError as err:\n    print(json.dumps([str(err), 'torch' in sys.modules]))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert proc.returncode == 0, proc.stderr
    message, torch_loaded = json.loads(proc.stdout)
    assert "compressor.density=2" in message and torch_loaded is False


def test_take_profile_flag_removes_every_copy():
    argv = ["train.py", "--profile", "seed=2", "--profile"]
    assert take_profile_flag(argv) and argv == ["train.py", "seed=2"]
    assert not take_profile_flag(argv) and argv == ["train.py", "seed=2"]


def test_phases_line_lists_each_phase_and_the_total():
    p = Phases()
    p.durations = [("compose", 0.5)]
    p.mark("checks")
    line = p.line()
    assert line.startswith("profile: compose 0.50 s | checks ") and line.endswith(" s")
    assert "total" in line


@pytest.mark.slow
def test_train_py_profile_prints_the_phases_of_a_refused_run():
    proc = subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), "--profile", "compressor.density=2"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert any("compressor.density=2" in line and line.startswith("error:") for line in lines), lines
    assert lines[-1].startswith("profile: ") and "compose" in lines[-1] and "total" in lines[-1]
