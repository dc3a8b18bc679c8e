"""Replay docs/faults.md's fault matrices (the first, third and fourth) from the command line, as a user meets them,
and print a table with a line for every row of the docs: `ok` (the documented behaviour), `short` (it fell short:
what was seen instead) or `skip` (it needs what this machine lacks: root for the full-disk rows' small tmpfs,
`mpiexec`, a running SLURM cluster for the requeue rows). A row of the docs with no replay here would print
`test` and the test files that pin it (from the row's "test" column); every row has one now.

    python scripts/faults.py                  # every row (docs/faults.md gives the time)
    python scripts/faults.py --rows 1,m1-14   # some rows (the `#` column of docs/faults.md)
    make faults                               # the same as the first line

Each replayed row runs `python src/train.py ...`, `python -m ssgd.report`, `mpiexec`, `sbatch` or a one-line script
in a fresh temporary folder and checks the exit status, the one line on stderr and the files left behind. Exit
status 0 when no row fell short, 1 otherwise. tests/unit/test_faults_replay.py fails when a row of the docs is
neither replayed here nor pinned by an existing test file.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import socket
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from disks import small_disk, why_no_tmpfs  # noqa: E402
from procs import alive, processes_with  # noqa: E402

TRAIN = [sys.executable, str(ROOT / "src" / "train.py"), "trainer.progress=false", "wandb.mode=disabled"]
ENV = {**os.environ, "WANDB_SILENT": "true", "PYTHONPATH": str(ROOT / "src")}
DOC = ROOT / "docs" / "faults.md"
MATRICES = ("## Fault matrix", "## Third matrix", "## Fourth matrix")
LEGEND = {      # the letters of the docs' "test" column (each matrix's legend above it)
    "U": "tests/unit/test_faults_inprocess.py", "I": "tests/integration/test_faults.py",
    "S": "tests/unit/test_schema.py", "E": "tests/integration/test_entry.py", "M": "tests/integration/test_mpi.py",
    "T": "tests/unit/test_faults_third.py", "F": "tests/unit/test_faults_fourth.py",
    "FC": "tests/integration/test_faults_fourth_cli.py", "D": "tests/unit/test_faults_disks.py",
}


class DocRow(NamedTuple):
    """A row of a fault matrix of docs/faults.md: its `#`, its case (markdown) and the test files that pin it."""
    key: str
    case: str
    tests: tuple[str, ...]


def test_files(cell: str, previous: tuple[str, ...]) -> tuple[str, ...]:
    """The test files a "test" cell names: paths (`tests/...py`), the matrices' letters (LEGEND), or `same`
    (the row above's); notes in parentheses and backticked test names aside."""
    paths = re.findall(r"tests/[\w/]+\.py", cell)
    bare = re.sub(r"\([^)]*\)|`[^`]*`", " ", cell)
    letters = [LEGEND[w] for w in re.findall(r"[A-Z]+", bare) if w in LEGEND]
    same = previous if re.search(r"\bsame\b", bare) else ()
    return tuple(dict.fromkeys([*paths, *letters, *same]))


def doc_rows(text: str | None = None) -> list[DocRow]:
    """Every row of the matrices of docs/faults.md (`MATRICES`), in order: the first column is its `#`."""
    rows: list[DocRow] = []
    inside = False
    for line in (DOC.read_text() if text is None else text).splitlines():
        if line.startswith("## "):
            inside = line.startswith(MATRICES)
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if not inside or not line.startswith("| ") or cells[0] == "#" or len(cells) < 5:
            continue
        rows.append(DocRow(cells[0], cells[1], test_files(cells[-1], rows[-1].tests if rows else ())))
    return rows


class Short(Exception):
    """A row fell short: the message says what was seen."""


class Skip(Exception):
    """A row cannot be replayed here: the message says why."""


def run(cwd: Path, *args: str, cmd: list[str] | None = None, timeout: float = 300,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*(cmd or TRAIN), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**ENV, **(env or {})})


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


def signalled(tmp: Path, args: list[str], progress: Callable[[], bool], ignore_sigint: bool,
              signum: int = signal.SIGINT) -> subprocess.CompletedProcess:
    """Start `args`, send `signum` once `progress()` holds; the process's result (Short if it ignores it)."""
    preexec = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp, env=ENV,
                            preexec_fn=preexec)
    deadline = time.monotonic() + 240
    while not progress() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate(timeout=60)
        raise Short(f"still running 60 s after {signal.Signals(signum).name}") from None
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def code_not_run(marker: Path, line: str) -> str:
    """`line`, or Short when the file that a refused pickle's code would create exists."""
    if marker.exists():
        raise Short("the pickle's code ran")
    return line


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


def row9b(tmp: Path) -> str:
    line = expect(run(tmp, "hydra.run.dir=out/r52_ünï日本;x", "trainer.max_steps=1"), 2,
                  "refused ';' (no place in an unquoted value; nor are the letters outside ASCII",
                  "'hydra.run.dir=\"out/r52_ünï日本;x\"'")
    if (tmp / "out").exists():
        raise Short("a run folder was made")
    return line


def row13(tmp: Path) -> str:
    with disk(tmp / "d", "400k") as d:          # wandb.mode=offline, the default
        proc = run(tmp, f"hydra.run.dir={d / 'run'}", "trainer.max_steps=300", "trainer.log_every=1",
                   cmd=TRAIN[:3])
        line = expect(proc, 2, "metrics.jsonl: cannot write record ", "(No space left on device)")
        no_tmp(d)
    return line


def row14(tmp: Path) -> str:
    with disk(tmp / "d", "2m") as d:
        proc = run(tmp, f"hydra.run.dir={d / 'run'}", "backend=torch", "cluster.world_size=2", "trainer.max_steps=40",
                   "trainer.checkpoint_every_steps=10")
        line = expect(proc, 2, "checkpoint.pt: cannot write the checkpoint (No space left on device)")
        no_tmp(d)
    return line


# -- the first and third matrices (m1-*, m3-*) ---------------------------------------------------------
REFUSED = {      # bad input: override -> a piece of its one line (exit 2, nothing left in the folder it ran in)
    "m1-1": ("compressor=foo", "error: compressor=foo: no such option; allowed: dense, "),
    "m1-2": ("+foo=1", "error: foo: unknown key; allowed: backend, "),
    "m1-4": ("compressor.density=1.5", "error: compressor.density=1.5: must be a number in (0, 1]"),
    "m1-5": ("schedule.warmup_start=-1", "error: schedule.warmup_start=-1: must be null (lr / world_size) or a "),
    "m1-7": ("dataset=mnist", "error: dataset.data_dir='data/mnist': no such directory (dataset=mnist reads "),
    "m1-8": ("cluster.world_size=10000", "x cluster.world_size=10000 = 320000 samples per step, more than the "),
    "m1-13": ("hydra.run.dir=/sys/x", "error: hydra.run.dir=/sys/x: cannot write there ("),
    "m3-19": ("hydra.run.dir=out/a;touch x", "Hydra's override grammar refused ';' (no place in an unquoted value)"),
}


