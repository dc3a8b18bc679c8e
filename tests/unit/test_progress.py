"""Progress (ssgd.utils.progress): a bar on a TTY, a timed status line through logging elsewhere."""
from __future__ import annotations

import io
import logging

import pytest

from ssgd.utils.progress import Progress, duration, status_line


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def status_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ssgd.utils.progress" and r.getMessage().startswith("step")]


@pytest.mark.parametrize("seconds,text", [(0.4, "0s"), (42, "42s"), (187, "3m07s"), (7500, "2h05m")])
def test_duration(seconds, text):
    assert duration(seconds) == text


def test_status_line_has_step_percent_metrics_rate_and_eta():
    line = status_line(25, 100, 5.0, {"loss": "0.500", "acc": "0.900"})
    assert line == "step 25/100 (25.0%)  loss 0.500  acc 0.900  5 steps/s  ETA 15s"
    assert status_line(0, 100, 0.0, {}) == "step 0/100 (0.0%)"          # no rate yet: no ETA


def test_off_a_tty_one_status_line_every_interval(caplog):
    caplog.set_level(logging.INFO)
    clock, stream = Clock(), io.StringIO()
    p = Progress(total=100, enabled=True, every_s=10.0, stream=stream, clock=clock)
    for _ in range(20):                 # 2 steps per second for 10 s: one line, at the 10 s mark
        clock.t += 0.5
        p.update()
    p.set_postfix(loss="0.250", acc="0.750")
    for _ in range(20):
        clock.t += 0.5
        p.update()
    p.close()
    assert status_lines(caplog) == ["step 20/100 (20.0%)  2 steps/s  ETA 40s",
                                    "step 40/100 (40.0%)  loss 0.250  acc 0.750  2 steps/s  ETA 30s"]
    assert stream.getvalue() == ""       # no bar off a TTY


def test_rate_of_a_resumed_run_counts_its_own_steps(caplog):
    caplog.set_level(logging.INFO)
    clock = Clock()
    p = Progress(total=100, initial=50, enabled=True, every_s=5.0, stream=io.StringIO(), clock=clock)
    for _ in range(10):
        clock.t += 0.5
        p.update()
    assert status_lines(caplog) == ["step 60/100 (60.0%)  2 steps/s  ETA 20s"]


@pytest.mark.parametrize("enabled,every_s", [(False, 10.0), (True, 0.0)])
def test_no_status_when_disabled_or_interval_zero(enabled, every_s, caplog):
    caplog.set_level(logging.INFO)
    clock = Clock()
    p = Progress(total=10, enabled=enabled, every_s=every_s, stream=io.StringIO(), clock=clock)
    for _ in range(10):
        clock.t += 100
        p.update()
    p.write("epoch 1: val/acc=0.5000")   # the run's own lines are logged regardless
    p.close()
    assert status_lines(caplog) == []
    assert [r.getMessage() for r in caplog.records] == ["epoch 1: val/acc=0.5000"]


def test_on_a_tty_a_bar_and_console_log_lines_above_it():
    term = Terminal()
    root = logging.getLogger()
    handler = logging.StreamHandler(term)
    console = logging.StreamHandler(io.StringIO())
    level = root.level
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    try:
        import sys

        console.setStream(sys.stdout)     # a console handler: redirected through tqdm while the bar is up
        root.addHandler(console)
        clock = Clock()
        p = Progress(total=10, enabled=True, every_s=0.001, stream=term, clock=clock, desc="topk P=4")
        assert p.bar is not None and console.stream is not sys.stdout
        clock.t += 5
        p.update(3)
        p.write("epoch 1: val/acc=0.5000")
        p.close()
        assert console.stream is sys.stdout          # restored
    finally:
        root.removeHandler(handler)
        root.removeHandler(console)
        root.setLevel(level)
    text = term.getvalue()
    assert "topk P=4" in text and "3/10" in text and "epoch 1: val/acc=0.5000" in text
    assert "steps/s  ETA" not in text                 # the bar, not status lines


@pytest.mark.parametrize("value", ["-1", "nan"])
def test_status_interval_must_be_a_finite_number_at_least_zero(value):
    from conftest import make_cfg
    from ssgd.run import build
    from ssgd.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^trainer\.status_every_s=.*must be a finite number >= 0"):
        build.spec(make_cfg(f"trainer.status_every_s={value}"))
