"""Replay the fourth fault matrix of docs/faults.md (and the first and third matrices' refusals of bad input)
from the command line, as a user meets it, and print a table: each row's case, `ok` (the documented
behaviour), `short` (it fell short: what was seen instead) or `skip` (it needs what this machine lacks: the
full-disk rows mount a small tmpfs, which needs root).

    python scripts/faults.py              # every row (5 minutes on 2 busy cores, 1.5 minutes of CPU)
    python scripts/faults.py --rows 1,5   # some rows
    make faults                           # the same as the first line

Each row runs `python src/train.py ...`, `python -m ssgd.report` or a one-line script in a fresh temporary
folder and checks the exit status, the one line on stderr and the files left behind. Exit status 0 when no
row fell short, 1 otherwise. The in-process and pytest versions of these rows are in
tests/unit/test_faults_fourth.py and tests/integration/test_faults_fourth_cli.py.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from disks import small_disk, why_no_tmpfs  # noqa: E402

TRAIN = [sys.executable, str(ROOT / "src" / "train.py"), "trainer.progress=false", "wandb.mode=disabled"]
ENV = {**os.environ, "WANDB_SILENT": "true", "PYTHONPATH": str(ROOT / "src")}


class Short(Exception):
    """A row fell short: the message says what was seen."""


class Skip(Exception):
    """A row cannot be replayed here: the message says why."""


def run(cwd: Path, *args: str, cmd: list[str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*(cmd or TRAIN), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=ENV)


def expect(proc: subprocess.CompletedProcess, status: int, *pieces: str, one_line: bool = True) -> str:
    """Short unless `proc` exited `status` with (when `one_line`) one line on stderr holding every piece."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    seen = lines[-1] if lines else "(nothing on stderr)"
    if proc.returncode != status:
        raise Short(f"exit {proc.returncode}, not {status}: {seen[:150]}")
    if one_line and (len(lines) != 1 or "Traceback" in proc.stderr):
        raise Short(f"{len(lines)} lines on stderr, not one: {seen[:150]}")
    missing = [p for p in pieces if p not in proc.stderr + proc.stdout]
    if missing:
        raise Short(f"{missing[0]!r} not said: {seen[:150]}")
    return seen