def refused(key: str) -> Callable[[Path], str]:
    """The row of REFUSED[key]: one line, exit 2, and nothing left in the folder it ran in."""
    def row(tmp: Path) -> str:
        override, piece = REFUSED[key]
        line = expect(run(tmp, override), 2, piece)
        nothing_left(tmp)
        return line
    return row


def nothing_left(tmp: Path) -> None:
    if list(tmp.iterdir()):
        raise Short(f"left behind: {sorted(p.name for p in tmp.iterdir())}")


def m1_wandb_without_key(tmp: Path) -> str:
    no_key = {"WANDB_API_KEY": "", "NETRC": str(tmp / "no-netrc"), "HOME": str(tmp / "home")}
    (tmp / "home").mkdir()
    line = expect(run(tmp, "wandb.mode=online", cmd=TRAIN[:3], env=no_key), 2,
                  "error: wandb.mode=online: no wandb API key here")
    if [p.name for p in tmp.iterdir()] != ["home"] or list((tmp / "home").iterdir()):
        raise Short("something was written")
    return line


def m1_holds_another_run(tmp: Path) -> str:
    run_dir = tmp / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "train/loss": 2.3}\n')
    (run_dir / "summary.json").write_text('{"steps": 1}\n')
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    line = expect(run(tmp, f"hydra.run.dir={run_dir}", "trainer.max_steps=1"), 2,
                  f"error: hydra.run.dir={run_dir}: already holds a run (metrics.jsonl, summary.json)")
    if {p.name: p.read_bytes() for p in run_dir.iterdir()} != before:
        raise Short("the folder changed")
    return line


def m1_resume_another_seed(tmp: Path) -> str:
    checkpoint = base_copy(tmp) / "checkpoint.pt"
    return expect(run(tmp, f"trainer.resume={checkpoint}", "seed=12345", f"hydra.run.dir={tmp / 'new'}"), 2,
                  f"error: trainer.resume='{checkpoint}': written by a run with seed=", "this run has seed=12345 (",
                  "trainer.resume_weights_only=true starts a new run from its weights only)")


def mpiexec_or_skip() -> str:
    """The mpiexec that backend=mpi runs; Skip where there is none."""
    sys.path.insert(0, str(ROOT / "src"))
    from ssgd.errors import ConfigError
    from ssgd.run.launch_mpi import mpiexec_path
    try:
        return mpiexec_path()
    except ConfigError as err:
        raise Skip(str(err)) from None


def m1_rank_count(tmp: Path) -> str:
    """`mpiexec -n 3` of a worker config written for 2 ranks (`mpi.launch=false` writes it)."""
    mpiexec = mpiexec_or_skip()
    from ssgd.run.launch_mpi import worker_command, worker_env
    config = tmp / "run" / "worker_config.yaml"
    expect(run(tmp, "backend=mpi", "cluster.world_size=2", "mpi.launch=false", f"hydra.run.dir={tmp / 'run'}"), 0,
           one_line=False)
    proc = run(tmp, "-n", "3", *worker_command(config), cmd=[mpiexec], timeout=120, env=worker_env(local=True))
    expect(proc, 2, "cluster.world_size=2 but this MPI job has 3 ranks", one_line=False)
    return next(line for line in proc.stderr.splitlines() if "but this MPI job has 3 ranks" in line)


def sigterm_after_two_steps(tmp: Path, *extra: str) -> tuple[str, Path]:
    """SIGTERM to a long run of `extra` once it logged 2 steps: (its one line, its run folder); Short unless it
    exits 143 with a checkpoint and no summary.json."""
    run_dir = tmp / "run"
    proc = signalled(tmp, [*TRAIN, f"hydra.run.dir={run_dir}", "trainer.epochs=1000", "trainer.log_every=1", *extra],
                     lambda: records(run_dir / "metrics.jsonl") >= 2, ignore_sigint=False, signum=signal.SIGTERM)
    line = expect(proc, 143, "interrupted by SIGTERM at step ", "wrote ", "trainer.resume=auto")
    if not (run_dir / "checkpoint.pt").is_file() or (run_dir / "summary.json").exists():
        raise Short("no checkpoint, or a summary.json")
    return line, run_dir


def m1_sigterm(tmp: Path) -> str:
    return sigterm_after_two_steps(tmp)[0]


def rank_fails(tmp: Path, mode: str) -> subprocess.CompletedProcess:
    """A 2-rank backend=mpi run whose rank 1 fails at step 3 by `mode` (debug.fail_mode: raise, kill, ...)."""
    return run(tmp, "backend=mpi", "cluster.world_size=2", "debug.fail_rank=1", "debug.fail_step=3",
               f"debug.fail_mode={mode}", f"hydra.run.dir={tmp / 'run'}", timeout=180,
               env={"SSGD_RANK_HOOK": str(ROOT / "tests" / "rank_faults.py")})


def m1_rank_raises(tmp: Path) -> str:
    proc = rank_fails(tmp, "raise")
    return expect(proc, 1, "error: backend=mpi: rank 1 failed: RuntimeError: injected failure at step 3 "
                  "(debug.fail_rank=1) (traceback in ")


def m1_sweep_bad_point(tmp: Path) -> str:
    proc = run(tmp, "-m", "compressor.density=0.01,1.5,0.001", "trainer.max_steps=2", *TRAIN[2:],
               f"hydra.sweep.dir={tmp / 's'}", cmd=TRAIN[:2])
    expect(proc, 2, "sweep: 1 of 3 points failed", one_line=False)
    if not list((tmp / "s").glob("1-*/error.txt")) or len(list((tmp / "s").glob("*/summary.json"))) != 2:
        raise Short("not 2 summaries and the bad point's error.txt")
    return [line for line in proc.stderr.splitlines() if line.startswith("sweep: ")][0]


