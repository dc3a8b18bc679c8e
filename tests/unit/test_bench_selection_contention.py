"""bench/selection_contention.py: the thread-choice rule, the kept-speed ratio and the CSV round trip
(the rule, not the machine's speed)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import selection_contention as sc  # noqa: E402


@pytest.mark.parametrize("busy, want", [
    ({1: 30.0, 2: 121.0}, 1),      # issue 23's Gaussian-k at 25M: a second thread on a busy core is 4x slower
    ({1: 336.0, 2: 200.0}, 2),     # a pass that gains from the second thread keeps it
    ({1: 10.0, 2: 9.6}, 1),        # within 5 %: the fewer threads win
    ({1: 10.0, 2: 9.4}, 2),        # beyond 5 %
    ({2: 5.0}, 2),
])
def test_choose_threads_takes_the_fewest_within_the_tie_of_the_fastest(busy, want):
    assert sc.choose_threads(busy) == want


@pytest.mark.parametrize("bad", [{}, {1: 0.0, 2: 3.0}, {1: float("nan")}])
def test_choose_threads_refuses_times_it_cannot_rank(bad):
    with pytest.raises(ValueError, match="choose_threads"):
        sc.choose_threads(bad)


def cells() -> list:
    times = {("quiet", 1): 10.0, ("quiet", 2): 6.0, ("busy", 1): 12.5, ("busy", 2): 40.0}
    return [sc.Cell(load, t, "gaussiank", 1000, 3, ms, ms * 0.9, ms * 1.1, 0.05 if load == "quiet" else None,
                    False if load == "quiet" else None) for (load, t), ms in times.items()]


def test_kept_speed_is_quiet_one_thread_over_busy():
    assert sc.kept_speed(cells(), "gaussiank", 1) == pytest.approx(0.8)
    assert sc.kept_speed(cells(), "gaussiank", 2) == pytest.approx(0.25)


def test_the_table_and_the_csv_round_trip(tmp_path):
    c = cells()
    sc.write_csv(c, tmp_path / sc.CSV_NAME)
    assert sc.read_csv(tmp_path / sc.CSV_NAME) == c
    table = sc.markdown(c)
    row = next(line for line in table.splitlines() if line.startswith("| gaussiank"))
    assert row.endswith("| 1 | 0.80 |") and "(unmeasured)" in row       # busy 1 thread chosen, kept 12.5 -> 10
    assert len(table.splitlines()[2].split("|")) == len(table.splitlines()[4].split("|"))


def test_the_spinner_is_a_child_on_one_cpu_and_is_stopped():
    proc = sc.spinner()
    try:
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode is not None
