"""The third fault matrix (docs/faults.md, "Third matrix"): nothing runs from a file, and a resume
never silently changes what a run claims (optimizer identity, `trainer.resume_changes`)."""
from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import make_cfg
from ssgd.data.cifar10 import read_batch
from ssgd.errors import ConfigError
from ssgd.loop.checkpoint import FILENAME, RESUMES
from ssgd.run import build


class Payload:
    """Unpickling this calls os.system: it must never run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def fit(run_dir: Path, *overrides: str) -> dict:
    trainer, writer, world = build.trainer(make_cfg(*overrides), run_dir)
    try:
        return trainer.fit()
    finally:
        world.close()
        writer.close()


def start(run_dir: Path, *overrides: str):
    trainer, writer, world = build.trainer(make_cfg(*overrides), run_dir)
    world.close()
    writer.close()
    return trainer


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("ckpt") / "a"
    fit(run, "trainer.max_steps=2", "trainer.checkpoint_every_steps=2")
    return run / FILENAME


def test_a_checkpoint_whose_pickle_carries_code_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "ran"
    torch.save({"shared": {"params": [Payload(marker)]}, "ranks": {}}, tmp_path / "evil.pt")
    with pytest.raises(ConfigError, match=r"evil.pt': refused, its pickle names posix.system, not .*nothing in it was run"):
        build.trainer(make_cfg(f"trainer.resume={tmp_path / 'evil.pt'}"), tmp_path / "b")
    assert not marker.exists()


@pytest.mark.parametrize("state, problem", [
    ({"shared": {}, "ranks": {}}, "shared state has no list 'params'"),
    ([1, 2], "expected a dict with 'shared' and 'ranks' dicts"),
    ({"shared": {"params": [1], "optimizer": {}, "epoch": 0, "step": 0, "P": 1, "d": 1}, "ranks": {}},
     "shared 'params' holds something that is not a tensor"),
])
def test_a_checkpoint_missing_what_it_needs_is_one_line(tmp_path, state, problem):
    torch.save(state, tmp_path / "thin.pt")
    with pytest.raises(ConfigError) as err:
        build.trainer(make_cfg(f"trainer.resume={tmp_path / 'thin.pt'}"), tmp_path / "b")
    assert str(err.value) == f"trainer.resume={str(tmp_path / 'thin.pt')!r}: not a checkpoint of this project ({problem})"


def test_a_real_checkpoint_loads_with_weights_only(ckpt):
    state = torch.load(ckpt, weights_only=True)        # the oracle: torch's own safe loader accepts it
    assert set(state) == {"shared", "ranks"} and state["shared"]["step"] == 2


def test_a_cifar10_batch_whose_pickle_carries_code_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "data_batch_1").write_bytes(pickle.dumps({b"data": Payload(marker), b"labels": [0]}))
    with pytest.raises(ConfigError, match=r"is not a CIFAR-10 python batch .*names posix.system"):
        read_batch(tmp_path / "data_batch_1")
    assert not marker.exists()


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_a_cifar10_batch_of_any_protocol_still_loads(tmp_path, protocol):
    data = np.arange(2 * 3072, dtype=np.int64).astype(np.uint8).reshape(2, 3072)
    (tmp_path / "b").write_bytes(pickle.dumps({b"data": data, b"labels": [3, 9], b"filenames": [b"x", b"y"]},
                                              protocol=protocol))
    x, y = read_batch(tmp_path / "b")
    assert torch.equal(x.reshape(2, -1), torch.from_numpy(data)) and y.tolist() == [3, 9]


def test_resuming_with_another_optimizer_is_refused_naming_both(tmp_path, ckpt):
    with pytest.raises(ConfigError) as err:
        start(tmp_path / "b", "optimizer=adam", f"trainer.resume={ckpt}")
    assert "written by a run with optimizer=torch.optim.SGD" in str(err.value)
    assert "this run has optimizer=torch.optim.Adam" in str(err.value)
    with pytest.raises(ConfigError) as err:
        start(tmp_path / "c", "optimizer.lr=0.05", f"trainer.resume={ckpt}")
    assert "written by a run with optimizer.lr=0.1; this run has optimizer.lr=0.05" in str(err.value)
    assert "trainer.resume_changes=[optimizer.lr] allows the change" in str(err.value)


def test_resuming_with_another_wire_format_is_refused_naming_both(tmp_path, ckpt):
    """The checkpoint's fixture ran with the default compressor.wire.values=fp32."""
    with pytest.raises(ConfigError) as err:
        start(tmp_path / "b", "compressor.wire.values=fp16", f"trainer.resume={ckpt}")
    line = str(err.value)
    assert "\n" not in line
    assert "written by a run with compressor.wire.values=fp32; this run has compressor.wire.values=fp16" in line
    assert "trainer.resume_changes=[compressor.wire.values] allows the change" in line
    trainer = start(tmp_path / "c", "compressor.wire.values=bf16", f"trainer.resume={ckpt}",
                    "trainer.resume_changes=[compressor.wire.values]")
    assert trainer.step_count == 2
    rows = [json.loads(line) for line in (tmp_path / "c" / RESUMES).read_text().splitlines()]
    assert rows == [{"step": 2, "key": "compressor.wire.values", "old": "fp32", "new": "bf16"}]