class Code:
    """Pickles as a call of os.system: what a checkpoint must never run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return os.system, (f"touch {self.marker}",)


def m3_pickle_with_code(tmp: Path) -> str:
    import torch   # only this row needs it here

    marker, evil = tmp / "ran", tmp / "evil.pt"
    torch.save({"shared": {"params": [Code(marker)]}, "ranks": {}}, evil)
    line = expect(run(tmp, f"trainer.resume={evil}", f"hydra.run.dir={tmp / 'new'}"), 2,
                  f"error: trainer.resume='{evil}': refused, its pickle names posix.system", "nothing in it was run")
    return code_not_run(marker, line)


def m3_resume_other_lr(tmp: Path) -> str:
    checkpoint = base_copy(tmp) / "checkpoint.pt"
    return expect(run(tmp, f"trainer.resume={checkpoint}", "optimizer.lr=0.05", f"hydra.run.dir={tmp / 'new'}"), 2,
                  "written by a run with optimizer.lr=0.1", "this run has optimizer.lr=0.05 "
                  "(trainer.resume_changes=[optimizer.lr] allows the change")


def m3_port_in_use(tmp: Path) -> str:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        line = expect(run(tmp, "backend=torch", "cluster.world_size=2", f"dist.master_port={port}",
                          f"hydra.run.dir={tmp / 'run'}"), 2,
                      f"error: dist.master_port={port}: port {port} is already in use on this host")
    return line


def m3_wandb_mode_bogus(tmp: Path) -> str:
    line = expect(run(tmp, cmd=TRAIN[:3], env={"WANDB_MODE": "bogus"}), 2,
                  "error: WANDB_MODE=bogus: must be one of disabled, offline, online (or unset)")
    nothing_left(tmp)
    return line


# -- more rows of the first matrix (m1-*) ---------------------------------------------------------------------------
def refusing(*cases: tuple[str, str]) -> Callable[[Path], str]:
    """A row of bad input: each (overrides, piece) is refused with one line holding the piece, exit 2, and
    nothing left in the folder it ran in (its own under tmp)."""
    def row(tmp: Path) -> str:
        lines = []
        for i, (overrides, piece) in enumerate(cases):
            (tmp / str(i)).mkdir()
            lines.append(expect(run(tmp / str(i), *overrides.split()), 2, piece))
            nothing_left(tmp / str(i))
        return " / ".join(lines)
    return row


def m1_wandb_no_network(tmp: Path) -> str:
    """wandb online with a key, its server an address on this host where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]           # closed below: nothing listens there
    (tmp / "home").mkdir()
    env = {"WANDB_API_KEY": "k" * 40, "WANDB_BASE_URL": f"http://127.0.0.1:{port}", "WANDB_INIT_TIMEOUT": "3",
           "HOME": str(tmp / "home")}
    proc = run(tmp, "wandb.mode=online", "trainer.max_steps=1", f"hydra.run.dir={tmp / 'run'}", cmd=TRAIN[:3],
               env=env, timeout=120)
    return expect(proc, 2, "error: wandb.mode=online: ", "wandb.mode=offline needs no network")


def m1_resume_another_model(tmp: Path) -> str:
    checkpoint = base_copy(tmp) / "checkpoint.pt"
    return expect(run(tmp, f"trainer.resume={checkpoint}", "model=cnn", "dataset=synthetic_mnist",
                      f"hydra.run.dir={tmp / 'new'}"), 2,
                  f"error: trainer.resume='{checkpoint}': written for a model with 199210 parameters; this run's "
                  "model has ")


def m1_resume_no_checkpoint(tmp: Path) -> str:
    (tmp / "junk.pt").write_text("not a checkpoint")
    lines = [expect(run(tmp, f"trainer.resume={tmp / name}", f"hydra.run.dir={tmp / name}-run"), 2,
                    f"error: trainer.resume='{tmp / name}': {piece}")
             for name, piece in (("nothing.pt", "no such checkpoint file"),
                                 ("junk.pt", "not a checkpoint of this project ("))]
    return " / ".join(lines)


def m1_diverged(tmp: Path) -> str:
    import torch   # only the rows that read a checkpoint need it here

    run_dir = tmp / "run"
    line = expect(run(tmp, f"hydra.run.dir={run_dir}", "compressor=dense", "optimizer.lr=30",
                      "trainer.batch_size=256", "trainer.epochs=6", "trainer.checkpoint_every=1"), 3,
                  "error: diverged: the training loss or the weights were not finite at step ")
    diverged = json.loads((run_dir / "summary.json").read_text()).get("diverged_at_step")
    saved = torch.load(run_dir / "checkpoint.pt", weights_only=False)["shared"]
    if diverged is None or not diverged > saved["step"] > 0:
        raise Short(f"diverged_at_step {diverged}, the checkpoint's step {saved['step']}")
    if not all(bool(torch.isfinite(p).all()) for p in saved["params"]):
        raise Short("the checkpoint holds non-finite weights")
    return f"{line} (checkpoint of step {saved['step']} kept, finite)"


def m1_sigterm_mpi(tmp: Path) -> str:
    mpiexec_or_skip()
    line, run_dir = sigterm_after_two_steps(tmp, "backend=mpi", "cluster.world_size=2")
    if not line.startswith("error: "):
        raise Short(f"not one error line: {line!r}")
    if processes_with(str(run_dir / "worker_config.yaml")):
        raise Short("a rank or mpiexec is still running after the launcher exited")
    return line


def pending(pid: int, signum: int) -> bool:
    """Whether `signum` waits to be delivered to process `pid` (its /proc status: SigPnd, ShdPnd)."""
    try:
        masks = [int(line.split()[1], 16) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                 if line.startswith(("SigPnd:", "ShdPnd:"))]
    except OSError:
        return False
    return any(mask >> (signum - 1) & 1 for mask in masks)


def m1_second_signal(tmp: Path) -> str:
    """A SIGINT once a step is logged, a second 0.02 s after the first was delivered: inside one step
    (500 virtual ranks of 8 samples: a step takes about a second of CPU, many times that gap)."""
    run_dir = tmp / "run"

    def first_sent() -> bool:
        if records(run_dir / "metrics.jsonl") < 1:
            return False
        for pid in processes_with(f"hydra.run.dir={run_dir}"):
            os.kill(pid, signal.SIGINT)
            deadline = time.monotonic() + 5
            while pending(pid, signal.SIGINT) and time.monotonic() < deadline:
                time.sleep(0.001)
        time.sleep(0.02)                        # the Python handler runs between two small torch calls
        return True
    proc = signalled(tmp, [*TRAIN, f"hydra.run.dir={run_dir}", "trainer.epochs=1000", "trainer.log_every=1",
                           "cluster.world_size=500", "trainer.batch_size=8"], first_sent, ignore_sigint=False)
    line = expect(proc, 130, "error: interrupted by SIGINT twice: stopped at once, without writing a checkpoint")
    if (run_dir / "checkpoint.pt").exists() or (run_dir / "summary.json").exists():
        raise Short("a checkpoint or a summary.json was written")
    return line


def m1_rank_killed(tmp: Path) -> str:
    mpiexec_or_skip()
    return expect(rank_fails(tmp, "kill"), 137, "error: backend=mpi: rank 1 (node ", ") was killed by signal 9 (SIGKILL)")


