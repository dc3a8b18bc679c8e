"""Tab completion (docs/running.md, "Tab completion"): Hydra's bash completion finds the lab's overrides only when
the `python` (or `ssgd-train`) it calls is the project's, i.e. with `.venv` activated (issue 25, item 5).

Each case runs the completion function Hydra installs, in bash, as a TAB after `compressor=gt` would."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent          # the project's interpreter (.venv/bin)
pytestmark = pytest.mark.slow      # every test runs bash and the interpreter as subprocesses

SESSION = """
eval "$(INSTALLER -sc install=bash)"
COMP_LINE=$LINE; COMP_POINT=${#LINE}; read -ra words <<< "$LINE"; COMP_CWORD=$(( ${#words[@]} - 1 ))
hydra_bash_completion 2>/dev/null || true
echo "${COMPREPLY[*]}"
"""


def complete(line: str, path_first: Path, installer: list[str]) -> str:
    """What TAB offers at the end of `line` with `path_first` first on PATH."""
    env = {**os.environ, "PATH": f"{path_first}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT / "src"), "LINE": line}
    script = SESSION.replace("INSTALLER", shlex.join(installer))
    proc = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def no_venv(tmp_path_factory) -> Path:
    """A PATH folder whose `python` is the interpreter the venv was made from (no Hydra): `.venv` not activated."""
    base = Path(sys.base_prefix) / "bin" / "python3"
    if not base.exists() or subprocess.run([str(base), "-c", "import hydra"], capture_output=True).returncode == 0:
        pytest.skip(f"{base}: not a python without Hydra")
    folder = tmp_path_factory.mktemp("bin")
    (folder / "python").symlink_to(base)
    (folder / "ssgd-train").symlink_to("/nonexistent/ssgd-train")   # not installed outside the venv
    return folder


TRAIN = [str(VENV_BIN / "python"), "src/train.py"]


def test_activated_python_src_train_py_completes_overrides():
    assert complete("python src/train.py compressor=gt", VENV_BIN, TRAIN) == "compressor=gtopk"


def test_not_activated_python_src_train_py_completes_nothing(no_venv):
    """The installed function calls whatever `python` is first on PATH, which lacks Hydra here."""
    assert complete("python src/train.py compressor=gt", no_venv, TRAIN) == ""


def test_the_venv_python_by_path_completes_nothing(no_venv):
    """`.venv/bin/python src/train.py` is not `python`: the function then runs `.venv/bin/python -sc query=bash`."""
    assert complete(".venv/bin/python src/train.py compressor=gt", no_venv, TRAIN) == ""


@pytest.mark.skipif(not (VENV_BIN / "ssgd-train").exists(), reason="no ssgd-train entry point in this venv")
def test_ssgd_train_completes_activated_or_by_its_venv_path(no_venv):
    installer = [str(VENV_BIN / "ssgd-train")]
    assert complete("ssgd-train compressor=gt", VENV_BIN, installer) == "compressor=gtopk"
    assert complete(f"{VENV_BIN / 'ssgd-train'} compressor=gt", no_venv, installer) == "compressor=gtopk"
    assert complete("ssgd-train compressor=gt", no_venv, installer) == ""