def test_an_allowed_change_is_recorded_in_the_run(tmp_path, ckpt):
    run = tmp_path / "a"
    fit(run, "trainer.max_steps=2", "trainer.checkpoint_every_steps=2")
    trainer = start(run, "optimizer.lr=0.05", "trainer.resume=auto", "trainer.resume_changes=[optimizer.lr]")
    assert trainer.step_count == 2
    rows = [json.loads(line) for line in (run / RESUMES).read_text().splitlines()]
    assert rows == [{"step": 2, "key": "optimizer.lr", "old": 0.1, "new": 0.05}]
    with pytest.raises(ConfigError, match=r"trainer.resume_changes=\['optimizer.lrr'\]: 'optimizer.lrr' is not"):
        start(run, "trainer.resume=auto", "trainer.resume_changes=[optimizer.lrr]")


def test_a_full_disk_at_a_checkpoint_is_one_line_and_keeps_the_previous_one(tmp_path):
    """The kernel's own ENOSPC: the temporary file is /dev/full (every write fails with 'No space left')."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    run = tmp_path / "a"
    fit(run, "trainer.max_steps=2", "trainer.checkpoint_every_steps=2")
    before = (run / FILENAME).read_bytes()
    (run / "checkpoint.pt.tmp").symlink_to("/dev/full")
    with pytest.raises(ConfigError) as err:
        fit(run, "trainer.max_steps=4", "trainer.checkpoint_every_steps=2", "trainer.resume=auto")
    line = str(err.value)
    assert line.startswith(f"{run / FILENAME}: cannot write the checkpoint (No space left on device): it needs "
                           "about ") and "the previous checkpoint is kept" in line and "\n" not in line
    assert not (run / "checkpoint.pt.tmp").exists() and not (run / "checkpoint.pt.tmp").is_symlink()
    assert (run / FILENAME).read_bytes() == before


ROOT = Path(__file__).resolve().parents[2]


def train(*argv: str, **env: str):
    import subprocess
    import sys
    clean = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    return subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), *argv], cwd=ROOT, env={**clean, **env},
                          capture_output=True, text=True, timeout=120)


def test_wandb_mode_from_the_environment_is_honoured_or_refused():
    from ssgd.run.app import honour_wandb_mode
    assert honour_wandb_mode(["seed=2"], None) == ["seed=2"]
    assert honour_wandb_mode(["seed=2"], "disabled") == ["seed=2", "wandb.mode=disabled"]
    assert honour_wandb_mode(["wandb.mode=online"], "online") == ["wandb.mode=online"]
    with pytest.raises(ConfigError, match="WANDB_MODE=online contradicts wandb.mode=offline on the command line"):
        honour_wandb_mode(["wandb.mode=offline"], "online")
    with pytest.raises(ConfigError, match="WANDB_MODE=bogus: must be one of disabled, offline, online"):
        honour_wandb_mode([], "bogus")


@pytest.mark.slow
def test_wandb_mode_disabled_in_the_environment_writes_no_wandb_run(tmp_path):
    run = tmp_path / "run"
    proc = train("trainer.max_steps=1", f"hydra.run.dir={run}", WANDB_MODE="disabled")
    assert proc.returncode == 0, proc.stderr
    assert not (run / "wandb").exists()
    assert "mode: disabled" in (run / ".hydra" / "config.yaml").read_text()   # the record says what ran
    refused = train("wandb.mode=offline", f"hydra.run.dir={tmp_path / 'b'}", WANDB_MODE="online")
    assert refused.returncode == 2 and refused.stderr.strip().count("\n") == 0
    assert not (tmp_path / "b").exists()


@pytest.mark.slow
def test_a_lexer_error_carries_the_quoting_hint(tmp_path):
    proc = train(f"hydra.run.dir={tmp_path}/a;touch {tmp_path}/x")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "LexerNoViableAltException" in proc.stderr and "quote the value inside the shell quotes" in proc.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path / "a").exists()


@pytest.mark.slow
def test_resuming_a_finished_run_says_so_and_changes_nothing(tmp_path):
    run = tmp_path / "run"
    first = train("trainer.max_steps=2", "trainer.checkpoint_every_steps=2", f"hydra.run.dir={run}",
                  WANDB_MODE="disabled")
    assert first.returncode == 0, first.stderr
    files = ("summary.json", "metrics.jsonl", FILENAME, "train.log", ".hydra/config.yaml", ".hydra/overrides.yaml")
    before = {name: (run / name).read_bytes() for name in files}
    again = train("trainer.max_steps=2", "trainer.checkpoint_every_steps=2", "trainer.resume=auto",
                  f"hydra.run.dir={run}", WANDB_MODE="disabled")
    assert again.returncode == 0, again.stderr
    assert "this run already finished at step 2 (summary.json); nothing to do, nothing changed" in again.stdout + again.stderr
    assert {name: (run / name).read_bytes() for name in files} == before
    longer = train("trainer.max_steps=3", "trainer.checkpoint_every_steps=2", "trainer.resume=auto",
                   f"hydra.run.dir={run}", WANDB_MODE="disabled")      # extending it is still a resume
    assert longer.returncode == 0 and json.loads((run / "summary.json").read_text())["steps"] == 3


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` and its bytes (None for a folder): the oracle of "not a byte changed"."""
    return {str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes()) for p in sorted(folder.rglob("*"))}


