"""Runs that never lie, in-process: resume, divergence, stop requests, run directories, preflight checks,
wandb without credentials, the sweep report and the MPI launcher's stderr filter (docs/faults.md).

The cases that need a process of their own (signals, MPI, Hydra's callbacks, exit statuses) are in
tests/integration/test_faults.py; bad config values are in tests/unit/test_schema.py."""
from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from hydra.core.utils import JobReturn, JobStatus
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from conftest import make_cfg
from ssgd.run import build, rundir
from ssgd.loop.checkpoint import FILENAME
from ssgd.errors import ConfigError, Interrupted
from ssgd.run.launch_mpi import OpenMPIFilter
from ssgd.loop.schedule import LRSchedule
from ssgd.loop.stop import StopRequest, exit_status
from ssgd.run.sweep import ERROR_FILE, PointFailed, SweepReport, record_failure
from ssgd.utils.metrics import MetricWriter

# 10 steps per epoch (4,000 digits / (3 x 128)), dropout on: a resume must be bitwise
RUN = ["compressor=gtopk", "cluster.world_size=3", "model.dropout=0.3", "trainer.batch_size=128",
       "trainer.epochs=2", "trainer.eval_every=1"]
TIMING = ("wall_s", "throughput/here")    # wall-clock fields of a summary (throughput/target is not one)


def fit(run_dir: Path, *overrides: str, stop_at: int | None = None) -> dict:
    """Build and train in-process; `stop_at`: a SIGTERM arrives during that step (as from a scheduler)."""
    stop = StopRequest()
    trainer, writer, world = build.trainer(make_cfg(*overrides), run_dir, stop=stop)
    if stop_at is not None:
        step = trainer.step

        def stepping(it: int, density: float) -> dict:
            if trainer.step_count + 1 == stop_at:
                stop.request(signal.SIGTERM)
            return step(it, density)

        trainer.step = stepping
    try:
        return trainer.fit()
    finally:
        world.close()
        writer.close()


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def params(run_dir: Path) -> list[torch.Tensor]:
    return torch.load(run_dir / FILENAME, weights_only=False)["shared"]["params"]


# -- 1. a resumed run reports what the uninterrupted run reports -------------------------------------
@pytest.mark.parametrize("how", ["sigterm", "killed"])
def test_a_resumed_run_equals_the_uninterrupted_run(how, tmp_path):
    """Stopped by SIGTERM in step 5 (checkpoint at its end), or killed after step 5 with the last
    step checkpoint at step 4 (simulated: max_steps=5); then `trainer.resume=auto` in the same directory."""
    straight = fit(tmp_path / "straight", *RUN, "trainer.checkpoint_every=2")
    run = tmp_path / "stopped"
    if how == "sigterm":
        with pytest.raises(Interrupted) as stopped:
            fit(run, *RUN, stop_at=5)
        assert stopped.value.status == 143 and stopped.value.step == 5
        assert "interrupted by SIGTERM at step 5" in str(stopped.value) and not (run / "summary.json").exists()
    else:
        fit(run, *RUN, "trainer.max_steps=5", "trainer.checkpoint_every_steps=2")
        assert [r["step"] for r in records(run) if "train/loss" in r] == [1, 2, 3, 4, 5]
    resumed = fit(run, *RUN, "trainer.checkpoint_every=2", "trainer.resume=auto")

    assert all(torch.equal(a, b) for a, b in zip(params(tmp_path / "straight"), params(run)))
    assert resumed.keys() == straight.keys()
    for key in straight:
        if not key.startswith("time/") and key not in TIMING:
            assert resumed[key] == straight[key], key          # density/scheduled, comm/bytes_sent, val/acc ...
    rows, ref = records(run), records(tmp_path / "straight")
    train = [r for r in rows if "train/loss" in r]
    assert [r["step"] for r in train] == list(range(1, 21))    # every step logged once
    assert [(r["step"], r["val/acc"]) for r in rows if "val/acc" in r] == \
        [(r["step"], r["val/acc"]) for r in ref if "val/acc" in r]
    assert [r["train/loss"] for r in train] == [r["train/loss"] for r in ref if "train/loss" in r]
    for key in (k for k in straight if k.startswith("time/")):  # means over every step, both processes
        assert resumed[key] == pytest.approx(sum(r[key] for r in train) / len(train), rel=1e-9), key


