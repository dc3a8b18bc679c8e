"""Every write of the lab on a real full disk (docs/faults.md, fourth matrix, rows 13-16): the files that
the first full-disk rows left out (`capture/`, `resumes.jsonl`, the launchers' `worker_config.yaml`,
`mpi/ended.txt`, rank traceback files, wandb's files). Each is the one line (DiskFull: the file, the bytes
needed and free), no temporary file left, what was written before intact. A small tmpfs; root only, else
skipped with the reason."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import make_cfg
from disks import disk, fill  # noqa: F401  (disk: a fixture)
from ssgd.config import CaptureConfig
from ssgd.errors import DiskFull
from ssgd.loop.capture import Capture
from ssgd.loop.checkpoint import RESUMES, record_changes
from ssgd.run import job, worker
from ssgd.utils.metrics import MetricWriter

NO_SPACE = "(No space left on device)"


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*.tmp"))


def valid_jsonl(path: Path) -> int:
    text = path.read_text()
    assert text.endswith("\n") and all(json.loads(line) for line in text.splitlines())
    return len(text.splitlines())


def test_a_capture_record_the_disk_cannot_take_is_not_half_written(disk):
    root = disk("64k")
    capture = Capture(CaptureConfig(stats=True), root / "run", 0, True, "dense")
    fill(root, leave=4096 + 100)
    with pytest.raises(DiskFull) as err:
        for step in range(1, 100):
            capture.append_stats({"step": step, "u/norm2": 1.0, "pad": "x" * 300})
    capture.close()
    n = valid_jsonl(capture.stats_path)
    assert str(err.value).startswith(f"{capture.stats_path}: cannot write the capture record of step {n + 1} "
                                     f"{NO_SPACE}: it needs about ")
    assert f"its {n} records before it are kept" in str(err.value) and "\n" not in str(err.value)


def test_a_captured_gradient_that_does_not_fit_leaves_no_partial_file(disk):
    root = disk("1m")
    capture = Capture(CaptureConfig(u_steps=[2]), root / "run", 0, True, "dense")
    fill(root, leave=300_000)
    with pytest.raises(DiskFull, match=r"u_step000002.pt: cannot write the captured gradient of step 2 \(No space "
                                       r"left on device\): it needs about 2,000,000 bytes, [\d,]+ bytes free; "
                                       r"nothing was written"):
        capture.save_u(2, {"u": torch.zeros(500_000), "step": 2})
    assert not (capture.dir / "u_step000002.pt").exists() and leftovers(root) == []


def test_a_resumes_record_the_disk_cannot_take_keeps_the_earlier_records(disk):
    root = disk("64k")
    first = {"step": 2, "key": "optimizer.lr", "old": 0.1, "new": 0.05}
    record_changes(root / "run", [first])
    fill(root)
    with pytest.raises(DiskFull, match=r"resumes.jsonl: cannot write the record of the resume's changes "
                                       r"\(optimizer.lr, compressor.wire.values\) \(No space left on device\): it "
                                       r"needs about [\d,]+ bytes, 0 bytes free; the records before it are kept"):
        record_changes(root / "run", [{**first, "step": 4}, {"step": 4, "key": "compressor.wire.values",
                                                             "old": "fp32", "new": "x" * 5000}])
    assert (root / "run" / RESUMES).read_text() == json.dumps(first) + "\n"


def test_the_ranks_config_on_a_full_disk_is_the_one_line(disk):
    root = disk("64k")
    fill(root)
    cfg = make_cfg("backend=torch", "cluster.world_size=2")
    with pytest.raises(DiskFull, match=r"worker_config.yaml: cannot write the ranks' config \(No space left on "
                                       r"device\): it needs about [\d,]+ bytes, 0 bytes free; nothing was written"):
        job.prepare(cfg, root / "run")
    assert leftovers(root) == [] and not (root / "run" / job.WORKER_CONFIG).exists()


def test_a_rank_on_a_full_disk_still_reports_to_its_launcher(disk, monkeypatch):
    """The launcher reserves mpi/ended.txt's bytes; a rank that meets a full disk writes its line inside them
    (was: an empty ended.txt and an OSError out of report_end, so the launcher said "exit status 1")."""
    root = disk("64k")
    ended = root / "run" / job.ENDED_FILE
    job.reserve(ended, "the ranks' report")
    fill(root)
    monkeypatch.setenv(job.ENDED_ENV, str(ended))
    line = f"{root}/run/checkpoint.pt: cannot write the checkpoint {NO_SPACE}: " + "x" * 300
    worker.report_end(2, line, root / "run", say=True)
    worker.report_end(1, "a later rank's line", root / "run", say=True)           # the first rank wins
    assert job.read_ended(ended) == (2, line)


def test_a_rank_whose_traceback_does_not_fit_says_so_and_leaves_no_partial_file(disk):
    root = disk("64k")
    (root / "run" / "mpi").mkdir(parents=True)
    fill(root)
    try:
        raise RuntimeError("boom\n" + "x" * 20_000)
    except RuntimeError as err:
        line = worker.failure(err, 1, root / "run", "torch")
    assert line.startswith("backend=torch: rank 1 failed: RuntimeError: boom (no traceback file: ")
    assert f"rank1-traceback.txt: cannot write the rank's traceback {NO_SPACE}" in line
    assert list((root / "run" / "mpi").iterdir()) == []


class FakeWandbRun:
    """What MetricWriter.close uses of a wandb run: its folder, config, summary and finish()."""

    def __init__(self, folder: Path) -> None:
        self.dir, self.finished = str(folder), False
        self.config = type("Config", (), {"as_dict": lambda _: {"pad": "x" * 20_000}})()
        self.summary = {"steps": 1}

    def finish(self) -> None:
        self.finished = True


def closing_writer(root: Path) -> MetricWriter:
    writer = MetricWriter(root / "run", wandb_mode="disabled")
    writer.wandb_mode, writer.wandb_run = "offline", FakeWandbRun(root / "run" / "wandb" / "files")
    return writer


def test_wandbs_readable_files_on_a_full_disk_are_the_one_line(disk):
    """(was: exit 1, an OSError traceback out of `write_readable_files` at close)"""
    root = disk("64k")
    writer = closing_writer(root)
    run = writer.wandb_run
    fill(root)
    with pytest.raises(DiskFull, match=r"wandb/files/config.yaml: cannot write wandb's offline config \(No space "):
        writer.close()
    assert run.finished and leftovers(root) == []


def test_wandbs_full_disk_after_the_runs_own_error_keeps_that_error(disk):
    root = disk("64k")
    writer = closing_writer(root)
    fill(root)
    with pytest.raises(DiskFull, match="metrics.jsonl: the first error"):
        try:
            raise DiskFull(f"{root}/run/metrics.jsonl: the first error", "", 0, 0)
        finally:
            writer.close()
    assert leftovers(root) == []


def test_wandb_on_a_disk_without_room_to_start_is_refused_before_it_starts(disk):
    root = disk("128k")
    with pytest.raises(DiskFull, match=r"run/wandb: cannot write wandb's own files \(No space left on device\): it "
                                       r"needs about 262,144 bytes, [\d,]+ bytes free; nothing was written"):
        MetricWriter(root / "run", wandb_mode="offline")
    assert not (root / "run" / "wandb").exists()


def test_a_profile_the_disk_cannot_take_is_the_one_line_of_its_tool(disk, capsys):
    """The tools (calibrations, profiles, replays) write through ssgd.utils.atomic too; their `main` turns the
    DiskFull into one line and exit status 2 (`full_disk_is_one_line`; was: a traceback, a partial file)."""
    from ssgd.perf.iteration import Profile
    from ssgd.tools.make_profiles import main as make_profiles_main
    from ssgd.utils.atomic import full_disk_is_one_line, write_text_atomic

    root = disk("64k")
    profile = Profile(name="x", batch_size=32, layers=("fc",), params=(1000,), forward_s=(0.01,),
                      backward_s=(0.02,))
    fill(root)

    @full_disk_is_one_line
    def tool() -> int:                        # as ssgd.tools.make_profiles and measure write their profiles
        write_text_atomic(root / "x.json", profile.to_json(), "the profile")
        return 0
    assert tool() == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {root / 'x.json'}: cannot write the profile (No space left on device): it needs "
                          "about ") and err.count("\n") == 1
    assert leftovers(root) == [] and not (root / "x.json").exists()
    assert make_profiles_main.__wrapped__ is not None          # the tools' mains are wrapped so


class RaisingWandbRun(FakeWandbRun):
    """A wandb run whose `log` raises `err` (wandb's own writes on a full disk, or another failure)."""

    def __init__(self, folder: Path, err: Exception) -> None:
        super().__init__(folder)
        self.err = err

    def log(self, data: dict, step: int) -> None:
        raise self.err


def test_a_full_disk_wandb_raises_is_the_one_line_naming_its_folder_and_other_errors_stay_as_they_are(tmp_path):
    import errno

    writer = MetricWriter(tmp_path / "run", wandb_mode="disabled")
    writer.wandb_run = RaisingWandbRun(tmp_path, OSError(errno.ENOSPC, "No space left on device"))
    with pytest.raises(DiskFull, match=r"run/wandb: cannot write wandb's own files \(No space left on device\): its "
                                       r"size is not known before it is written, [\d,]+ bytes free; the run's own "
                                       r"files written before are kept"):
        writer.log({"step": 1, "train/loss": 0.5})
    other = RuntimeError("wandb's own trouble")
    writer.wandb_run = RaisingWandbRun(tmp_path, other)
    with pytest.raises(RuntimeError) as err:
        writer.log({"step": 2, "train/loss": 0.5})
    assert err.value is other and err.value.__cause__ is None
    writer.wandb_run = None
    writer.close()