def test_giving_a_taken_folder_back_restores_every_byte(tmp_path):
    from ssgd.run.rundir import take_run_dir
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("seed: 1\n")
    (run / "train.log").write_text("first run\n")
    (run / FILENAME).write_bytes(b"ckpt")
    before = tree(run)
    taken = take_run_dir(run, "auto", False)
    (run / ".hydra" / "config.yaml").write_text("seed: 2\n")          # what Hydra does at every start
    (run / ".hydra" / "hydra.yaml").write_text("new\n")
    with open(run / "train.log", "a") as f:
        f.write("error: refused\n")
    (run / "mpi" / "heartbeat").mkdir(parents=True)
    (run / "mpi" / "heartbeat" / "rank0.json").write_text("{}")
    (run / "worker_config.yaml").write_text("x")
    taken.give_back()
    assert tree(run) == before
    os.close(taken.fd)
    fresh = tmp_path / "a" / "b" / "c"
    taken = take_run_dir(fresh, None, False)
    (fresh / ".hydra").mkdir()
    (fresh / "train.log").write_text("error: x\n")
    taken.give_back()
    assert not (tmp_path / "a").exists()                                # every folder it created, gone
    os.close(taken.fd)
    for progress in ("metrics", "started"):             # past its refusals: an error then keeps every byte
        run = tmp_path / progress
        taken = take_run_dir(run, None, False)
        (run / "train.log").write_text("step 1\nerror: No space left on device\n")
        if progress == "metrics":
            (run / "metrics.jsonl").write_text('{"step": 1}\n')
        else:
            taken.started = True
        after = tree(run)
        taken.give_back()
        assert tree(run) == after and after
        os.close(taken.fd)