def m1_kill_and_resume(tmp: Path) -> str:
    """kill -9 after a checkpoint and later steps, then the same command with trainer.resume=auto; the
    uninterrupted run beside it (started first, so that it runs while the other is killed and resumed)."""
    args = ["trainer.max_steps=100", "trainer.checkpoint_every_steps=3", "trainer.log_every=1"]
    run_dir, straight = tmp / "run", tmp / "straight"
    beside = subprocess.Popen([*TRAIN, *args, f"hydra.run.dir={straight}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, cwd=tmp, env=ENV)
    killed = signalled(tmp, [*TRAIN, *args, f"hydra.run.dir={run_dir}"], lambda: (run_dir / "checkpoint.pt").is_file()
                       and records(run_dir / "metrics.jsonl") >= 5, ignore_sigint=False, signum=signal.SIGKILL)
    if killed.returncode != -signal.SIGKILL or beside.wait(timeout=240) != 0:
        raise Short(f"the first run was not killed (exit {killed.returncode}), or the uninterrupted one failed")
    seen = records(run_dir / "metrics.jsonl")
    expect(run(tmp, *args, f"hydra.run.dir={run_dir}", "trainer.resume=auto"), 0, one_line=False)
    steps = [json.loads(r)["step"] for r in (run_dir / "metrics.jsonl").read_text().splitlines() if "train/loss" in r]
    if steps != list(range(1, 101)):
        raise Short(f"metrics.jsonl logs steps {steps[:3]}...{steps[-3:]} ({len(steps)}), not 1..100 once each")
    summaries = [{k: v for k, v in json.loads((d / "summary.json").read_text()).items()
                  if not k.startswith("time/") and k not in ("wall_s", "throughput/here")} for d in (run_dir, straight)]
    if summaries[0] != summaries[1]:
        raise Short(f"the summary differs from the uninterrupted run's in "
                    f"{sorted(k for k in summaries[0] if summaries[0][k] != summaries[1].get(k))}")
    return f"killed after {seen} records; resumed to step 100, every step logged once, the summary equals the " \
           "uninterrupted run's"


def m1_same_second(tmp: Path) -> str:
    """Two runs at once whose run directory is the default's (conf/config.yaml) with its date and time fixed,
    as if started in the same second: the random suffix keeps them apart."""
    import yaml

    default = yaml.safe_load((ROOT / "src" / "ssgd" / "conf" / "config.yaml").read_text())["hydra"]["run"]["dir"]
    same = "hydra.run.dir=" + re.sub(r"\$\{now:[^}]*\}", "same-second", default)
    procs = [subprocess.Popen([*TRAIN, "trainer.max_steps=1", same], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, cwd=tmp, env=ENV) for _ in range(2)]
    for proc in procs:
        expect(subprocess.CompletedProcess(proc.args, proc.wait(timeout=120), "", proc.stderr.read()), 0,
               one_line=False)
    dirs = sorted(str(p.parent.relative_to(tmp)) for p in tmp.rglob("summary.json"))
    if len(dirs) != 2:
        raise Short(f"{len(dirs)} run directories with a summary.json, not 2")
    return f"two directories: {dirs[0]}, {dirs[1]}"


M1_MORE: dict[str, Callable[[Path], str]] = {
    "m1-3": refusing(("+optimizer.lrr=0.5", "error: optimizer.lrr: unknown key for torch.optim.SGD; allowed: "
                      "dampening, ")),
    "m1-6": refusing(("model=lstm", "error: model=lstm needs a token dataset, but dataset "),
                     ("model=alexnet dataset=synthetic_cifar10", "error: model=alexnet needs RGB image data of "
                      "shape (3, H, W) with H, W >= ")),
    "m1-9": refusing(("backend=mpi trainer.batch_size=2000", "error: trainer.batch_size=2000 x cluster.world_size=4 "
                      "= 8000 samples per step, more than the 4000 training samples")),
    "m1-10": refusing(("model=resnet50 dataset=synthetic_imagenet64 dataset.n_train=1000000 trainer.batch_size=1 "
                       "cluster.world_size=100000", "error: cluster.world_size=100000: needs about 20445.6 GB for "
                       "100000 virtual ranks' residuals and compressor buffers (2 x 25,557,032 parameters x 4 B "
                       "each), but ")),
    "m1-12": m1_wandb_no_network, "m1-16": m1_resume_another_model, "m1-17": m1_resume_no_checkpoint,
    "m1-19": m1_diverged, "m1-21": m1_sigterm_mpi, "m1-22": m1_second_signal, "m1-24": m1_rank_killed,
    "m1-25": m1_kill_and_resume, "m1-27": m1_same_second,
}
"""First-matrix rows replayed by the functions above this line."""


# -- more rows of the third matrix (m3-2 ... m3-13) ------------------------------------------------------------------


def m3_checkpoint_missing_parts(tmp: Path) -> str:
    import torch   # only the rows that write a file for torch.load need it here

    thin = tmp / "thin.pt"
    torch.save({"shared": {}, "ranks": {}}, thin)
    return expect(run(tmp, f"trainer.resume={thin}", f"hydra.run.dir={tmp / 'new'}"), 2,
                  f"error: trainer.resume='{thin}': not a checkpoint of this project (shared state has no list "
                  "'params')")


def m3_cifar_batch_with_code(tmp: Path) -> str:
    import pickle

    marker, data = tmp / "ran", tmp / "cifar"
    data.mkdir()
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:     # every file of the layout
        (data / name).write_bytes(pickle.dumps({b"data": Code(marker), b"labels": [0]}))
    line = expect(run(tmp, "dataset=cifar10", f"dataset.data_dir={data}", f"hydra.run.dir={tmp / 'new'}"), 2,
                  f"error: dataset=cifar10: '{data}/", "' is not a CIFAR-10 python batch (UnpicklingError: names "
                  "posix.system, which a CIFAR-10 batch never does; refused without running it)")
    return code_not_run(marker, line)


def m3_resume_adam(tmp: Path) -> str:
    checkpoint = base_copy(tmp) / "checkpoint.pt"
    return expect(run(tmp, f"trainer.resume={checkpoint}", "optimizer=adam", f"hydra.run.dir={tmp / 'new'}"), 2,
                  "written by a run with optimizer=torch.optim.SGD", "this run has optimizer=torch.optim.Adam")


RESUME_AUTO = ("trainer.max_steps=5", "trainer.checkpoint_every_steps=2", "trainer.log_every=1", "trainer.resume=auto")
"""A resume of BASE's run (its checkpoint at step 4, the last of 4) into one more step."""


def resumed_with_change(tmp: Path, key: str, old: object, new: object) -> str:
    """`key=new` resumes BASE's copy (`key` was `old`) with trainer.resume_changes=[key]: exit 0, one record
    in resumes.jsonl; returns it."""
    run_dir = base_copy(tmp)
    expect(run(tmp, f"hydra.run.dir={run_dir}", *RESUME_AUTO, f"{key}={new}", f"trainer.resume_changes=[{key}]"),
           0, one_line=False)
    record = {"step": 4, "key": key, "old": old, "new": new}
    lines = (run_dir / "resumes.jsonl").read_text().splitlines() if (run_dir / "resumes.jsonl").is_file() else []
    if [json.loads(line) for line in lines] != [record]:
        raise Short(f"resumes.jsonl holds {lines}, not {json.dumps(record)}")
    return f"resumes.jsonl: {json.dumps(record)}"


def m3_allowed_lr_change(tmp: Path) -> str:
    recorded = resumed_with_change(tmp, "optimizer.lr", 0.1, 0.05)
    line = expect(run(tmp, f"hydra.run.dir={tmp / 'run'}", *RESUME_AUTO, "trainer.resume_changes=[optimizer.lrr]"),
                  2, "trainer.resume_changes=['optimizer.lrr']: 'optimizer.lrr' is not")
    return f"exit 0, {recorded}; then exit 2: {line[:80]}..."


def m3_resume_other_wire(tmp: Path) -> str:
    checkpoint = base_copy(tmp) / "checkpoint.pt"
    line = expect(run(tmp, f"trainer.resume={checkpoint}", "compressor.wire.values=fp16",
                      f"hydra.run.dir={tmp / 'new'}"), 2,
                  "written by a run with compressor.wire.values=fp32; this run has compressor.wire.values=fp16 "
                  "(trainer.resume_changes=[compressor.wire.values] allows the change")
    shutil.rmtree(tmp / "run")
    return f"{line[:90]}...; with the key allowed: exit 0, " + resumed_with_change(
        tmp, "compressor.wire.values", "fp32", "fp16")


def of_run(run_dir: Path) -> list[int]:
    """Processes of the run's job (launchers, ranks): its worker config is on their command line."""
    return processes_with(str(run_dir / "worker_config.yaml"))


def gone_within(pids: list[int], run_dir: Path | None, limit_s: float) -> float:
    """Seconds until none of `pids` nor (given `run_dir`) any process of the run is left; Short (naming them)
    after `limit_s`."""
    start = time.monotonic()
    while left := sorted({*[p for p in pids if alive(p)], *(of_run(run_dir) if run_dir else [])}):
        if time.monotonic() - start > limit_s:
            raise Short(f"{len(left)} processes left {limit_s:.0f} s after: {left}")
        time.sleep(0.1)
    return time.monotonic() - start


class Job(NamedTuple):
    """A run of `long_run`: its launcher, its folder and the processes below the launcher."""
    proc: subprocess.Popen
    run_dir: Path
    below: list[int]


@contextmanager
def long_run(tmp: Path, *args: str) -> Iterator[Job]:
    """A run of `args` (1000 epochs, a record a step; stderr in tmp/stderr.txt) once it has logged 2 records;
    afterwards every process it started is continued and killed."""
    sys.path.insert(0, str(ROOT / "src"))
    from ssgd.run.launch_mpi import descendants
    run_dir = tmp / "run"
    with open(tmp / "stderr.txt", "w") as err:
        proc = subprocess.Popen([*TRAIN, f"hydra.run.dir={run_dir}", "trainer.epochs=1000", "trainer.log_every=1",
                                 *args], stdout=subprocess.DEVNULL, stderr=err, cwd=tmp, env=ENV)
    below: list[int] = []
    try:
        deadline = time.monotonic() + 240
        while records(run_dir / "metrics.jsonl") < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if proc.poll() is not None or records(run_dir / "metrics.jsonl") < 2:
            raise Short(f"no 2 steps logged (exit {proc.poll()}): {(tmp / 'stderr.txt').read_text()[-150:]}")
        below = descendants(proc.pid)
        yield Job(proc, run_dir, below)
    finally:
        for pid in [proc.pid, *below, *of_run(run_dir)]:
            if alive(pid):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        proc.wait()


def ended(tmp: Path, proc: subprocess.Popen, timeout: float) -> subprocess.CompletedProcess:
    """The result of a `long_run`'s launcher once it exits (Short after `timeout` seconds)."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Short(f"still running {timeout:.0f} s on") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", (tmp / "stderr.txt").read_text())


def m3_kill_9_launcher(backend: str) -> Callable[[Path], str]:
    """kill -9 of the `backend` launcher of 2 ranks: every process below it gone within 10 s."""
    def row(tmp: Path) -> str:
        if backend == "mpi":
            mpiexec_or_skip()
        with long_run(tmp, f"backend={backend}", "cluster.world_size=2") as job:
            job.proc.kill()
            job.proc.wait()
            took = gone_within(job.below, job.run_dir, 10.0)
        return f"kill -9 of the launcher: all {len(job.below)} processes below it gone {took:.1f} s after"
    return row


def environ_rank(pid: int) -> int | None:
    try:
        found = re.search(rb"(?:^|\0)RANK=(\d+)\0", Path(f"/proc/{pid}/environ").read_bytes())
    except OSError:
        return None
    return int(found.group(1)) if found else None


def m3_stuck_rank(tmp: Path) -> str:
    """Rank 1 of backend=torch stopped (SIGSTOP), so rank 0 waits in a collective where its SIGTERM handler
    never runs; kill -9 of the launcher: rank 0's watchdog SIGKILLs it (then rank 1, continued, goes too)."""
    with long_run(tmp, "backend=torch", "cluster.world_size=2") as job:
        ranks = {environ_rank(pid): pid for pid in job.below}
        if set(ranks) != {0, 1}:
            raise Short(f"not ranks 0 and 1 below the launcher: {ranks}")
        os.kill(ranks[1], signal.SIGSTOP)
        time.sleep(1.0)                                   # rank 0 reaches the collective
        job.proc.kill()
        job.proc.wait()
        took = gone_within([ranks[0]], None, 7.0)        # the watchdog: 0.5 s poll, 6 s grace
        if took < 5.0:
            raise Short(f"rank 0 gone {took:.1f} s after: its SIGTERM handler ran, not the watchdog's SIGKILL")
        os.kill(ranks[1], signal.SIGCONT)
        then = gone_within([ranks[1]], job.run_dir, 10.0)
    return f"rank 0, stuck in a collective, gone {took:.1f} s after kill -9; rank 1, continued, {then:.1f} s after"


def m3_sighup(*args: str) -> Callable[[Path], str]:
    """SIGHUP to the launcher of `args` (a threads run when empty): exit 129, one line, a checkpoint, no summary,
    every rank gone within 10 s."""
    def row(tmp: Path) -> str:
        with long_run(tmp, *args) as job:
            job.proc.send_signal(signal.SIGHUP)
            sent = time.monotonic()
            line = expect(ended(tmp, job.proc, 60), 129, "error: interrupted by SIGHUP at step ",
                          f"wrote {job.run_dir / 'checkpoint.pt'}; ")
            gone_within(job.below, job.run_dir, 1.0)
            took = time.monotonic() - sent
        if job.below and took > 10.0:
            raise Short(f"its ranks were gone {took:.1f} s after SIGHUP, not within 10 s")
        if not (job.run_dir / "checkpoint.pt").is_file() or (job.run_dir / "summary.json").exists():
            raise Short("no checkpoint, or a summary.json")
        return f"{line[:100]}... ({took:.1f} s after SIGHUP)"
    return row


def m3_stopped_mpi_rank(tmp: Path) -> str:
    mpiexec_or_skip()
    with long_run(tmp, "backend=mpi", "cluster.world_size=2", "mpi.timeout_s=3") as job:
        beat = json.loads((job.run_dir / "mpi" / "heartbeat" / "rank1.json").read_text())
        os.kill(beat["pid"], signal.SIGSTOP)
        sent = time.monotonic()
        line = expect(ended(tmp, job.proc, 30), 1, f"error: backend=mpi: rank 1 on host {socket.gethostname()} made "
                      f"no progress for 3 s (mpi.timeout_s=3): its last heartbeat (pid {beat['pid']}) was at step ",
                      "stopped the MPI job")
        took = time.monotonic() - sent
        gone_within(job.below, job.run_dir, 1.0)
    if took > 3 + 8:
        raise Short(f"the job ended {took:.1f} s after the SIGSTOP")
    return f"{line[:110]}... (ended {took:.1f} s after SIGSTOP, no rank left)"


M3_MORE: dict[str, Callable[[Path], str]] = {
    "m3-2": m3_checkpoint_missing_parts, "m3-3": m3_cifar_batch_with_code, "m3-4": m3_resume_adam,
    "m3-6": m3_allowed_lr_change, "m3-7": m3_resume_other_wire, "m3-8": m3_kill_9_launcher("mpi"),
    "m3-9": m3_kill_9_launcher("torch"), "m3-10": m3_stuck_rank, "m3-11": m3_sighup(),
    "m3-12": m3_sighup("backend=torch", "cluster.world_size=2"), "m3-13": m3_stopped_mpi_rank,
}
"""Third-matrix rows m3-2 ... m3-13 replayed by the functions above this line."""


# -- more rows of the third matrix (m3-15 ... m3-25) and of this page's fourth (15, 16, 18) ---------------------------


RANK_HOOK = {"SSGD_RANK_HOOK": str(ROOT / "tests" / "rank_faults.py")}
TORCH2 = ("backend=torch", "cluster.world_size=2")


def one_stderr_line(proc: subprocess.CompletedProcess, status: int, *pieces: str, absent: str = "") -> str:
    """`expect` with a word that must not be on stderr (a banner, a C++ source path)."""
    line = expect(proc, status, *pieces)
    if absent and absent in proc.stderr:
        raise Short(f"{absent!r} on stderr: {line[:150]}")
    return line


def m3_killed_torch_rank(tmp: Path) -> str:
    proc = run(tmp, *TORCH2, "trainer.max_steps=20", "debug.fail_rank=1", "debug.fail_step=3", "debug.fail_mode=kill",
               f"hydra.run.dir={tmp / 'run'}", timeout=180, env=RANK_HOOK)
    line = one_stderr_line(proc, 1, "error: backend=torch: rank 1 was killed by signal 9 (SIGKILL); ",
                           "the other ranks were stopped", absent="GLHF")     # rank 0's reset may be named between
    if "third_party" in proc.stderr:
        raise Short(f"torch's C++ source path on stderr: {line[:150]}")
    return line


def checkpoint_intact(path: Path) -> None:
    import zipfile
    try:
        bad = zipfile.ZipFile(path).testzip()
    except (OSError, zipfile.BadZipFile) as err:
        raise Short(f"{path.name} is not whole: {err}") from None
    if bad is not None:
        raise Short(f"{path.name}: its entry {bad} does not match its CRC32")


def m3_second_checkpoint_full(tmp: Path) -> str:
    with disk(tmp / "d", "7m") as d:            # the first 4.8 MB checkpoint fits, its successor does not
        proc = run(tmp, f"hydra.run.dir={d / 'run'}", "trainer.max_steps=4", "trainer.checkpoint_every_steps=2")
        line = expect(proc, 2, "checkpoint.pt: cannot write the checkpoint (No space left on device)",
                      "the previous checkpoint is kept")
        no_tmp(d)
        checkpoint_intact(d / "run" / "checkpoint.pt")
    return line


def m3_wandb_mode_from_env(tmp: Path) -> str:
    run_dir = tmp / "run"
    expect(run(tmp, f"hydra.run.dir={run_dir}", "trainer.max_steps=1", cmd=TRAIN[:3], env={"WANDB_MODE": "disabled"}),
           0, one_line=False)
    if (run_dir / "wandb").exists() or "mode: disabled" not in (run_dir / ".hydra" / "config.yaml").read_text():
        raise Short("a wandb folder, or .hydra/config.yaml without wandb's mode: disabled")
    return "exit 0, .hydra/config.yaml says mode: disabled, no wandb folder"


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` and its bytes (None for a folder)."""
    return {str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes()) for p in sorted(folder.rglob("*"))}


BASE_ARGS = ("trainer.max_steps=4", "trainer.checkpoint_every_steps=2", "trainer.log_every=1")
"""BASE's settings: the same command again is a resume of a finished run."""


def m3_resume_finished(tmp: Path) -> str:
    run_dir = base_copy(tmp)
    before = tree(run_dir)
    proc = run(tmp, f"hydra.run.dir={run_dir}", *BASE_ARGS, "trainer.resume=auto")
    expect(proc, 0, "this run already finished at step 4 (summary.json); nothing to do, nothing changed",
           one_line=False)
    if tree(run_dir) != before:
        raise Short("a byte of the finished run changed")
    return next(line for line in proc.stdout.splitlines() if "already finished" in line)


def m3_refused_run_leaves_folder(tmp: Path) -> str:
    new = tmp / "new" / "run"
    line = expect(run(tmp, "compressor.density=1.5", f"hydra.run.dir={new}"), 2, "compressor.density=1.5")
    if (tmp / "new").exists():
        raise Short("the refused run left its new folder")
    run_dir = base_copy(tmp)
    before = tree(run_dir)
    expect(run(tmp, f"hydra.run.dir={run_dir}", *BASE_ARGS, "trainer.resume=auto", "optimizer.lr=0.05"), 2,
           "written by a run with optimizer.lr=0.1")
    if tree(run_dir) != before:
        raise Short("a byte of the finished run changed (.hydra/, train.log, ...)")
    return f"{line[:80]}...; the lr refusal left every byte of the finished run"


def m3_two_runs_one_folder(tmp: Path) -> str:
    run_dir = tmp / "run"
    procs = [subprocess.Popen([*TRAIN, f"seed={seed}", "trainer.max_steps=2", "trainer.resume=auto",
                               f"hydra.run.dir={run_dir}"], cwd=tmp, env=ENV, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for seed in (1, 2)]
    try:
        outs = [subprocess.CompletedProcess(p.args, p.wait(timeout=180), *p.communicate()) for p in procs]
    finally:
        for p in procs:
            p.kill()
    if sorted(p.returncode for p in outs) != [0, 2]:
        raise Short(f"exit statuses {[p.returncode for p in outs]}, not 0 and 2")
    seed = 1 if outs[0].returncode == 0 else 2
    line = expect(outs[2 - seed], 2)
    if "another run is using this directory right now (it holds its lock)" not in line and \
            "written by a run with seed=" not in line:
        raise Short(f"refused for another reason: {line[:150]}")
    if f"seed: {seed}\n" not in (run_dir / ".hydra" / "config.yaml").read_text():
        raise Short("the refused run wrote .hydra/config.yaml")
    return line


# SLURM (m3-23, m3-24): the single-node cluster of scripts/slurm/cluster.sh, found as tests/slurm finds it.
REQUEUED = ["compressor=gtopk", "trainer.max_steps=300", "trainer.log_every=1", "wandb.mode=disabled",
            "trainer.progress=false"]


def slurm_cluster():
    """The running SLURM cluster (tests/slurm/conftest.py), or Skip with why there is none."""
    from slurm.conftest import _find_cluster
    found = _find_cluster()
    if isinstance(found, str):
        raise Skip(found)
    return found


def logged_steps(path: Path | None) -> list[int]:
    """The steps of the training records of a metrics.jsonl being written (a last line not yet whole aside)."""
    text = path.read_text() if path and path.is_file() else ""
    rows = [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]
    return [r["step"] for r in rows if "train/loss" in r]


def until(done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise Short(f"{what} not within {timeout:.0f} s")
        time.sleep(0.3)


def requeue_at_step_3(cluster, job: str, metrics: Callable[[], Path | None]) -> int:
    until(lambda: len(logged_steps(metrics())) >= 3, 150, "3 steps logged")
    step = len(logged_steps(metrics()))
    requeued = cluster.run(["scontrol", "requeue", job], timeout=30)
    if requeued.returncode != 0 or step >= 300:
        raise Short(f"scontrol requeue {job} at step {step}: {requeued.stderr.strip()[:150]}")
    return step     # SLURM holds a requeued job back (BeginTime) about 2 minutes before it starts it again


def every_step_once(metrics: Path) -> None:
    steps = logged_steps(metrics)
    if steps != list(range(1, 301)):
        raise Short(f"{len(steps)} records, not steps 1-300 once each")


def m3_requeued_sbatch_job(tmp: Path) -> str:
    from slurm.conftest import FINAL_STATES
    cluster = slurm_cluster()
    run_dir, out = tmp / "run", tmp / "job.out"
    job = cluster.submit(["--ntasks=2", "--open-mode=append", str(ROOT / "scripts" / "slurm" / "mpi_mpirun.sbatch"),
                          *REQUEUED], out, env={"SSGD_RUN_DIR": str(run_dir), "SSGD_PYTHON": sys.executable})
    try:
        step = requeue_at_step_3(cluster, job, lambda: run_dir / "metrics.jsonl")
        until(lambda: cluster.job_fields(job).get("JobState") in FINAL_STATES, 300, f"the end of job {job}")
    finally:
        cluster.run(["scancel", job], timeout=30)
    fields, output = cluster.job_fields(job), out.read_text(errors="replace")
    if (fields.get("JobState"), fields.get("ExitCode")) != ("COMPLETED", "0:0"):
        raise Short(f"job {job}: {fields.get('JobState')} {fields.get('ExitCode')}: {output[-150:]}")
    if "DUE TO JOB REQUEUE" not in output or f"restart 1: continuing from {run_dir / 'checkpoint.pt'}" not in output:
        raise Short(f"job {job} was not stopped once and continued: {output[-150:]}")
    every_step_once(run_dir / "metrics.jsonl")
    return f"job {job} requeued at step {step}, continued from its checkpoint: COMPLETED 0:0, steps 1-300 once"


def m3_requeued_submitit_point(tmp: Path) -> str:
    cluster = slurm_cluster()
    sweep = subprocess.Popen([*TRAIN[:2], "-m", "hydra/launcher=submitit_slurm", "hydra.launcher.cpus_per_task=1",
                              f"hydra.launcher.partition={cluster.partition}", "hydra.launcher.timeout_min=10",
                              *REQUEUED], cwd=tmp, env=cluster.env, text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
    jobs: list[str] = []
    metrics = lambda: next(iter(tmp.glob("multirun/*/*/0-*/metrics.jsonl")), None)  # noqa: E731
    try:
        until(lambda: bool(logged_steps(metrics())) or sweep.poll() is not None, 150, "the point's first step")
        jobs = [p.name for p in tmp.glob("multirun/*/*/.submitit/*") if p.is_dir()]
        step = requeue_at_step_3(cluster, jobs[0] if jobs else "(none)", metrics)
        output = sweep.communicate(timeout=300)[0]
    finally:
        sweep.kill()
        for job in jobs:
            cluster.run(["scancel", job], timeout=30)
    if sweep.returncode != 0:
        raise Short(f"the sweep exited {sweep.returncode}: {output[-150:]}")
    log = next(metrics().parent.parent.glob(".submitit/*/*_0_log.out")).read_text()
    if "SLURM restart 1 of this job: trainer.resume=auto" not in log:
        raise Short(f"the point did not resume after its requeue: {log[-150:]}")
    every_step_once(metrics())
    return f"job {jobs[0]} requeued at step {step}; the sweep exited 0, steps 1-300 once"


def m3_submitit_bad_point(tmp: Path) -> str:
    proc = run(tmp, "-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5", "compressor=topk",
               "compressor.density=0.01,1.5", "trainer.max_steps=3", *TRAIN[2:], cmd=TRAIN[:2])
    expect(proc, 2, "sweep: 1 of 2 points failed", "compressor.density=1.5", one_line=False)
    sweeps = list((tmp / "multirun").glob("*/*"))
    if len(sweeps) != 1 or [len(list(sweeps[0].glob(f"*/{f}"))) for f in ("summary.json", "error.txt")] != [1, 1]:
        raise Short("not one sweep folder with one summary.json and one error.txt")
    return next(line for line in proc.stderr.splitlines() if line.startswith("sweep: "))


def on_disk(tmp: Path, size: str, *args: str, status: int = 2, env: dict[str, str] | None = None,
            pieces: tuple[str, ...] = (), full: bool = False) -> str:
    """Run `args` into a run folder on a tmpfs of `size` (`full`: filled first); its one line (exit `status`)
    naming the full disk and every piece, and no `.tmp` left."""
    with disk(tmp / "d", size) as d:
        if full:
            from disks import fill
            fill(d)
        proc = run(tmp, f"hydra.run.dir={d / 'run'}", *args, timeout=180, env=env)
        line = expect(proc, status, "(No space left on device)", *pieces)
        no_tmp(d)
    return line


def row15(tmp: Path) -> str:
    stats = on_disk(tmp, "100k", "capture.stats=true", "trainer.max_steps=300", "trainer.log_every=1000",
                    pieces=("capture/stats.jsonl: cannot write the capture record of step ", "records before it are "
                            "kept"))
    u = on_disk(tmp, "512k", "capture.u_steps=[2]", "trainer.max_steps=3",
                pieces=("capture/u_step000002.pt: cannot write the captured gradient of step 2 ",
                        "nothing was written"))
    return f"{stats[:110]}... / ...{u[u.index('u_step'):][:70]}..."


NO_HYDRA = "hydra.output_subdir=null"
"""Hydra's `.hydra/` left out, so that a small disk fills at the row's file whatever the paths' lengths."""


def row16(tmp: Path) -> str:
    config = on_disk(tmp, "64k", NO_HYDRA, *TORCH2, "dist.launch=false", full=True,
                     pieces=("worker_config.yaml: cannot write the ranks' config ", "nothing was written"))
    resumes = on_disk(tmp, "64k", NO_HYDRA, f"trainer.resume={base_copy(tmp) / 'checkpoint.pt'}",
                      "trainer.max_steps=6", "optimizer.lr=0.05", "trainer.resume_changes=[optimizer.lr]", full=True,
                      pieces=("resumes.jsonl: cannot write the record of the resume's changes (optimizer.lr) ",
                              "the records before it are kept"))
    # 3 pages of 4 KiB: worker_config.yaml and the launcher's mpi/ended.txt and watched.txt; the traceback none
    rank = on_disk(tmp, "12k", NO_HYDRA, *TORCH2, "trainer.max_steps=20", "trainer.log_every=1000",
                   "debug.fail_rank=1", "debug.fail_step=3", "debug.fail_mode=raise", status=1, env=RANK_HOOK,
                   pieces=("rank 1 failed: RuntimeError: injected failure at step 3 (debug.fail_rank=1) (no traceback "
                           "file: ", "rank1-traceback.txt: cannot write the rank's traceback "))
    return " / ".join(re.sub(r"^error: (\S+/)?", "", line)[:50] + "..." for line in (config, resumes, rank))


def row18(tmp: Path) -> str:
    run_dir, mpl = tmp / "run", tmp / "mpl"
    proc = run(tmp, f"hydra.run.dir={run_dir}", "trainer.max_steps=1", env={"MPLCONFIGDIR": str(mpl)})
    expect(proc, 0, one_line=False)
    if "fontManager" in proc.stdout + proc.stderr:
        raise Short("matplotlib's 'generated new fontManager' was printed")
    if not (run_dir / "report.png").is_file() or not any(mpl.glob("fontlist*.json")):
        raise Short("no report.png, or no font cache built in the new MPLCONFIGDIR")
    return "exit 0, report.png drawn, the font cache built in the empty MPLCONFIGDIR without a word"


M4_MORE: dict[str, Callable[[Path], str]] = {
    "m3-15": m3_killed_torch_rank, "m3-16": m3_second_checkpoint_full, "m3-17": m3_wandb_mode_from_env,
    "m3-20": m3_resume_finished, "m3-21": m3_refused_run_leaves_folder, "m3-22": m3_two_runs_one_folder,
    "m3-23": m3_requeued_sbatch_job, "m3-24": m3_requeued_submitit_point, "m3-25": m3_submitit_bad_point,
    "15": row15, "16": row16, "18": row18,
}
"""Rows m3-15 ... m3-25, 15, 16 and 18 replayed by the functions above this line."""


ROWS: dict[str, Callable[[Path], str]] = {
    **{key: refused(key) for key in REFUSED},
    "m1-11": m1_wandb_without_key, "m1-14": m1_holds_another_run, "m1-15": m1_resume_another_seed,
    "m1-18": m1_rank_count, "m1-20": m1_sigterm, "m1-23": m1_rank_raises,
    "m1-26": m1_sweep_bad_point,
    "m3-1": m3_pickle_with_code, "m3-5": m3_resume_other_lr, "m3-14": m3_port_in_use, "m3-18": m3_wandb_mode_bogus,
    "1": row1, "2": row2, "3": row3, "4": row4, "5": row5, "6": row6, "7": row7, "8": row8, "9": row9,
    "9b": row9b, "10": row10, "11": row11, "12": row12, "13": row13, "14": row14, "17": sweep_sigint,
    **M1_MORE, **M3_MORE, **M4_MORE,
}
"""The rows replayed, by their `#` in docs/faults.md; every other row is pinned by the tests its row names."""


BESIDE = ("m3-23", "m3-24")
"""Rows that mostly wait (SLURM holds a requeued job about 2 minutes before it restarts it): replayed in threads
beside the others, and printed after them; their CPU seconds are not told apart from the others' (shown as -)."""


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children waited for (ranks count through their launcher)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def replay(key: str) -> tuple[str, str, float, float]:
    """(result, what was seen, seconds, CPU seconds) of one row, in a temporary folder removed after it."""
    tmp = Path(tempfile.mkdtemp(prefix=f"ssgd-faults-{key}-"))
    start, cpu = time.monotonic(), cpu_seconds()
    try:
        result, seen = "ok", ROWS[key](tmp)
    except subprocess.TimeoutExpired as late:
        result, seen = "short", f"still running after {late.timeout:.0f} s"
    except Short as short:
        result, seen = "short", str(short)
    except Skip as skip:
        result, seen = "skip", str(skip)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result, seen, time.monotonic() - start, cpu_seconds() - cpu


def case_text(case: str, width: int = 60) -> str:
    plain = case.replace("`", "")
    return plain if len(plain) <= width else plain[:width - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    rows = {row.key: row for row in doc_rows()}
    parser.add_argument("--rows", default=",".join(rows), help="comma-separated rows, the `#` column of "
                        "docs/faults.md (default: every row of its matrices)")
    keys = parser.parse_args(argv).rows.split(",")
    unknown = [k for k in keys if k not in rows]
    if unknown:
        print(f"error: --rows={unknown[0]}: no such row of {DOC.name}; allowed: {', '.join(rows)}", file=sys.stderr)
        return 2
    start, cpu, results = time.monotonic(), cpu_seconds(), []
    print(f"{'row':<6} {'result':<6} {'s':>5} {'cpu s':>5}  case: what was seen (or the tests that pin it)")
    with ThreadPoolExecutor(max_workers=len(BESIDE)) as pool:
        beside = {key: pool.submit(replay, key) for key in keys if key in BESIDE}
        for key in [k for k in keys if k not in beside]:
            if key in ROWS:
                result, seen, took, used = replay(key)
                shown = f"{took:5.1f} {used:5.1f}"
            else:
                result, seen, shown = "test", "covered by " + ", ".join(rows[key].tests), "    -     -"
            results.append(result)
            print(f"{key:<6} {result:<6} {shown}  {case_text(rows[key].case)}: {seen[:160]}", flush=True)
        for key, future in beside.items():
            result, seen, took, _ = future.result()
            results.append(result)
            print(f"{key:<6} {result:<6} {took:5.1f}     -  {case_text(rows[key].case)}: {seen[:160]} (ran beside the "
                  "others)", flush=True)
    if BASE:
        shutil.rmtree(BASE[0].parent, ignore_errors=True)
    counts = {r: results.count(r) for r in ("ok", "short", "skip", "test")}
    print(f"faults: {counts['ok']} ok, {counts['short']} short, {counts['skip']} skipped, {counts['test']} covered by "
          f"tests in {time.monotonic() - start:.0f} s, {cpu_seconds() - cpu:.0f} s of CPU (load average "
          f"{os.getloadavg()[0]:.1f} at the end)")
    return 1 if counts["short"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