@pytest.mark.slow      # real wandb: its service is a subprocess
def test_a_resumed_run_continues_its_wandb_run(tmp_path):
    with pytest.raises(Interrupted):
        fit(tmp_path, *RUN, "trainer.max_steps=4", "wandb.mode=offline", stop_at=2)
    saved = torch.load(tmp_path / FILENAME, weights_only=False)["shared"]["run"]["wandb_id"]
    fit(tmp_path, *RUN, "trainer.max_steps=4", "wandb.mode=offline", "trainer.resume=auto")
    runs = sorted(p.name for p in (tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(name.endswith(f"-{saved}") for name in runs)


# -- 2. divergence ------------------------------------------------------------------------------------
def test_a_diverged_run_keeps_its_last_good_checkpoint(tmp_path):
    """The issue's repro: dense, lr 30, a checkpoint every epoch (7 steps at P = 4 x 256)."""
    summary = fit(tmp_path, "compressor=dense", "optimizer.lr=30", "trainer.batch_size=256", "trainer.epochs=6",
                  "trainer.checkpoint_every=1")
    saved = torch.load(tmp_path / FILENAME, weights_only=False)["shared"]
    assert summary["diverged_at_step"] > saved["step"] > 0
    assert all(bool(torch.isfinite(p).all()) for p in saved["params"])


def test_non_finite_weights_are_never_checkpointed(tmp_path):
    trainer, writer, world = build.trainer(make_cfg("trainer.max_steps=2", "trainer.checkpoint_every_steps=1"),
                                           tmp_path)
    try:
        trainer.fit()
        before = (tmp_path / FILENAME).read_bytes()
        with torch.no_grad():
            trainer.params[0][0, 0] = math.inf
        assert trainer._checkpoint() is None and trainer.diverged_at == 2
        assert (tmp_path / FILENAME).read_bytes() == before
    finally:
        world.close()
        writer.close()


finite = st.floats(min_value=0, max_value=1e300, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(lr=finite, P=st.integers(1, 10_000), warmup_epochs=finite, warmup_start=st.none() | finite,
       milestones=st.lists(st.floats(-1e6, 1e6), max_size=4), gamma=finite,
       t=st.floats(min_value=0, max_value=1e7, allow_nan=False))
def test_every_accepted_schedule_gives_a_finite_learning_rate(lr, P, warmup_epochs, warmup_start, milestones,
                                                               gamma, t):
    try:
        schedule = LRSchedule(lr=lr, world_size=P, warmup_epochs=warmup_epochs, warmup_start=warmup_start,
                              milestones=milestones, gamma=gamma)
    except ValueError:
        return                                  # refused up front: the case src/train.py reports as one line
    value = schedule(t)
    assert math.isfinite(value) and value >= 0


# -- 3. stop requests -----------------------------------------------------------------------------------
def test_a_second_signal_stops_at_once_and_statuses_follow_the_shell():
    stop = StopRequest()
    stop.handle(signal.SIGINT)
    assert stop.signum == signal.SIGINT
    with pytest.raises(Interrupted, match="twice") as again:
        stop.handle(signal.SIGINT)
    assert again.value.status == 130 and again.value.checkpoint is None
    assert [exit_status(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)] == \
        [143, 130, 143, 130]


def test_step_checkpoints_resume_inside_an_epoch(tmp_path):
    fit(tmp_path / "a", *RUN, "trainer.max_steps=7", "trainer.checkpoint_every_steps=3")
    saved = torch.load(tmp_path / "a" / FILENAME, weights_only=False)["shared"]
    assert (saved["step"], saved["epoch"]) == (6, 0)                 # inside the first epoch of 10 steps


# -- 5. one run, one directory ------------------------------------------------------------------------
def test_a_run_directory_takes_one_run(tmp_path):
    rundir.check_run_dir(tmp_path / "new", None, False)              # created
    (tmp_path / "new" / ".hydra").mkdir()
    (tmp_path / "new" / "train.log").touch()                         # Hydra's, empty
    rundir.check_run_dir(tmp_path / "new", None, False)
    (tmp_path / "new" / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(ConfigError, match=r"hydra.run.dir=.*new: already holds a run \(metrics.jsonl\)"):
        rundir.check_run_dir(tmp_path / "new", None, False)
    rundir.check_run_dir(tmp_path / "new", "auto", False)
    rundir.check_run_dir(tmp_path / "new", str(tmp_path / "new" / FILENAME), False)
    with pytest.raises(ConfigError, match="already holds a run"):   # weights only: a new run
        rundir.check_run_dir(tmp_path / "new", str(tmp_path / "new" / FILENAME), True)
    with pytest.raises(ConfigError, match="already holds a run"):   # a checkpoint elsewhere: a new directory
        rundir.check_run_dir(tmp_path / "new", str(tmp_path / "other" / FILENAME), False)


def test_a_directory_that_cannot_be_written_is_one_line(tmp_path):
    if os.geteuid() == 0:                    # root writes through permissions: use a file system that refuses
        target = Path("/sys/ssgd-run")
    else:
        (tmp_path / "ro").mkdir(mode=0o555)
        target = tmp_path / "ro" / "run"
    with pytest.raises(ConfigError, match=r"cannot write there \(.+\); choose another directory"):
        rundir.check_run_dir(target, None, False)


def test_metrics_never_hold_two_runs(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n')
    with pytest.raises(ConfigError, match="already holds the records of another run"):
        MetricWriter(tmp_path, "disabled")
    writer = MetricWriter(tmp_path, "disabled", keep_records=2)     # a resume whose checkpoint saw 2 records
    writer.log({"step": 3})
    writer.close()
    assert [r["step"] for r in records(tmp_path)] == [1, 2, 3]


def test_folder_names_are_safe_and_the_suffix_differs_between_processes():
    assert rundir.dirname("trainer.resume=/a/b c,seed=2") == "trainer.resume=_a_b_c,seed=2"
    long = rundir.dirname("x=" + "y" * 500)
    assert len(long) == rundir.MAX_NAME and long != rundir.dirname("x=" + "y" * 499)
    hydra = yaml.safe_load((Path(__file__).resolve().parents[2] / "conf" / "config.yaml").read_text())["hydra"]
    assert "seed${seed}-${ssgd_unique:}" in hydra["run"]["dir"]
    assert "${ssgd_dirname:${hydra.job.override_dirname}}" in hydra["sweep"]["subdir"]
    code = "import ssgd.run.rundir as r; print(r.unique())"
    env = {**os.environ, "PYTHONPATH": str(Path(rundir.__file__).resolve().parents[1])}
    suffixes = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                               env=env).stdout for _ in range(2)}
    assert len(suffixes) == 2


# -- 4. checks before any rank starts -------------------------------------------------------------------
@pytest.mark.parametrize("overrides, line", [
    (["cluster.world_size=10000"], "trainer.batch_size=32 x cluster.world_size=10000 = 320000 samples per step, "
                                   "more than the 4000 training samples"),
    (["backend=mpi", "trainer.batch_size=2000"], "trainer.batch_size=2000 x cluster.world_size=4"),
    (["model=resnet50", "dataset=synthetic_imagenet64", "dataset.n_train=1000000", "trainer.batch_size=1",
      "cluster.world_size=100000"], "cluster.world_size=100000: needs about"),
    (["model=alexnet", "dataset=synthetic_cifar10"], "model=alexnet needs RGB image data"),
])
def test_preflight_refuses_before_loading_or_allocating(overrides, line):
    spec = build.spec(make_cfg(*overrides))
    with pytest.raises(ConfigError) as err:
        build.preflight(spec)
    assert line in str(err.value) and "\n" not in str(err.value)


def test_preflight_accepts_the_defaults():
    build.preflight(build.spec(make_cfg()))
    build.preflight(build.spec(make_cfg("dataset=mnist")))          # local files: checked after loading


# -- 7. wandb online without credentials or network ----------------------------------------------------
def test_wandb_online_without_a_key_is_refused_before_starting(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    with pytest.raises(ConfigError, match="wandb.mode=online: no wandb API key here"):
        build.preflight(build.spec(make_cfg("wandb.mode=online")))
    (tmp_path / "netrc").write_text("machine api.wandb.ai login user password " + "k" * 40 + "\n")
    build.preflight(build.spec(make_cfg("wandb.mode=online")))


@pytest.mark.slow      # real wandb: its service is a subprocess
def test_wandb_online_without_a_network_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")       # nothing listens there
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "3")
    with pytest.raises(ConfigError, match=r"^wandb.mode=online: .*wandb.mode=offline needs no network") as err:
        MetricWriter(tmp_path, "online")
    assert "\n" not in str(err.value)


# -- resuming another run -------------------------------------------------------------------------------
def test_resuming_another_scheme_or_seed_names_the_mismatch(tmp_path):
    fit(tmp_path / "a", "trainer.max_steps=2", "trainer.checkpoint_every_steps=2")
    checkpoint = str(tmp_path / "a" / FILENAME)
    with pytest.raises(ConfigError) as err:
        build.trainer(make_cfg("compressor=topk", "seed=2", f"trainer.resume={checkpoint}"), tmp_path / "b")
    assert "written by a run with compressor=gtopk, seed=1; this run has compressor=topk, seed=2" in str(err.value)
    assert "trainer.resume_weights_only=true" in str(err.value)
    with pytest.raises(ConfigError, match="written for a model with 199210 parameters"):
        build.trainer(make_cfg("model=cnn", "dataset=synthetic_mnist", f"trainer.resume={checkpoint}"), tmp_path / "c")
    trainer, writer, world = build.trainer(make_cfg("compressor=topk", "seed=2", f"trainer.resume={checkpoint}",
                                                    "trainer.resume_weights_only=true"), tmp_path / "d")
    try:
        assert trainer.step_count == 0 and writer.wandb_id is None
        assert all(torch.equal(p, q) for p, q in zip(trainer.params, params(tmp_path / "a")))
    finally:
        world.close()
        writer.close()


def test_a_missing_or_foreign_checkpoint_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"trainer.resume='.*nothing.pt': no such checkpoint file"):
        build.trainer(make_cfg(f"trainer.resume={tmp_path / 'nothing.pt'}"), tmp_path / "a")
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    with pytest.raises(ConfigError, match=r"trainer.resume='.*junk.pt': not a checkpoint of this project"):
        build.trainer(make_cfg(f"trainer.resume={tmp_path / 'junk.pt'}"), tmp_path / "b")


# -- 6. the sweep report --------------------------------------------------------------------------------
def test_the_sweep_report_lists_failed_points_and_exits_with_the_first_status(tmp_path, capsys):
    report = SweepReport()
    for num, value in enumerate([0.9, record_failure(tmp_path / "1", 2, "compressor.density=1.5: must be ..."), 0.8]):
        ret = JobReturn(overrides=[f"compressor.density={num}"], status=JobStatus.COMPLETED, _return_value=value)
        report.on_job_end(OmegaConf.create({"hydra": {"job": {"num": num}}}), ret)
    assert (tmp_path / "1" / ERROR_FILE).read_text() == "exit status 2: compressor.density=1.5: must be ...\n"
    with pytest.raises(SystemExit) as end:
        report.on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    assert end.value.code == 2
    table = capsys.readouterr().err
    assert "1 of 3 points failed" in table and "compressor.density=1  compressor.density=1.5" in table
    assert isinstance(record_failure(tmp_path / "x", 1, "boom"), PointFailed)


# -- 4. what the MPI launcher lets through --------------------------------------------------------------
def test_open_mpi_boilerplate_is_filtered_and_a_killed_rank_is_named():
    dashes = "-" * 74 + "\n"
    text = ("[rank 1] a line of the run\n" + dashes + "MPI_ABORT was invoked on rank 1 in communicator "
            "MPI_COMM_WORLD\n  Errorcode: 1\n" + dashes + dashes + "prterun noticed that process rank 1 with PID "
            "1151 on node vm exited on\nsignal 9 (Killed).\n" + dashes + dashes + "Some other Open MPI advice\n"
            + dashes + "[vm:1] PMIX ERROR: PMIX_ERR_UNREACH in file x.c at line 3\n\x00 \n")
    out = io.StringIO()
    relay = OpenMPIFilter(out)
    relay.copy(io.StringIO(text))
    assert out.getvalue() == "[rank 1] a line of the run\n" + dashes + "Some other Open MPI advice\n" + dashes
    assert relay.killed == (1, "vm", 9)


def test_a_peers_errors_are_fatal_notice_is_left_out_when_the_launcher_names_the_killed_rank():
    """Multi-host (the testbed): when a rank is killed, its peers print Open MPI's MPI_ERRORS_ARE_FATAL
    notice ("[host:pid] *** ..."); the launcher's one line names the killed rank and host instead.
    Without a killed rank the notice is the only account of the failure, so it is kept."""
    dashes = "-" * 74 + "\n"
    notice = ("[tb4:00000] *** An error occurred in Socket closed\n[tb4:00000] *** reported by process [25,3]\n"
              "[tb4:00000] ***    and MPI will try to terminate your MPI job as well)\n")
    warning = ("[vm:15407] plm:ssh: Warning: setpgid(15419,15419) failed in parent with errno=Permission denied(13)\n"
               "[warn] Epoll MOD(1) on fd 21 failed. Old events were 6; read change was 0 (none); write change was 2 "
               "(del); close change was 0 (none): Bad file descriptor\n")                    # libevent in prterun
    killed = (dashes + "prterun noticed that process rank 2 with PID 7 on node tb3 exited on\nsignal 9 (Killed).\n"
              + dashes)
    out = io.StringIO()
    relay = OpenMPIFilter(out)
    disconnect = (dashes + "An MPI communication peer process has unexpectedly disconnected.\n  Peer host: tb3\n"
                  + dashes)
    late = (" [tb1:00000] *** An error occurred in Socket closed\n[tb4:7] Delaying for 2 seconds before aborting\n"
            "\x00[tb2:00000] *** An error occurred in Socket closed\n")        # seen on the testbed: a NUL first
    relay.copy(io.StringIO(warning + "[rank 0] step 5\n" + notice + disconnect + late + killed))
    assert out.getvalue() == "[rank 0] step 5\n" and relay.killed == (2, "tb3", 9)
    out = io.StringIO()
    OpenMPIFilter(out).copy(io.StringIO(notice))
    assert out.getvalue() == notice
