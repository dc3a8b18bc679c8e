"""The run's running sums of its step metrics, which checkpoints carry: a resumed run reports what the
uninterrupted run reports."""
from __future__ import annotations

from collections import defaultdict

SUMMARY_PREFIXES = ("time/", "target/", "comm/", "density/")
"""The step metrics whose run-long means the summary reports."""


class RunningSums:
    """Every step metric summed since step 1 (`totals`, over `summed` steps), the metrics.jsonl interval
    not yet logged (`interval`, over `n_interval` steps), and the last evaluation (`val`)."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.summed = 0
        self.interval: dict[str, float] = defaultdict(float)
        self.n_interval = 0
        self.val: dict[str, float] = {}

    def add(self, metrics: dict[str, float]) -> None:
        """Add one step's metrics to the totals and to the interval."""
        self.n_interval += 1
        self.summed += 1
        for key, value in metrics.items():
            self.interval[key] += value
            self.totals[key] += value

    def take_interval(self) -> dict[str, float]:
        """The interval's mean of each metric; the interval starts again."""
        record = {k: v / self.n_interval for k, v in self.interval.items()}
        self.interval.clear()
        self.n_interval = 0
        return record

    def means(self) -> dict[str, float]:
        """The run-long mean of each metric under `SUMMARY_PREFIXES` (0 steps count as 1)."""
        n = max(self.summed, 1)
        return {key: value / n for key, value in self.totals.items() if key.startswith(SUMMARY_PREFIXES)}

    def state_dict(self) -> dict:
        """The sums as a checkpoint's `run` dict holds them (keys totals, summed, interval, n_interval, val)."""
        return {"totals": dict(self.totals), "summed": self.summed, "interval": dict(self.interval),
                "n_interval": self.n_interval, "val": dict(self.val)}

    def load_state_dict(self, run: dict) -> None:
        """Continue from a checkpoint's `run` dict; a key it lacks leaves that sum empty (0 steps)."""
        self.totals.update(run.get("totals", {}))
        self.summed = run.get("summed", 0)
        self.interval.update(run.get("interval", {}))
        self.n_interval = run.get("n_interval", 0)
        self.val = dict(run.get("val", {}))
