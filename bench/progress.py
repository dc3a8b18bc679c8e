"""Progress of `make bench` between its parts: which part starts, time so far, expected time left.

    python bench/progress.py start DIR          # records the start (DIR/.bench-start, DIR/.bench-progress)
    python bench/progress.py next DIR PART      # PART starts: prints the line below
    python bench/progress.py end DIR            # the last part has ended

    [bench] part 2/5: bench-trainer (~2.5 min); 6.1 min so far; ~9 min left (estimates x 1.10, this run's pace)

Expected time left = the remaining parts' quiet-machine estimates (PARTS) times this run's pace so
far (time taken / estimates of the finished parts): a busy machine, whose noisy rounds are repeated,
is slower, and the estimate follows it. Standard library only.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

# make target -> expected seconds on a quiet 2-core machine (TOOLS=1, warm torch.compile cache)
PARTS = {"bench-dlbench": 760, "bench-trainer": 540, "bench-threads": 50, "bench-comm": 55, "fig-selection": 40}   # quiet run, 2026-12-01


def _state(folder: Path) -> dict:
    path = folder / ".bench-progress"
    return json.loads(path.read_text()) if path.exists() else {"start": time.time(), "done": {}, "current": None}


def _save(folder: Path, state: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".bench-progress").write_text(json.dumps(state) + "\n")


def _finish_current(state: dict, now: float) -> None:
    if state.get("current"):
        name, began = state["current"]
        state["done"][name] = now - began
        state["current"] = None


def remaining_s(done: dict[str, float], parts_left: list[str]) -> tuple[float, float]:
    """(expected seconds for `parts_left`, pace): estimates scaled by time taken / estimates of `done`."""
    planned = sum(PARTS.get(p, 0) for p in done)
    pace = (sum(done.values()) / planned) if planned > 0 else 1.0
    return pace * sum(PARTS.get(p, 0) for p in parts_left), pace


def line(state: dict, part: str, now: float) -> str:
    names = list(PARTS)
    i = names.index(part) + 1 if part in names else len(state["done"]) + 1
    left, pace = remaining_s(state["done"], [p for p in names if p not in state["done"]])
    return (f"[bench] part {i}/{len(names)}: {part} (~{PARTS.get(part, 0) / 60:.1f} min on a quiet machine); "
            f"{(now - state['start']) / 60:.1f} min so far; ~{left / 60:.0f} min left"
            + (f" (estimates x {pace:.2f}, this run's pace)" if state["done"] else ""))


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("start", "next", "end") or (argv[0] == "next" and len(argv) != 3):
        print("usage: progress.py start DIR | next DIR PART | end DIR", file=sys.stderr)
        return 2
    folder, now = Path(argv[1]), time.time()
    if argv[0] == "start":
        state = {"start": now, "done": {}, "current": None}
        (folder / ".bench-start").parent.mkdir(parents=True, exist_ok=True)
        (folder / ".bench-start").write_text(f"{now}\n")
        _save(folder, state)
        print(f"[bench] {len(PARTS)} parts, ~{sum(PARTS.values()) / 60:.0f} min on a quiet 2-core machine "
              "(longer on a busy one: noisy rounds are repeated)", flush=True)
        return 0
    state = _state(folder)
    _finish_current(state, now)
    if argv[0] == "next":
        print(line(state, argv[2], now), flush=True)
        state["current"] = [argv[2], now]
    else:
        print(f"[bench] all parts done in {(now - state['start']) / 60:.1f} min", flush=True)
    _save(folder, state)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