def test_a_folder_another_run_holds_is_refused_before_anything_is_written(tmp_path):
    from ssgd.run.rundir import take_run_dir
    run = tmp_path / "run"
    first = take_run_dir(run, None, False)
    with pytest.raises(ConfigError) as err:
        take_run_dir(run, "auto", False)                # it would pass the emptiness test: the lock refuses it
    assert str(err.value) == (f"hydra.run.dir={run}: another run is using this directory right now (it holds its "
                              "lock); wait for it to end, or choose another directory with hydra.run.dir=...")
    assert tree(run) == {}
    os.close(first.fd)                                  # the run ended (the kernel drops the lock however it ends)
    os.close(take_run_dir(run, "auto", False).fd)


@pytest.mark.slow
def test_a_refused_run_writes_nothing_into_its_folder(tmp_path):
    run = tmp_path / "new" / "run"
    refused = train("compressor.density=1.5", f"hydra.run.dir={run}", WANDB_MODE="disabled")
    assert refused.returncode == 2 and refused.stderr.strip().count("\n") == 0, refused.stderr
    assert not (tmp_path / "new").exists()              # not even the folders (was: .hydra/ and train.log)
    run.mkdir(parents=True)
    refused = train("compressor.density=1.5", f"hydra.run.dir={run}", WANDB_MODE="disabled")
    assert refused.returncode == 2 and tree(run) == {}
    done = train("trainer.max_steps=2", "trainer.checkpoint_every_steps=2", f"hydra.run.dir={run}",
                 WANDB_MODE="disabled")                  # the next correct run into it is not refused
    assert done.returncode == 0, done.stderr
    before = tree(run)
    refused = train("trainer.max_steps=2", "trainer.checkpoint_every_steps=2", "trainer.resume=auto",
                    "optimizer.lr=0.05", f"hydra.run.dir={run}", WANDB_MODE="disabled")
    assert refused.returncode == 2 and "written by a run with optimizer.lr=0.1" in refused.stderr
    assert tree(run) == before                           # .hydra/config.yaml still says lr 0.1, train.log as it was