@contextmanager
def disk(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (mount's -o size=..., further options after a comma) at `where` for the block."""
    reason = why_no_tmpfs()
    if reason:
        raise Skip(reason)
    try:
        with small_disk(where, size) as mounted:
            yield mounted
    except OSError as err:
        if "mount -t tmpfs" in str(err):
            raise Skip(str(err)) from None
        raise


def no_tmp(folder: Path) -> None:
    left = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.tmp"))
    if left:
        raise Short(f"temporary files left: {left}")


def valid_jsonl(path: Path) -> int:
    text = path.read_text()
    try:
        rows = [json.loads(line) for line in text.splitlines()]
    except ValueError:
        raise Short(f"{path.name} holds a line that is not JSON") from None
    if text and not text.endswith("\n"):
        raise Short(f"{path.name} ends mid-record")
    return len(rows)


# -- the rows -----------------------------------------------------------------------------------------
def row1(tmp: Path) -> str:
    with disk(tmp / "d", "2m") as d:
        proc = run(tmp, f"hydra.run.dir={d / 'run'}", "trainer.max_steps=40", "trainer.checkpoint_every_steps=10")
        line = expect(proc, 2, "checkpoint.pt: cannot write the checkpoint (No space left on device)")
        no_tmp(d)
    return line


def row2(tmp: Path) -> str:
    with disk(tmp / "d", "100k") as d:
        proc = run(tmp, f"hydra.run.dir={d / 'run'}", "trainer.max_steps=300", "trainer.log_every=1")
        line = expect(proc, 2, "metrics.jsonl: cannot write record ", "(No space left on device)")
        valid_jsonl(d / "run" / "metrics.jsonl")
        no_tmp(d)
    return line


def row3(tmp: Path) -> str:
    with disk(tmp / "d", "10m,nr_inodes=8") as d:     # room for the run's files, none for summary.json's
        proc = run(tmp, f"hydra.run.dir={d / 'run'}", "trainer.max_steps=2")
        line = expect(proc, 2, "summary.json: cannot write the run's summary (No space left on device)")
        no_tmp(d)
    return line


def row4(tmp: Path) -> str:
    with disk(tmp / "d", "100k") as d:
        proc = run(tmp, "-m", "seed=1,2,3", "trainer.max_steps=120", "trainer.log_every=1", *TRAIN[2:],
                   f"hydra.sweep.dir={d / 's'}", cmd=TRAIN[:2], timeout=400)
        if "Traceback" in proc.stderr or "Logging error" in proc.stderr:
            raise Short("a traceback on stderr")
        expect(proc, 2, "of 3 points failed", "(No space left on device)", one_line=False)
        if len([p for p in (d / "s").iterdir() if p.is_dir()]) != 3:
            raise Short("not every point ran")
        no_tmp(d)
    return [line for line in proc.stderr.splitlines() if line.startswith("sweep: ")][0]


BASE: list[Path] = []
"""A run of 4 steps with a checkpoint at step 4 and a record every step, made once and copied by rows 6-8."""


def finished_run(tmp: Path, *extra: str) -> Path:
    run_dir = tmp / "run"
    proc = run(tmp, f"hydra.run.dir={run_dir}", *extra)
    if proc.returncode != 0:
        raise Short(f"the first run failed: exit {proc.returncode}")
    return run_dir


def base_copy(tmp: Path) -> Path:
    """A copy of BASE's run in tmp/run (BASE made on first use, in its own temporary folder)."""
    if not BASE:
        where = Path(tempfile.mkdtemp(prefix="ssgd-faults-base-"))
        BASE.append(finished_run(where, "trainer.max_steps=4", "trainer.checkpoint_every_steps=2",
                                 "trainer.log_every=1"))
    shutil.copytree(BASE[0], tmp / "run")
    return tmp / "run"


def row5(tmp: Path) -> str:
    run_dir = finished_run(tmp, "trainer.max_steps=2")
    before = (run_dir / "summary.json").read_bytes(), (run_dir / "metrics.jsonl").read_bytes()
    proc = run(tmp, f"hydra.run.dir={run_dir}", "trainer.max_steps=2", "trainer.resume=auto")
    expect(proc, 0, "this run already finished at step 2", one_line=False)
    if ((run_dir / "summary.json").read_bytes(), (run_dir / "metrics.jsonl").read_bytes()) != before:
        raise Short("the finished run's files changed")
    return [line for line in proc.stdout.splitlines() if "already finished" in line][0]


def row6(tmp: Path) -> str:
    run_dir = base_copy(tmp)
    data = bytearray((run_dir / "checkpoint.pt").read_bytes())
    mid = len(data) // 2
    data[mid:mid + 42] = bytes(b ^ 0xFF for b in data[mid:mid + 42])
    (run_dir / "checkpoint.pt").write_bytes(bytes(data))
    proc = run(tmp, f"hydra.run.dir={run_dir}", "trainer.max_steps=6", "trainer.checkpoint_every_steps=2",
               "trainer.resume=auto")
    return expect(proc, 2, "damaged (its entry ", "does not match the CRC32")


def cut_and_resume(tmp: Path, cut: Callable[[list[str]], str]) -> tuple[subprocess.CompletedProcess, Path]:
    run_dir = base_copy(tmp)
    (run_dir / "summary.json").unlink()
    lines = (run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "metrics.jsonl").write_text(cut(lines))
    proc = run(tmp, f"hydra.run.dir={run_dir}", "trainer.max_steps=6", "trainer.checkpoint_every_steps=2",
               "trainer.log_every=1", "trainer.resume=auto")
    return proc, run_dir


def row7(tmp: Path) -> str:
    proc, run_dir = cut_and_resume(tmp, lambda lines: "".join(lines[:-1]) + lines[-1][:25])
    line = expect(proc, 0, "metrics.jsonl: dropped its last record, cut mid-line")
    valid_jsonl(run_dir / "metrics.jsonl")
    return line


def row8(tmp: Path) -> str:
    proc, _ = cut_and_resume(tmp, lambda lines: "".join(lines[:2]))
    return expect(proc, 0, "metrics.jsonl: it holds 2 of the ", "are missing")


def row9(tmp: Path) -> str:
    proc = run(tmp, "hydra.run.dir=out/r52_ünï日本", "trainer.max_steps=1")
    expect(proc, 0, one_line=False)
    if not (tmp / "out" / "r52_ünï日本" / "summary.json").is_file():
        raise Short("no summary.json in out/r52_ünï日本")
    return "exit 0, out/r52_ünï日本/summary.json"


def row10(tmp: Path) -> str:
    (tmp / "summary.json").write_text("nope\n")
    (tmp / "metrics.jsonl").write_text("garbage\n")
    proc = run(tmp, str(tmp), cmd=[sys.executable, "-m", "ssgd.report"])
    return expect(proc, 2, "summary.json: not a summary written by a run")


def row11(tmp: Path) -> str:
    code = "import torch, ssgd.ddp; ssgd.ddp.register(torch.nn.Linear(10, 2), compressor='gtopk')"
    proc = run(tmp, "-c", code, cmd=[sys.executable])
    return expect(proc, 1, "TypeError: ssgd.ddp.register: model is a torch.nn.modules.linear.Linear, not a "
                  "torch.nn.parallel.DistributedDataParallel", one_line=False)


def signalled(tmp: Path, args: list[str], progress: Callable[[], bool],
              ignore_sigint: bool) -> subprocess.CompletedProcess:
    """Start `args`, send SIGINT once `progress()` holds; the process's result (Short if it ignores the signal)."""
    preexec = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp, env=ENV,
                            preexec_fn=preexec)
    deadline = time.monotonic() + 240
    while not progress() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.terminate()
        proc.communicate(timeout=60)
        raise Short("still running 60 s after SIGINT") from None
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def records(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.is_file() else 0


def row12(tmp: Path) -> str:
    run_dir = tmp / "run"
    proc = signalled(tmp, [*TRAIN, f"hydra.run.dir={run_dir}", "trainer.epochs=1000", "trainer.log_every=1",
                           "backend=torch", "cluster.world_size=2"], lambda: records(run_dir / "metrics.jsonl") >= 2,
                     ignore_sigint=True)
    line = expect(proc, 130, "interrupted by SIGINT at step ")
    if not (run_dir / "checkpoint.pt").is_file():
        raise Short("no checkpoint written")
    return line


def sweep_sigint(tmp: Path) -> str:
    sweep = tmp / "s"
    proc = signalled(tmp, [TRAIN[0], TRAIN[1], "-m", "seed=1,2,3", "trainer.epochs=1000", "trainer.log_every=1",
                           *TRAIN[2:], f"hydra.sweep.dir={sweep}"],
                     lambda: any(records(p / "metrics.jsonl") >= 2 for p in sweep.glob("0-*")), ignore_sigint=False)
    return expect(proc, 130, "the sweep stopped in its point 0; the points after it were not run")


REFUSED = {      # earlier matrices' bad input: override -> a piece of its one line (exit 2, nothing written)
    "m1-option": ("compressor=foo", "error: compressor=foo: no such option; allowed: dense, "),
    "m1-key": ("+foo=1", "error: foo: unknown key; allowed: backend, "),
    "m1-range": ("compressor.density=1.5", "error: compressor.density=1.5: must be a number in (0, 1]"),
    "m1-rundir": ("hydra.run.dir=/sys/x", "error: hydra.run.dir=/sys/x: cannot write there ("),
    "m3-grammar": ("hydra.run.dir=out/a;touch x", "Hydra's override grammar refused a character"),
}


def refused(key: str) -> Callable[[Path], str]:
    """The row of REFUSED[key]: one line, exit 2, and nothing left in the folder it ran in."""
    def row(tmp: Path) -> str:
        override, piece = REFUSED[key]
        line = expect(run(tmp, override), 2, piece)
        if list(tmp.iterdir()):
            raise Short(f"left behind: {sorted(p.name for p in tmp.iterdir())}")
        return line
    return row


ROWS: dict[str, tuple[str, Callable[[Path], str]]] = {
    **{key: (f"'{override}'", refused(key)) for key, (override, _) in REFUSED.items()},
    "1": ("a full disk at a checkpoint (2 MiB tmpfs)", row1),
    "2": ("a full disk while metrics.jsonl is written (100 KiB)", row2),
    "3": ("a full disk while summary.json is written (no inode left)", row3),
    "4": ("a full disk during a 3-point sweep (100 KiB)", row4),
    "5": ("trainer.resume=auto into a finished run without checkpoint", row5),
    "6": ("a checkpoint with 42 bytes XOR-ed with 0xff", row6),
    "7": ("metrics.jsonl cut mid-line, then resume", row7),
    "8": ("metrics.jsonl short of the checkpoint's records, then resume", row8),
    "9": ("hydra.run.dir=out/r52_ünï日本", row9),
    "10": ("python -m ssgd.report on garbage files", row10),
    "11": ("ssgd.ddp.register(nn.Linear(10, 2))", row11),
    "12": ("SIGINT to backend=torch that inherited SIGINT ignored", row12),
    "sweep-sigint": ("SIGINT in a sweep's first point", sweep_sigint),
}


def replay(key: str) -> tuple[str, str, float]:
    """(result, what was seen, seconds) of one row, in a temporary folder removed after it."""
    tmp = Path(tempfile.mkdtemp(prefix=f"ssgd-faults-{key}-"))
    start = time.monotonic()
    try:
        result, seen = "ok", ROWS[key][1](tmp)
    except Short as short:
        result, seen = "short", str(short)
    except Skip as skip:
        result, seen = "skip", str(skip)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result, seen, time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated rows (default: all: {','.join(ROWS)})")
    keys = parser.parse_args(argv).rows.split(",")
    unknown = [k for k in keys if k not in ROWS]
    if unknown:
        print(f"error: --rows={unknown[0]}: no such row; allowed: {', '.join(ROWS)}", file=sys.stderr)
        return 2
    start, results = time.monotonic(), []
    print(f"{'row':<13} {'result':<6} {'s':>5}  case: what was seen")
    for key in keys:
        result, seen, took = replay(key)
        results.append(result)
        print(f"{key:<13} {result:<6} {took:5.1f}  {ROWS[key][0]}: {seen[:160]}", flush=True)
    if BASE:
        shutil.rmtree(BASE[0].parent, ignore_errors=True)
    counts = {r: results.count(r) for r in ("ok", "short", "skip")}
    print(f"faults: {counts['ok']} ok, {counts['short']} short, {counts['skip']} skipped in "
          f"{time.monotonic() - start:.0f} s")
    return 1 if counts["short"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
