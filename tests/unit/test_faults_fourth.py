"""The fourth fault matrix (docs/faults.md, "Fourth matrix"), in-process: a real full disk (a small tmpfs;
root only, else skipped with the reason), damaged checkpoints and metrics, a finished run resumed without a
checkpoint, `python -m ssgd.report` on garbage, and `ssgd.ddp.register` on a plain module."""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
import torch

from conftest import make_cfg
from disks import disk, fill  # noqa: F401  (disk: a fixture)
from ssgd.errors import AlreadyFinished, ConfigError, DiskFull
from ssgd.loop.checkpoint import FILENAME
from ssgd.run import build
from ssgd.utils.atomic import replacing
from ssgd.utils.metrics import METRICS, MetricWriter

SHORT = ["trainer.max_steps=4", "trainer.checkpoint_every_steps=2", "trainer.log_every=1"]


def fit(run_dir: Path, *overrides: str) -> dict:
    trainer, writer, world = build.trainer(make_cfg(*overrides), run_dir)
    try:
        return trainer.fit()
    finally:
        world.close()
        writer.close()


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*.tmp"))


# -- row 1: a full disk at a checkpoint ------------------------------------------------------------
def test_a_checkpoint_that_does_not_fit_is_one_line_and_keeps_the_previous_one(disk):
    """7 MiB: the first checkpoint (4.8 MB) fits, the second does not."""
    run = disk("7m") / "run"
    with pytest.raises(DiskFull) as err:
        fit(run, "trainer.max_steps=6", "trainer.checkpoint_every_steps=2", "trainer.log_every=1")
    line = str(err.value)
    assert line.startswith(f"{run / FILENAME}: cannot write the checkpoint (No space left on device): it needs "
                           "about ") and "bytes free; the previous checkpoint is kept" in line and "\n" not in line
    assert torch.load(run / FILENAME, weights_only=True)["shared"]["step"] == 2
    assert leftovers(run) == []


def test_torch_running_out_of_space_mid_write_is_the_one_line(disk):
    """The disguise the precheck cannot see: torch's zip writer fails mid-file (`RuntimeError: ... unexpected
    pos`, its OSError only in the context), here with the precheck told the file needs nothing."""
    root = disk("1m")
    fill(root, leave=300_000)
    with pytest.raises(DiskFull, match=r"x.pt: cannot write the weights \(No space left on device\): its size is "
                                       r"not known before it is written, [\d,]+ bytes free; nothing was written"):
        with replacing(root / "x.pt", "the weights", 0) as tmp:
            torch.save({"w": torch.zeros(500_000)}, tmp)
    assert not (root / "x.pt").exists() and leftovers(root) == []


# -- row 2: a full disk while metrics.jsonl is written ---------------------------------------------
def test_a_metrics_record_the_disk_cannot_take_is_not_half_written(disk):
    root = disk("64k")
    writer = MetricWriter(root / "run", wandb_mode="disabled")
    fill(root, leave=4096 + 100)
    record = {"step": 1, "train/loss": 0.5, "pad": "x" * 300}
    with pytest.raises(DiskFull) as err:
        for step in range(1, 100):
            writer.log({**record, "step": step})
    writer.close()
    kept = (root / "run" / METRICS).read_text()
    assert kept.endswith("\n") and all(json.loads(line) for line in kept.splitlines())
    n = len(kept.splitlines())
    assert str(err.value).startswith(f"{root / 'run' / METRICS}: cannot write record {n + 1} of the run's metrics "
                                     f"(No space left on device): it needs about ")
    assert f"its {n} records before it are kept" in str(err.value)


# -- row 3: a full disk while summary.json is written ----------------------------------------------
def test_a_summary_the_disk_cannot_take_leaves_no_temporary_file(disk):
    root = disk("64k")
    writer = MetricWriter(root / "run", wandb_mode="disabled")
    writer.summary({"steps": 1})
    before = (root / "run" / "summary.json").read_bytes()
    fill(root)
    with pytest.raises(DiskFull, match=r"summary.json: cannot write the run's summary \(No space left on device\): "
                                       r"it needs about [\d,]+ bytes, 0 bytes free; "
                                       r"the previous run's summary is kept"):
        writer.summary({"steps": 2, "pad": "x" * 5000})
    writer.close()
    assert (root / "run" / "summary.json").read_bytes() == before and leftovers(root) == []


