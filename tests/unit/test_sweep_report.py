"""ssgd.run.sweep.failures_in: the failed points of a sweep whose points ran in job processes of their own."""
import os
import time

from ssgd.run.sweep import PointFailed, failures_in, points_in, record_failure


def test_failures_in_reads_this_sweeps_error_files_only(tmp_path):
    old = record_failure(tmp_path / "0-compressor.density=2", 2, "an earlier attempt")
    past = time.time() - 3600
    os.utime(tmp_path / "0-compressor.density=2" / "error.txt", (past, past))
    since = time.time() - 1
    record_failure(tmp_path / "3-compressor.density=1.5", 2, "compressor.density=1.5: must be in (0, 1]")
    hydra = tmp_path / "1-x" / ".hydra"
    hydra.mkdir(parents=True)
    (hydra / "overrides.yaml").write_text("- compressor=topk\n- seed=3\n")
    record_failure(tmp_path / "1-x", 3, "diverged", details="Traceback ...")
    (tmp_path / "2-ok").mkdir()
    assert old == PointFailed(2, "an earlier attempt")
    assert failures_in(tmp_path, since) == [
        (1, "compressor=topk seed=3", PointFailed(3, "diverged")),
        (3, "3-compressor.density=1.5", PointFailed(2, "compressor.density=1.5: must be in (0, 1]"))]


def test_points_in_counts_the_job_folders_hydra_started_since(tmp_path):
    since = time.time() - 1
    for job in ("0-a", "1-b"):
        (tmp_path / job / ".hydra").mkdir(parents=True)
        (tmp_path / job / ".hydra" / "overrides.yaml").write_text("- a=1\n")
    past = time.time() - 3600
    os.utime(tmp_path / "1-b" / ".hydra" / "overrides.yaml", (past, past))     # an earlier attempt's
    (tmp_path / ".submitit").mkdir()
    (tmp_path / "multirun.yaml").write_text("{}\n")
    assert points_in(tmp_path, since) == 1