@pytest.mark.slow
def test_two_runs_started_at_once_into_one_folder(tmp_path):
    import subprocess
    import sys
    run = tmp_path / "run"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    procs = [subprocess.Popen([sys.executable, str(ROOT / "src" / "train.py"), f"seed={seed}", "trainer.max_steps=2",
                               "trainer.resume=auto", f"hydra.run.dir={run}"], cwd=ROOT, text=True,
                              env={**clean, "WANDB_MODE": "disabled"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for seed in (1, 2)]
    outs = [(p.wait(timeout=120), *p.communicate()) for p in procs]
    statuses = sorted(status for status, _, _ in outs)
    assert statuses == [0, 2], outs
    winner = next(seed for seed, (status, _, _) in zip((1, 2), outs) if status == 0)
    line = next(err for status, _, err in outs if status == 2).strip()
    assert "\n" not in line, line       # the lock refused it, or (the other ran first) the finished run's seed did
    assert (line == f"error: hydra.run.dir={run}: another run is using this directory right now (it holds its lock); "
            "wait for it to end, or choose another directory with hydra.run.dir=..."
            or "written by a run with seed=" in line), line
    assert f"seed: {winner}\n" in (run / ".hydra" / "config.yaml").read_text()    # the refused one wrote nothing


def test_the_heartbeat_watch_names_the_first_rank_whose_beat_stopped(tmp_path):
    """The launcher's judgement (`ssgd.run.heartbeat.Watch`) on its own clock: stale means the beat counter
    did not change for more than mpi.timeout_s; a rank that says `done` is never judged."""
    from ssgd.run.heartbeat import STARTUP_S, Heartbeat, Watch, record_path
    now = [100.0]
    watch = Watch(tmp_path, 3, timeout_s=5.0, clock=lambda: now[0])
    beats = [Heartbeat(tmp_path, r) for r in range(3)]
    for b in beats:
        b.write()
    beats[2].done()
    assert watch.stale() is None
    now[0] += 4.0
    beats[0].write()                                          # rank 0 alive, rank 1 silent for 4 s
    assert watch.stale() is None
    now[0] += 1.5                                             # rank 1 silent 5.5 s > 5 s; rank 0 for 1.5 s
    rank, record, seconds = watch.stale()
    assert (rank, seconds, record["beat"], record["phase"]) == (1, 5.5, 1, "start")
    assert json.loads(record_path(tmp_path, 1).read_text()) == record
    line = watch.line(rank, record, seconds)
    assert line.startswith(f"backend=mpi: rank 1 on host {beats[1].host} made no progress for 6 s (mpi.timeout_s=5): "
                           f"its last heartbeat (pid {os.getpid()}) was at step 0, phase start;") and "\n" not in line
    now[0] += 100.0                                           # rank 2 finished long ago: still never judged
    beats[0].write()
    beats[1].write()
    assert watch.stale() is None
    silent = Watch(tmp_path / "none", 1, timeout_s=5.0, clock=lambda: now[0])
    now[0] += 5.0 + STARTUP_S - 0.1
    assert silent.stale() is None
    now[0] += 0.2
    assert silent.stale()[:2] == (0, None) and "never wrote a heartbeat" in silent.line(0, None, 35.1)


def test_the_heartbeat_watch_finds_ranks_alive_but_without_a_step(tmp_path, monkeypatch):
    """`Watch.stuck`: every rank beats, none finishes a step for mpi.timeout_s (a host's link down): the job is
    judged blocked, with STARTUP_S more before the first step; a new step restarts the clock; the line names the
    hosts that do not answer (the probe is replaced here: tests/testbed/test_faults.py downs a real link)."""
    from ssgd.run import reach
    from ssgd.run.heartbeat import STARTUP_S, Heartbeat, Watch

    now = [0.0]
    hosts = ["10.98.0.1", "10.98.0.2", "10.98.0.3"]
    watch = Watch(tmp_path, 3, timeout_s=5.0, clock=lambda: now[0], hosts=hosts)
    beats = [Heartbeat(tmp_path, r) for r in range(3)]
    steps = [0]
    for b in beats:
        b.progress = lambda: steps[0]

    def tick(seconds: float):
        now[0] += seconds
        for b in beats:
            b.write()
        assert watch.stale() is None                    # every beat is fresh: never "stale"
        return watch.stuck()

    assert tick(0.0) is None
    assert tick(5.0 + STARTUP_S - 0.5) is None          # before the first step: the start-up allowance too
    steps[0] = 1
    assert tick(1.0) is None                            # a step: the clock restarts
    assert tick(4.9) is None
    found = tick(0.5)
    assert found == (1, pytest.approx(5.4))
    monkeypatch.setattr(reach, "answers", lambda a, t, p: a != "10.98.0.3")
    line = watch.stuck_line(*found)
    assert line.startswith("backend=mpi: no rank finished a step for 5 s (mpi.timeout_s=5) although every rank is "
                           "alive") and "host 10.98.0.3 (rank 2) does not answer on the network" in line
    beats[0].done()
    assert tick(60.0) is None                           # a rank that finished is never judged


def test_a_world_wrapped_by_the_heartbeat_reports_each_collective():
    from ssgd.run.heartbeat import Heartbeat, wrap_world
    seen = []

    class World:
        def allgather(self, items):
            seen.append(beat.phase)
            return items

        def barrier(self):
            seen.append(beat.phase)

    beat = Heartbeat(Path("unused"), 0)
    world = World()
    wrap_world(world, beat)
    beat.phase = "compute"
    assert world.allgather([3]) == [3] and world.barrier() is None
    assert seen == ["collective:allgather", "collective:barrier"] and beat.phase == "compute"


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan"])
def test_a_bad_mpi_timeout_is_one_line(value):
    with pytest.raises(ConfigError) as err:
        build.spec(make_cfg(f"mpi.timeout_s={value}"))
    assert str(err.value) == f"mpi.timeout_s={float(value)!r}: must be a finite number > 0 (seconds)"
    assert build.spec(make_cfg()).config.mpi.timeout_s == 300.0


def test_a_rendezvous_port_in_use_is_one_line_naming_the_key_and_a_free_port():
    import re
    import socket
    from ssgd.worlds.rendezvous import check_port_free
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(ConfigError) as err:
            check_port_free(port)
        line = str(err.value)
        assert line.startswith(f"dist.master_port={port}: port {port} is already in use on this host (EADDRINUSE")
        assert line.endswith("or dist.master_port=null (a free port for each run)")
        suggested = int(re.search(r"e\.g\. dist\.master_port=(\d+)", line).group(1))
        assert suggested != port
        with socket.socket() as probe:                  # the oracle: the port it suggests can be bound
            probe.bind(("", suggested))
    check_port_free(port)                               # closed: free again


def test_a_torch_rank_whose_port_is_taken_says_so_in_one_line():
    import socket
    from ssgd.worlds.rendezvous import LocalRank, Ranks
    from ssgd.worlds.torch_dist import TorchWorld
    cfg = make_cfg("backend=torch", "dist.timeout_s=10")
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        world = TorchWorld(Ranks(0, 1, LocalRank(0, 1, "test"), "test"),
                           environ={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        with pytest.raises(ConfigError, match=rf"^MASTER_PORT={port}: port {port} is already in use on this host "
                                              r"\(EADDRINUSE.*or unset MASTER_PORT \(then dist.master_port"):
            world.prepare(cfg)


@pytest.mark.slow
def test_train_with_a_master_port_in_use_exits_2_with_one_line(tmp_path):
    import socket
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = train("backend=torch", "cluster.world_size=2", "trainer.max_steps=1", f"dist.master_port={port}",
                     f"hydra.run.dir={tmp_path / 'run'}", WANDB_MODE="disabled")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr      # was: exit 1, three lines, "backend=None"
    assert proc.stderr.startswith(f"error: dist.master_port={port}: port {port} is already in use on this host")
    assert not (tmp_path / "run").exists()


GLOO = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error [127.0.0.1]:37794: "
        "Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the application. "
        "Check the logs of the remote worker before reporting an error. GLHF! \U0001f3d6\ufe0f")


def test_gloos_banner_is_kept_out_of_a_ranks_line(tmp_path):
    from ssgd.run.worker import failure, without_banners
    assert without_banners(GLOO) == "Read error [127.0.0.1]:37794: Connection reset by peer."
    assert without_banners("ValueError: plain [x] text") == "ValueError: plain [x] text"     # nothing else is cut
    try:
        raise RuntimeError(GLOO)
    except RuntimeError as err:
        line = failure(err, 0, tmp_path, "gloo")
    trace = tmp_path / "mpi" / "rank0-traceback.txt"
    assert line == ("backend=gloo: rank 0 failed: RuntimeError: Read error [127.0.0.1]:37794: Connection reset by "
                    f"peer. (traceback in {trace})")
    assert "GLHF" in trace.read_text()                   # the whole message stays in the traceback file


@pytest.mark.slow
@pytest.mark.parametrize("mode, cause", [
    ("kill", "error: backend=torch: rank 1 was killed by signal 9 (SIGKILL); "),
    ("raise", "error: backend=gloo: rank 1 failed: RuntimeError: injected failure at step 3 (debug.fail_rank=1)"),
])
def test_a_failed_torch_rank_is_one_line_on_stderr(mode, cause, tmp_path):
    """The first rank to fail is the one line: killed, the launcher names it (what its peer reported after it,
    a reset connection with gloo's banner, stays in the peer's traceback file); raising, its own exception."""
    proc = train("backend=torch", "cluster.world_size=2", "trainer.max_steps=20", "debug.fail_rank=1",
                 "debug.fail_step=3", f"debug.fail_mode={mode}", f"hydra.run.dir={tmp_path / 'run'}",
                 WANDB_MODE="disabled")
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(cause), proc.stderr
    assert "GLHF" not in proc.stderr and "third_party" not in proc.stderr, proc.stderr