# -- row 5: a finished run without a checkpoint is never trained again -------------------------------
def test_resume_auto_into_a_finished_run_without_a_checkpoint_changes_nothing(tmp_path):
    run = tmp_path / "run"
    fit(run, "trainer.max_steps=3")
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    with pytest.raises(AlreadyFinished, match=r"this run already finished at step 3 \(summary.json\) and has no "
                                              r"checkpoint to continue from; nothing to do, nothing changed"):
        fit(run, "trainer.max_steps=3", "trainer.resume=auto")
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


# -- row 6: a damaged checkpoint is refused ------------------------------------------------------------
def test_a_checkpoint_with_flipped_bytes_is_refused(tmp_path):
    run = tmp_path / "run"
    fit(run, *SHORT)
    data = bytearray((run / FILENAME).read_bytes())
    middle = len(data) // 2
    data[middle:middle + 42] = bytes(b ^ 0xFF for b in data[middle:middle + 42])
    (run / FILENAME).write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=r"checkpoint.pt': damaged \(its entry \S+ does not match the CRC32 "
                                          r"written with it: a disk or copy error\); resume from an undamaged copy"):
        fit(run, "trainer.max_steps=6", "trainer.checkpoint_every_steps=2", "trainer.log_every=1",
            "trainer.resume=auto")


# -- rows 7, 8: metrics.jsonl damaged or short at a resume -----------------------------------------------
def test_a_record_cut_mid_line_is_dropped_on_resume_with_one_line(tmp_path, caplog):
    """The last record the checkpoint had seen is cut mid-line (a full disk, a copy stopped): dropped, named,
    and the resumed run's records start on a line of their own (was: appended onto the cut line)."""
    run = tmp_path / "run"
    fit(run, *SHORT)                       # the checkpoint at step 4 has seen every record
    (run / "summary.json").unlink()
    lines = (run / METRICS).read_text().splitlines(keepends=True)
    n = len(lines)
    (run / METRICS).write_text("".join(lines[:-1]) + lines[-1][:25])
    with caplog.at_level(logging.WARNING, logger="ssgd.train"):
        fit(run, "trainer.max_steps=6", "trainer.checkpoint_every_steps=2", "trainer.log_every=1",
            "trainer.resume=auto")
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said == [f"{run / METRICS}: dropped its last record, cut mid-line ({lines[-1][:25]!r}...); it holds "
                    f"{n - 1} of the {n} records the checkpoint had seen: records {n}-{n} are missing (lost before "
                    "this resume; the run goes on from the checkpoint and does not write them again)"]
    rows = [json.loads(line) for line in (run / METRICS).read_text().splitlines()]
    assert rows[:n - 1] == [json.loads(line) for line in lines[:-1]]
    assert [r["step"] for r in rows if "train/loss" in r] == [1, 2, 3, 4, 5, 6]


def test_records_missing_below_the_checkpoints_count_are_named(tmp_path, caplog):
    run = tmp_path / "run"
    fit(run, *SHORT)
    (run / "summary.json").unlink()
    lines = (run / METRICS).read_text().splitlines(keepends=True)
    (run / METRICS).write_text("".join(lines[:2]))
    with caplog.at_level(logging.WARNING, logger="ssgd.train"):
        fit(run, "trainer.max_steps=6", "trainer.checkpoint_every_steps=2", "trainer.log_every=1",
            "trainer.resume=auto")
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said == [f"{run / METRICS}: it holds 2 of the {len(lines)} records the checkpoint had seen: records "
                    f"3-{len(lines)} are missing (lost before this resume; the run goes on from the checkpoint "
                    "and does not write them again)"]


# -- row 9: a run directory with letters outside ASCII ---------------------------------------------------
def test_values_with_letters_outside_ascii_are_quoted_for_hydra():
    from ssgd.run.app import quote_non_ascii
    assert quote_non_ascii(["hydra.run.dir=out/r52_ünï日本", "seed=2", "-m", "+a.b=é"]) == \
        ['hydra.run.dir="out/r52_ünï日本"', "seed=2", "-m", '+a.b="é"']
    # a value that holds grammar (a sweep, quotes, interpolation) is the user's to quote: left as it is
    kept = ["x=ü,é", "x='ü'", "x=${y}ü", "x=a;ü b", "hydra.run.dir=out/r52_ünï日本;x", "x=ü#1"]
    assert quote_non_ascii(kept) == kept      # (the last two hold what the lexer refuses, as `x=a;b` does)


