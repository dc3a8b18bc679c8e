"""The package as a library user gets it: a wheel built from this checkout, installed into a fresh venv
outside the checkout, runs `ssgd-train`, `python -m ssgd`, the DDP and FSDP examples and `ssgd.ddp.register`.

The venv reuses the dependencies already installed for the tests (a `.pth` line to their site-packages;
`.pth` files inside it are not processed, so this checkout's editable install stays invisible): nothing
is downloaded, and `ssgd` is imported from the wheel only, which the test checks first.
"""
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"               # a copy, so that the build writes nothing into the checkout
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns(
        "__pycache__", "*.egg-info", "_gtopk_merge-*", "_ssgd_native-*"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(base / "dist"), str(source)], capture_output=True, text=True, timeout=300,
                           cwd=base)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next((base / "dist").glob("ssgd-*.whl"))
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "deps-of-the-tests.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    inst = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert inst.returncode == 0, inst.stderr[-2000:]
    work = base / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}", WANDB_MODE="offline", WANDB_SILENT="true")
    return py, env_dir, work, env


def run(args, installed, timeout=300):
    py, env_dir, work, env = installed
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=work, env=env)


def test_ssgd_comes_from_the_wheel_with_its_configs_and_merge_source(installed):
    py, env_dir, _, _ = installed
    code = ("import ssgd, ssgd.config as c, ssgd.native as n; print(ssgd.__file__); "
            "print(','.join(c.compressor_names())); print(all(s.is_file() for s in n.SOURCES))")
    proc = run([str(py), "-c", code], installed)
    assert proc.returncode == 0, proc.stderr
    where, names, source = proc.stdout.split()
    assert Path(where).resolve().is_relative_to(env_dir.resolve()), where
    assert {"dense", "topk", "gtopk", "gaussiank"} <= set(names.split(","))
    assert source == "True"


@pytest.mark.parametrize("entry", [["ssgd-train"], ["python", "-m", "ssgd"]])
def test_the_console_scripts_train_outside_the_checkout(installed, entry):
    _, env_dir, work, _ = installed
    argv = [str(env_dir / "bin" / entry[0]), *entry[1:]]
    proc = run(argv + ["trainer.max_steps=5", f"hydra.run.dir={work / entry[-1]}"], installed)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (work / entry[-1] / "summary.json").is_file()
    assert (work / entry[-1] / "train.log").is_file()
    bad = run(argv + ["compressor.density=2"], installed)
    assert bad.returncode == 2 and "compressor.density=2" in bad.stderr, bad.stderr


def test_register_and_the_ddp_example_from_the_wheel(installed):
    py, env_dir, work, _ = installed
    code = """
import torch, torch.distributed as dist
store = dist.HashStore()
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
import ssgd, ssgd.ddp
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(50, 4))
hook = ssgd.ddp.register(model, compressor="gtopk", density=0.1)
model(torch.randn(8, 50)).sum().backward()
assert all(p.grad is not None for p in model.parameters())
print("ok")
"""
    proc = run([str(py), "-c", code], installed)
    assert proc.returncode == 0, proc.stderr[-3000:]
    example = work / "ddp_gtopk.py"
    shutil.copy(ROOT / "examples" / "ddp_gtopk.py", example)       # copied out: no checkout to fall back on
    proc = run([str(env_dir / "bin" / "python"), "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                str(example), "--steps", "10"], installed, timeout=400)
    assert proc.returncode == 0, proc.stdout[-1000:] + proc.stderr[-3000:]


def test_the_fsdp_example_from_the_wheel(installed):
    """examples/fsdp_topk.py under torchrun, 2 gloo ranks on CPU, importing `ssgd.fsdp` from the wheel."""
    py, env_dir, work, _ = installed
    example = work / "fsdp_topk.py"
    shutil.copy(ROOT / "examples" / "fsdp_topk.py", example)       # copied out: no checkout to fall back on
    assert not (work.parent / "src").exists()                       # the example's checkout path leads nowhere
    proc = run([str(py), "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                str(example), "--compressor", "topk", "--density", "0.01", "--steps", "10"], installed, timeout=400)
    assert proc.returncode == 0, proc.stdout[-1000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("topk density 0.01 on 2 ranks (fsdp, gloo): validation accuracy "), proc.stdout
    sent = int(last.split("; ")[1].split(" bytes")[0].replace(",", ""))
    assert 0 < sent < 10 * 4 * 199_210 // 2 // 10, last             # sparse: under a tenth of FSDP's fp32 bytes