def test_a_refused_character_beside_letters_outside_ascii_is_named_with_the_quoting():
    """Row 9's follow-up: `;` is the cause, not the letters (was: the generic list of grammar characters)."""
    from ssgd.run.hydra_errors import lexer_hint
    assert lexer_hint("hydra.run.dir=out/r52_ünï日本;x") == (
        "Hydra's override grammar refused ';' (no place in an unquoted value; nor are the letters outside ASCII "
        "'üï日本'): quote the value inside the shell quotes: 'hydra.run.dir=\"out/r52_ünï日本;x\"'")
    assert lexer_hint("hydra.run.dir=out/a;touch x").startswith("Hydra's override grammar refused ';' (no place in "
                                                                "an unquoted value): quote")
    assert lexer_hint("x=${y}ü").startswith("Hydra's override grammar refused the letters outside ASCII 'ü' (taken "
                                            "only in quoted values)")


# -- row 10: python -m ssgd.report on files that are not a run's ---------------------------------------
@pytest.mark.parametrize("summary, metrics, named", [
    ("nope", '{"step": 1}\n', "summary.json: not a summary written by a run (JSONDecodeError: Expecting value"),
    ("[1, 2]", "", "summary.json: not a summary written by a run (a JSON list, not an object)"),
    ('{"steps": 1}', "garbage\n", "metrics.jsonl: line 1 is not a JSON record of a run ('garbage')"),
    ('{"steps": 1}', '{"step": 1}\n\xff\xfe\n', "metrics.jsonl: unreadable (UnicodeDecodeError: "),
])
def test_report_on_garbage_names_the_file_in_one_line(tmp_path, capsys, summary, metrics, named):
    from ssgd.utils.result_files import main
    (tmp_path / "summary.json").write_text(summary)
    (tmp_path / "metrics.jsonl").write_bytes(metrics.encode("latin-1"))
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / named.split(':')[0]}:") and named.split(":", 1)[1] in err
    assert err.count("\n") == 1 and not (tmp_path / "report.png").exists()


def test_report_skips_a_last_record_being_written(tmp_path, capsys):
    from ssgd.utils.result_files import main
    (tmp_path / "summary.json").write_text('{"steps": 2}')
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "train/loss": 1.0}\n{"step": 2, "tra')
    assert main([str(tmp_path)]) == 0 and (tmp_path / "report.png").is_file()
    assert not list(tmp_path.glob("*.tmp"))


# -- row 11: ssgd.ddp.register on a module that is not DistributedDataParallel ----------------------------
def test_ddp_register_on_a_plain_module_says_it_needs_ddp():
    import ssgd.ddp
    with pytest.raises(TypeError, match=r"ssgd.ddp.register: model is a torch.nn.modules.linear.Linear, not a "
                                        r"torch.nn.parallel.DistributedDataParallel; wrap it first"):
        ssgd.ddp.register(torch.nn.Linear(10, 2), compressor="gtopk")


# -- also seen: an interrupted sweep says which points it did not run -------------------------------------
def test_an_interrupted_sweep_names_the_points_it_did_not_run():
    from ssgd.run.sweep import skipped_note
    assert skipped_note(1) == "the sweep stopped in its point 1; the points after it were not run"


# -- row 4's part in-process: Hydra's .hydra/ files on a full disk fail the point, not the sweep ----------
def test_hydra_files_the_disk_cannot_take_fail_the_job_not_the_launcher(disk):
    from omegaconf import OmegaConf

    from ssgd.run.sweep import hydra_write_failure, save_hydra_config
    root = disk("64k")
    fill(root)
    save_hydra_config(OmegaConf.create({"a": "x" * 5000}), "config.yaml", root / "job" / ".hydra")
    assert leftovers(root) == [] and not (root / "job" / ".hydra" / "config.yaml").exists()
    with pytest.raises(DiskFull, match=r"job/.hydra/config.yaml: cannot write Hydra's record of the run \(No space"):
        hydra_write_failure(root / "job")
    hydra_write_failure(root / "job")            # said once
