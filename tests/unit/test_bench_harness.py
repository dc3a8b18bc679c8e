"""The benchmark harness and the benchmarks that use it run (never how fast).

bench/harness.py: interleaving order, retries of noisy rounds, ratio / spread arithmetic, the
/proc/stat accounting of other processes' CPU (a busy process outside the tree makes a measurement
noisy; a child's CPU counts as the benchmark's own), and that every rendered table marks the
numbers of a noisy measurement. bench/dlbench.py, bench/trainer_vs_peers.py, bench/comm.py,
bench/threads_overhead.py, bench/summary.py: each runs end to end on tiny settings; DLBench parameter
counts are pinned, so a model definition that drifts from DLBench's, or differs between tools, fails
here. Timings of the code under benchmark are never asserted.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
TOOLS_PY = ROOT / ".venv-tools" / "bin" / "python"


from bench_modules import load  # noqa: E402

harness = load("harness")
dlbench = load("dlbench")
workloads = load("dlbench_workloads")

PINNED = {"fcn5": 117_997_696, "fcnr": 14_205_962, "alexnet_r": 85_098, "resnet56": 853_018, "lstm": 6_180_624}


def run(script: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_parameter_counts_are_pinned_and_derived():
    assert {k: w.params for k, w in workloads.WORKLOADS.items()} == PINNED
    assert workloads.dense_params((26752, 2048, 2048, 2048, 26752)) == PINNED["fcn5"]
    assert workloads.dense_params((784, 2048, 4096, 1024, 10)) == PINNED["fcnr"]   # DLBench: "14.2M" (FCN-R)
    emb, lstm, dec = 10000 * 256, 2 * 4 * (256 * 512 + 256), 256 * 10000 + 10000
    assert emb + lstm + dec == PINNED["lstm"]


def test_pytorch_definitions_have_the_pinned_counts():
    torch_side = load("dlbench_torch")
    for key, w in workloads.WORKLOADS.items():
        canonical, raw = torch_side.canonical_params(torch_side.build_model(w))
        assert canonical == PINNED[key], key
        assert raw - canonical == (2 * 4 * 256 if key == "lstm" else 0), key   # nn.LSTM's second bias


@pytest.mark.slow
def test_each_workload_runs_one_tiny_iteration(tmp_path):
    proc = run("dlbench.py", "--tools", "torch", "--threads", "1", "--batch-size", "2", "--reps", "1",
               "--warmup", "0", "--results", str(tmp_path / "dlbench.json"), "--out-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "dlbench.json").read_text())
    rows = {r["workload"]: r for r in result["rows"]}
    assert set(rows) == set(PINNED)
    for key, r in rows.items():
        assert r["tool"] == "torch" and r["threads"] == 1 and r["batch"] == 2 and r["reps"] == 1, key
        assert r["params"] == PINNED[key] and r["params_ok"], key
        assert r["median_s"] > 0 and r["q1_s"] <= r["median_s"] <= r["q3_s"], key
        assert r["noisy"] in (True, False, None) and r["group"] >= 0, key
    assert [g["cells"] for g in result["groups"]] == [["torch@1"]] * len(PINNED)   # one group per workload
    assert all(len(g["series"]["rounds"]) == 1 for g in result["groups"])
    assert result["machine"]["cpu"] and result["machine"]["usable_cores"] >= 1
    assert result["machine"]["packages"]["torch"]
    assert result["settings"]["threads"] == [1] and result["settings"]["batches"] == {k: 2 for k in PINNED}
    table = (tmp_path / "dlbench.md").read_text()
    for w in workloads.WORKLOADS.values():
        assert f"| {w.label} | 2 | 1 |" in table
    for ext in ("png", "pdf", "csv"):
        assert (tmp_path / f"dlbench.{ext}").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.skipif(not TOOLS_PY.exists(), reason="no .venv-tools (make bench-dlbench creates it)")
def test_keras_tools_run_every_workload_with_the_same_parameter_counts(tmp_path):
    proc = run("dlbench.py", "--tools", "tensorflow", "jax", "--threads", "1", "--batch-size", "2", "--reps", "1",
               "--warmup", "0", "--results", str(tmp_path / "dlbench.json"), "--out-dir", str(tmp_path), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((tmp_path / "dlbench.json").read_text())["rows"]
    assert {(r["tool"], r["workload"]) for r in rows} == {(t, k) for t in ("tensorflow", "jax") for k in PINNED}
    for r in rows:
        assert r["params"] == PINNED[r["workload"]], (r["tool"], r["workload"])


@pytest.mark.slow
def test_torch_compile_runs_a_workload(tmp_path):
    proc = run("dlbench.py", "--tools", "torch_compile", "--workloads", "alexnet_r", "--threads", "1",
               "--batch-size", "2", "--reps", "1", "--results", str(tmp_path / "d.json"), "--out-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads((tmp_path / "d.json").read_text())["rows"]
    assert row["tool"] == "torch_compile" and row["params_ok"] and row["warmup_s"] > 0


@pytest.mark.parametrize("args, message", [
    (["--workloads", "vgg"],
     "error: --workloads vgg: no such workload; allowed: fcn5, fcnr, alexnet_r, resnet56, lstm"),
    (["--tools", "caffe"], "error: --tools caffe: no such tool; allowed: torch, torch_compile, tensorflow, jax"),
    (["--batch-size", "lenet=4"], "error: --batch-size lenet=4: unknown workload 'lenet'"),
    (["--batch-size", "resnet56=0"], "error: --batch-size resnet56=0: the batch size must be a positive integer"),
    (["--threads", "4096"], "error: --threads 4096: each must be in 1.."),
])
def test_bad_dlbench_arguments_are_one_line_errors(args, message):
    proc = run("dlbench.py", *args)
    assert proc.returncode == 2
    assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1, proc.stderr


def test_bad_trainer_bench_arguments_are_one_line_errors():
    proc = run("trainer_vs_peers.py", "--parts", "gpu")
    assert proc.returncode == 2
    assert proc.stderr == "error: --parts gpu: not one of threads, mpi, torch\n"


def test_batch_sizes_and_thread_counts():
    keys = list(workloads.WORKLOADS)
    assert dlbench.parse_batches(None, keys) == {k: w.batch for k, w in workloads.WORKLOADS.items()}
    assert dlbench.parse_batches(["8"], keys) == {k: 8 for k in keys}
    assert dlbench.parse_batches(["resnet56=64"], ["resnet56", "lstm"]) == {"resnet56": 64, "lstm": 32}
    assert dlbench.default_threads(2) == [1, 2]
    assert dlbench.default_threads(16) == [1, 2, 4, 8, 16]
    assert dlbench.default_threads(12) == [1, 2, 4, 8, 12]
    for w in workloads.WORKLOADS.values():   # every default batch is one DLBench used
        assert w.batch in w.paper_batches, w.key


def test_markdown_table_marks_a_parameter_mismatch():
    row = {"workload": "lstm", "tool": "jax", "threads": 2, "batch": 32, "times_s": [0.1, 0.2, 0.3],
           "params": 6_182_672, "warmup_s": 3.0}
    result = {"rows": [dlbench.summarise(row)], "settings": {"threads": [2]}, "skipped": {"tensorflow": "absent"},
              "machine": {"cpu": "X", "logical_cores": 2, "usable_cores": 2, "memory_gib": 1, "python": "3",
                          "packages": {}}}
    assert row["median_s"] == 0.2 and row["params_ok"] is False
    table = dlbench.markdown(result)
    assert "| LSTM | 32 | 2 | 200 (150-250) (params!) (unmeasured) | unmeasured |" in table   # no noise measured
    row.update(noisy=True, other_cores_max=0.75)
    assert "| LSTM | 32 | 2 | 200 (150-250) (params!) (noisy) | 0.75 (noisy) |" in dlbench.markdown(result)
    row.update(noisy=False, other_cores_max=0.05)
    assert "| LSTM | 32 | 2 | 200 (150-250) (params!) | 0.05 |" in dlbench.markdown(result)
    assert "Skipped tensorflow: absent" in table


@pytest.mark.slow
def test_trainer_vs_peers_runs_both_parts(tmp_path):
    out = tmp_path / "peers.json"
    proc = run("trainer_vs_peers.py", "--parts", "threads", "mpi", "--P", "2", "--models", "fnn3", "--schemes", "dense",
               "topk", "--reps", "1", "--quick", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [(r["compressor"], r["P"]) for r in result["threads"]] == [("dense", 2), ("gtopk", 2)]   # the fnn3 cases
    assert all(r["ratio"] > 0 for r in result["threads"])
    assert all(r["noisy"] in (True, False, None) and len(r["series"]["rounds"]) == 1 for r in result["threads"])
    (row,) = result["mpi"]
    assert row["P"] == 2 and row["model"] == "fnn3"
    assert row["series"]["names"] == ["ssgd_dense", "ssgd_topk", "ddp"] and len(row["series"]["rounds"]) == 1
    assert row["ssgd_dense_over_ddp"]["median"] > 0 and set(row["scheme_over_dense"]) == {"ssgd_topk"}
    assert row["series"]["rounds"][0]["other_cores"] is not None          # rank 0 measured the job's noise
    assert {"compute", "comm", "update", "step"} <= set(row["ssgd_parts_ms_rank0"]["ssgd_dense"])
    assert "ssgd dense / DDP" in out.with_suffix(".md").read_text()


@pytest.mark.slow
def test_trainer_vs_peers_torch_part(tmp_path):
    """backend=torch's dense trainer in the same rounds as DDP, and the gTop-k call over torch.distributed vs MPI."""
    out = tmp_path / "peers.json"
    proc = run("trainer_vs_peers.py", "--parts", "torch", "--P", "2", "--models", "fnn3", "--schemes", "dense",
               "--comm-P", "2", "--comm-d", "5000", "--reps", "1", "--quick", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    (row,) = result["mpi"]
    assert row["series"]["names"] == ["ssgd_dense", "ssgd_torch_dense", "ddp"]
    assert row["ssgd_torch_dense_over_ddp"]["median"] > 0 and row["scheme_over_dense"] == {}
    (comm,) = result["comm"]
    assert (comm["P"], comm["d"], comm["k"]) == (2, 5000, 5) and comm["torch_over_mpi"]["median"] > 0
    table = out.with_suffix(".md").read_text()
    assert "ssgd torch dense / DDP" in table and "| 2 | 5,000 | 5 |" in table


def test_summary_reads_what_exists(tmp_path):
    summary = load("summary")
    text = summary.summary(wall_s=90.0, results=tmp_path)
    assert text.startswith("# Benchmark summary") and "1.5 min" in text
    for section in ("bench-dlbench", "bench-trainer", "bench-threads", "bench-comm", "fig-selection"):
        assert f"(`make {section}`)" in text and f"not run (`make {section}`)" in text
    (tmp_path / "comm.json").write_text(json.dumps({"rows": [{"P": 2, "time_per_call_s": 0.001}]}))   # older format
    text = summary.summary(wall_s=None, results=tmp_path)
    assert "comm.json has no noise measurements (an older run): not shown" in text and "0.001" not in text


# ----------------------------------------------------------------------------------------------
# bench/harness.py
# ----------------------------------------------------------------------------------------------
class ScriptedMeter:
    """A meter whose other-CPU readings are given in advance (one per attempted round)."""

    def __init__(self, others):
        self.others = list(others)

    def start(self):
        pass

    def stop(self):
        return harness.Interval(1.0, 1.0, 0.0, self.others.pop(0))


def scripted(log, name, times):
    """An item that logs its name and returns the next of `times` (seconds)."""
    times = list(times)

    def call():
        log.append(name)
        return times.pop(0)
    return call


def test_rounds_interleave_the_items_in_order():
    log = []
    items = [(n, scripted(log, n, [0.1] * 10)) for n in "ABC"]
    series = harness.interleaved(items, 2, warmup=1, meter=ScriptedMeter([0.0, 0.0]))
    assert log == list("ABC") * 3                                   # warm-up round, then two rounds
    assert series.names == list("ABC") and len(series.rounds) == 2 and series.inner == 1
    log.clear()
    # warm-up round 0.3 s; rounds of >= 0.85 s -> 3 calls of each item per round, still A B C A B C ...
    series = harness.interleaved([(n, scripted(log, n, [0.1] * 10)) for n in "ABC"], 1, warmup=1, min_round_s=0.85,
                                 meter=ScriptedMeter([0.0]))
    assert series.inner == 3 and log == list("ABC") * 4


def test_a_noisy_round_is_repeated_then_marked():
    log = []
    items = [(n, scripted(log, n, [1.0] * 20)) for n in "AB"]
    series = harness.interleaved(items, 2, threshold=0.2, retries=2, warmup=0,
                                 meter=ScriptedMeter([0.5, 0.1, 0.9, 0.3, 0.25]))
    assert log == list("AB") * 5                                    # 2 attempts, then 3 (all noisy)
    first, second = series.rounds
    assert (first.attempts, first.noisy, first.other_cores) == (2, False, 0.1)
    assert (second.attempts, second.noisy, second.other_cores) == (3, True, 0.25)
    assert second.attempts_other_cores == [0.9, 0.3, 0.25]
    d = series.to_json()
    assert series.noisy is True and d["noisy"] is True
    assert (d["repeated_rounds"], d["noisy_rounds"], d["other_cores_max"]) == (3, 1, 0.25)
    assert harness.noise_cell(d) == "0.25 (3 repeated, noisy: 1/2 rounds > 0.2)"
    quiet = harness.interleaved(items[:1], 1, warmup=0, meter=ScriptedMeter([0.2]), threshold=0.2)
    assert quiet.noisy is False and quiet.rounds[0].attempts == 1  # at the threshold is not above it
    blind = harness.interleaved(items[:1], 1, warmup=0, meter=harness.NullMeter())
    assert blind.noisy is None and harness.noise_cell(blind) == "unmeasured"


def test_ratios_are_taken_inside_rounds_and_summarised_over_rounds():
    log = []
    a = [2.0, 4.0, 6.0, 8.0, 10.0]
    b = [1.0, 1.0, 2.0, 2.0, 5.0]                                   # per-round a / b: 2, 4, 3, 4, 2
    series = harness.interleaved([("a", scripted(log, "a", a)), ("b", scripted(log, "b", b))], 5, warmup=0,
                                 meter=ScriptedMeter([0.0] * 5))
    r = series.ratio("a", "b")
    assert (r.median, r.lo, r.hi, r.q1, r.q3, r.n) == (3.0, 2.0, 4.0, 2.0, 4.0, 5)
    assert series.median("a") == 6.0 and series.spread("b").hi == 5.0
    assert harness.ratio_cell(r, False) == "3 [2-4]"
    assert harness.ratio_cell(r.to_json(), True) == "3 [2-4] (noisy)"
    assert harness.Series.from_json(json.loads(json.dumps(series.to_json()))).ratio("a", "b") == r
    # the time of an item in a round is the median of its calls in that round
    inner = harness.interleaved([("x", scripted(log, "x", [1.0, 1.0, 5.0, 3.0]))], 1, warmup=1, min_round_s=3.0,
                                meter=ScriptedMeter([0.0]))
    assert inner.inner == 3 and inner.values("x") == [3.0]
    one = harness.Spread.of([7.0])
    assert (one.median, one.lo, one.hi, one.q1, one.q3, one.n) == (7.0, 7.0, 7.0, 7.0, 7.0, 1)


def test_mpi_share_agrees_on_the_slowest_rank_and_the_root_noise():
    class Comm:                                   # what MPIShare needs of a communicator, for 1 rank
        def Allreduce(self, send, recv, op):
            recv[...] = send

        def bcast(self, value, root):
            return value

    share = harness.MPIShare(Comm())
    assert share.times([[1.0, 2.0], [3.0, 4.0]]) == [[1.0, 2.0], [3.0, 4.0]] and share.other(0.3) == 0.3


def test_clock_share_times_a_call_from_the_last_entry_to_the_last_exit():
    """Two ranks on one clock, two calls of one item: this rank entered at 10 and 20 and took 1 and 2 s; the other
    (scripted) entered at 10.5 and 19 and took 0.2 and 3.5 s."""
    import numpy as np

    class Comm:
        def __init__(self) -> None:
            self.other = [np.array([[10.5], [19.0]]), np.array([[0.2], [3.5]])]

        def Get_size(self) -> int:
            return 2

        def Allgather(self, send, recv) -> None:
            recv[0], recv[1] = send, self.other.pop(0)

    share = harness.ClockShare(Comm())
    assert share.timed(lambda: None) >= 0 and len(share.entries) == 1
    share.entries = [10.0, 20.0]
    assert [row[0] for row in share.times([[1.0], [2.0]])] == pytest.approx([0.5, 2.5])
    share.keep()
    assert share.kept == {"slowest": [[1.0], [3.5]], "skew": [[0.5], [1.0]]}
    share.entries = [1.0]
    with pytest.raises(RuntimeError, match="1 timed calls for 2 times"):
        share.times([[1.0], [2.0]])


BUSY = """
import sys, time
t0 = time.time()
while time.process_time() < {cpu} and time.time() - t0 < {cpu} + 10:
    pass
print(time.process_time())
"""


def test_a_child_process_cpu_counts_as_the_benchmark_own():
    meter = harness.NoiseMeter()
    meter.start()
    child = subprocess.run([sys.executable, "-c", BUSY.format(cpu=0.5)], capture_output=True, text=True, timeout=60)
    interval = meter.stop()
    child_cpu = float(child.stdout)
    own = interval.own_cores * interval.wall_s
    assert child_cpu - 0.05 <= own <= child_cpu + 0.5           # the child's CPU (plus Python start-up, ours)
    assert interval.busy_cores * interval.wall_s >= own - 0.05   # the machine was at least that busy


def test_a_process_outside_the_tree_makes_a_measurement_noisy(tmp_path):
    pidfile = tmp_path / "pid"
    # started through a shell that exits at once: the busy process is re-parented away from this tree;
    # it spins until the `finally` below kills it, so it is still running during the retried round
    subprocess.run(["sh", "-c", f'"{sys.executable}" -c "$0" > /dev/null 2>&1 & echo $! > "{pidfile}"',
                    BUSY.format(cpu=30)], check=True, timeout=30)
    pid = int(pidfile.read_text())
    try:
        time.sleep(0.2)
        assert pid not in harness.tree_pids(os.getpid())
        before = harness.process_cpu_seconds(pid)
        meter = harness.NoiseMeter()
        meter.start()
        time.sleep(0.8)
        interval = meter.stop()
        used = harness.process_cpu_seconds(pid) - before
        assert used > 0.05                                        # it ran meanwhile
        assert interval.own_cores * interval.wall_s < 0.2         # this process slept
        assert interval.other_cores * interval.wall_s >= used - 0.1   # /proc/stat saw it as someone else's
        log = []
        series = harness.interleaved([("sleep", scripted(log, "sleep", [0.0] * 3))], 1, threshold=0.05, retries=1,
                                     warmup=0, meter=SleepyMeter(harness.NoiseMeter(), 0.5))
        assert series.noisy is True and series.rounds[0].attempts == 2
    finally:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


class SleepyMeter:
    """A real NoiseMeter around a sleep of `seconds` (a round long enough for tick-granular counters)."""

    def __init__(self, meter, seconds):
        self.meter, self.seconds = meter, seconds

    def start(self):
        self.meter.start()

    def stop(self):
        time.sleep(self.seconds)
        return self.meter.stop()


def test_tree_and_process_accounting_without_proc_stat(tmp_path):
    assert harness.machine_busy_seconds(str(tmp_path / "missing")) is None
    assert harness.process_cpu_seconds(2**22 + 12345) == 0.0          # no such process
    assert os.getpid() in harness.tree_pids(os.getpid())


# ----------------------------------------------------------------------------------------------
# every rendered table marks the numbers of a noisy measurement
# ----------------------------------------------------------------------------------------------
def fake_series(names, noisy, rounds=3):
    log, fns = [], []
    for i, n in enumerate(names):
        fns.append((n, scripted(log, n, [0.001 * (i + 1)] * rounds)))
    other = 0.9 if noisy else 0.05
    return harness.interleaved(fns, rounds, threshold=0.2, retries=0, warmup=0,
                               meter=ScriptedMeter([other] * rounds)).to_json()


def check_marks(text, quiet_prefix, noisy_prefix, measured):
    """Table lines starting with `noisy_prefix` carry the mark in every measured column (indices),
    those starting with `quiet_prefix` nowhere; returns how many noisy lines were checked."""
    quiet = [line for line in text.splitlines() if line.startswith(quiet_prefix)]
    noisy = [line for line in text.splitlines() if line.startswith(noisy_prefix)]
    assert quiet and noisy
    assert all("noisy" not in line for line in quiet)
    for line in noisy:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        cols = measured(cells)
        assert cols and all("(noisy)" in cells[i] or "noisy:" in cells[i] for i in cols), line
    return len(noisy)


def test_summary_marks_every_number_of_a_noisy_measurement(tmp_path):
    comm = load("comm")
    names = list(comm.COLLECTIVES)
    counted = {n: {"entries_by_rank": [1, 1], "modelled_s": 1e-4, "bytes_by_rank_measured": [8, 8],
                   "messages_by_rank_measured": [1, 1], "bytes_by_rank_modelled": [8, 8],
                   "messages_by_rank_modelled": [1, 1]} for n in names[:4]}
    cases = [{"P": P, "d": 2**20, "k": 1048, "density": 0.001, "counted": counted,
              "series": fake_series(names, noisy=(P == 4))} for P in (2, 4)]
    machine_desc = {"cpu": "X", "logical_cores": 2, "usable_cores": 2, "memory_gib": 1, "python": "3", "packages": {}}
    (tmp_path / "comm.json").write_text(json.dumps({
        "cases": cases, "density": 0.001, "machine": machine_desc, "network": {"cluster": "local"}, "mpi": {},
        "noise_method": "n"}))
    rows = []
    for P, noisy in ((4, False), (8, True)):
        s = fake_series(["plain", "trainer"], noisy)
        ratio = harness.Series.from_json(s).ratio("trainer", "plain")
        rows.append({"model": "fnn3", "compressor": "dense", "P": P, "threads": 2, "plain_ms": 1.0, "trainer_ms": 2.0,
                     "ratio": ratio.median, "ratio_spread": ratio.to_json(), "noisy": noisy, "series": s})
    (tmp_path / "threads_overhead.json").write_text(json.dumps({"rows": rows, "settings": {}}))
    summary = load("summary")
    text = summary.summary(wall_s=None, results=tmp_path)
    assert "Noise: 2 of 4 comparisons are marked noisy" in text
    # comm: the gTop-k table (every column after P and d: times, ratios, noise), every collective (its time)
    checked = check_marks(text, "| 2 | 1M |", "| 4 | 1M |",
                          lambda cells: list(range(2, 9)) if len(cells) == 9 else [3])
    assert checked == 1 + len(names)
    check_marks(text, "| fnn3 | dense | 4 |", "| fnn3 | dense | 8 |", lambda cells: [3, 4, 5, 6])



# ----------------------------------------------------------------------------------------------
# bench/comm.py, bench/progress.py
# ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_comm_measures_ours_and_released_in_the_same_rounds(tmp_path):
    out = tmp_path / "comm.json"
    proc = run("comm.py", "--P", "2", "--sizes", "64K", "--rounds", "2", "--retries", "0", "--min-round-s", "0",
               "--json", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (case,) = json.loads(out.read_text())["cases"]
    assert (case["P"], case["d"], case["k"]) == (2, 65536, 65)
    series = case["series"]
    assert series["names"] == ["dense_allreduce", "topk_allgather", "gaussiank_allgather", "gtopk_allreduce",
                               "gtopk_released", "gtopk_decode", "gtopk_released_decode"]
    assert len(series["rounds"]) == 2 and series["rounds"][0]["other_cores"] is not None
    assert case["counted"]["gtopk_allreduce"]["bytes_by_rank_measured"] == \
        case["counted"]["gtopk_allreduce"]["bytes_by_rank_modelled"]
    assert "| 2 | 65536 |" in proc.stdout and "ours / released, with decode" in proc.stdout


@pytest.mark.slow
def test_comm_times_from_the_last_entry_with_each_ranks_compute(tmp_path):
    """The testbed's protocol (bench/testbed_comm.py) on local ranks: a warm call and an idle spin before each
    timed call, the time from the last entry, and per rank the compute before each operation and after the last:
    the Top-k AllGather has one (Allgatherv), gTop-k's rank 0 three (Recv, Bcast) + 1, its rank 1 two (Send, Bcast)."""
    out = tmp_path / "comm.json"
    proc = run("comm.py", "--P", "2", "--sizes", "64K", "--rounds", "2", "--retries", "0", "--min-round-s", "0",
               "--items", "topk_allgather", "gtopk_allreduce", "--from-last-entry", "--warm-calls", "1",
               "--idle-s", "0.001", "--json", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (case,) = json.loads(out.read_text())["cases"]
    compute = case["compute_s"]
    assert [len(c) for c in compute["topk_allgather"]] == [2, 2]
    assert [len(c) for c in compute["gtopk_allreduce"]] == [3, 3]          # P = 2: Recv, Bcast | Send, Bcast
    assert all(t >= 0 for c in compute.values() for rank in c for t in rank)
    for name in ("topk_allgather", "gtopk_allreduce"):
        timed = harness.Series.from_json(case["series"]).median(name)
        assert 0 < timed <= case["slowest_s"][name] + 1e-9 and case["skew_s"][name] >= 0


@pytest.mark.parametrize("args, message", [
    (["--warm-calls", "-1"], "error: --warm-calls -1 --idle-s 0.0: both must be >= 0\n"),
    (["--rounds", "0"], "error: --rounds 0: must be >= 1\n"),
    (["--noise-threshold", "0"], "error: --noise-threshold 0.0: must be > 0\n"),
    (["--sizes", "lots"], "error: --sizes lots: sizes are integers, optionally with K or M (2**10, 2**20)\n"),
])
def test_bad_comm_arguments_are_one_line_errors(args, message, tmp_path):
    proc = run("comm.py", *args, "--out-dir", str(tmp_path))
    assert (proc.returncode, proc.stderr) == (2, message)
    assert not list(tmp_path.iterdir())


# ----------------------------------------------------------------------------------------------
# bench/ddp.py
# ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_ddp_bench_trains_every_hook_in_the_same_rounds_on_2_and_3_ranks(tmp_path):
    """End to end on tiny settings. Bytes per step against arithmetic: allreduce d float32, fp16 d halves,
    PowerSGD rank 4 the factors P (n x 4) and Q (m x 4) of the three weight matrices plus the three biases
    uncompressed, in float32 (Vogels et al., NeurIPS 2019, Algorithm 1)."""
    out = tmp_path / "ddp.json"
    proc = run("ddp.py", "--P", "2", "3", "--rounds", "1", "--retries", "0", "--min-round-s", "0", "--json", str(out),
               timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp = load("ddp")
    d = 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10
    powersgd = 4 * ((512 + 784) * 4 + (512 + 512) * 4 + (10 + 512) * 4 + 512 + 512 + 10)
    jobs = json.loads(out.read_text())["jobs"]
    assert [j["P"] for j in jobs] == [2, 3]
    for job in jobs:
        rows = job["rows"]
        assert job["d"] == d == 669_706 and list(rows) == list(ddp.MLP_MODELS)
        assert job["series"]["names"] == list(ddp.MLP_MODELS) and len(job["series"]["rounds"]) == 1
        assert len({r["steps"] for r in rows.values()}) == 1          # every model took the same steps
        assert (rows["allreduce"]["bytes_per_step"], rows["fp16"]["bytes_per_step"],
                rows["powersgd"]["bytes_per_step"]) == (4 * d, 2 * d, powersgd == 49_608 and powersgd)
        assert rows["gtopk_small"]["buckets"] > rows["gtopk"]["buckets"] >= 1
        assert rows["gtopk_small"]["bytes_per_step"] == rows["gtopk_small_blocking"]["bytes_per_step"]
        assert all(0 < r["train_loss"] < 10 for r in rows.values())
    assert "| ssgd.ddp gTop-k, async |" in proc.stdout and "Goal: gTop-k (async, default buckets)" in proc.stdout


@pytest.mark.slow
def test_ddp_bench_replays_a_paper_model_through_every_hook(tmp_path):
    """--replay: the profile's d and layers (one parameter per layer), the replay's hooks (no PowerSGD, no
    small buckets), eff = the profile's single-worker step / the measured step in the table."""
    from ssgd.perf import profiles

    out = tmp_path / "ddp.json"
    proc = run("ddp.py", "--replay", "resnet20", "--rounds", "1", "--retries", "0", "--min-round-s", "0",
               "--density", "0.01", "--json", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp = load("ddp")
    prof = profiles.load("resnet20")
    (job,) = json.loads(out.read_text())["jobs"]
    assert job["replay"] == "resnet20" and job["d"] == sum(prof.params) and job["single_s"] == prof.single_worker_seconds()
    assert list(job["rows"]) == list(ddp.REPLAY_MODELS)
    assert job["rows"]["allreduce"]["bytes_per_step"] == 4 * job["d"]
    assert job["rows"]["gtopk"]["bytes_per_step"] == job["rows"]["gtopk_blocking"]["bytes_per_step"] > 0
    assert "eff = t_single / step" in proc.stdout and "(no goal)" in proc.stdout


def test_ddp_bench_marks_every_time_of_a_noisy_measurement():
    ddp = load("ddp")
    names = list(ddp.LABELS)
    rows = {n: {"label": ddp.LABELS[n], "steps": 3, "bytes_per_step": 8, "train_loss": 1.0, "buckets": None,
                "calls_per_step": None} for n in names}
    for noisy in (False, True):
        job = {"P": 2, "d": 1, "density": 0.01, "batch": 1, "bucket_cap_mb": 1.0, "rows": rows,
               "series": fake_series(names, noisy=noisy), "status": "ok"}
        lines = [line for line in ddp.table(job) if line.startswith("| ") and not line.startswith("| hook")]
        assert len(lines) == len(names)
        for line in lines:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            timed = [cells[1]] + ([cells[2]] if not line.startswith(f"| {ddp.LABELS[ddp.BASE]} |") else [])
            assert all(("(noisy)" in c) == noisy for c in timed), line
        text = ddp.markdown({"machine": {"cpu": "X", "logical_cores": 2, "usable_cores": 2, "memory_gib": 1,
                                         "python": "3", "packages": {}}, "jobs": [job], "noise_method": "n"})
        goal = next(line for line in text.splitlines() if line.startswith("Goal:"))
        assert ("(noisy)" in goal) == noisy and "not met" in goal          # fake times: gtopk 4x allreduce


@pytest.mark.parametrize("args, message", [
    (["--P", "1"], "error: --P 1: every P must be >= 2\n"),
    (["--density", "0"], "error: --density 0.0: must be in (0, 1]\n"),
    (["--bucket-cap-mb", "0"], "error: --bucket-cap-mb 0.0: must be > 0\n"),
    (["--retries", "-1"], "error: --retries -1: must be >= 0\n"),
    (["--hidden", "0"], "error: --hidden 0: must be >= 1\n"),
    (["--replay", "resnet"], "error: --replay resnet: not a shipped profile; allowed: alexnet, lstm_ptb, resnet20, "
                             "resnet50, vgg16\n"),
])
def test_bad_ddp_bench_arguments_are_one_line_errors(args, message, tmp_path):
    proc = run("ddp.py", *args, "--out-dir", str(tmp_path))
    assert (proc.returncode, proc.stderr) == (2, message)
    assert not list(tmp_path.iterdir())


def test_ddp_bench_on_the_testbed_runs_one_rank_per_host_through_its_agent(tmp_path, monkeypatch):
    """--testbed: rank r on host r + 1 through the agent (as the lab's own multi-host launch), the rendezvous
    at host 1's address; a testbed that is down, or has too few hosts, is one line before anything starts."""
    import shlex

    ddp = load("ddp")
    monkeypatch.setattr(ddp, "TESTBED", tmp_path)
    assert ddp.testbed_problem([2], ddp.testbed_hosts()).startswith("--testbed: the testbed is not up (")
    (tmp_path / "env").write_text("SSGD_TESTBED_P=3\nSSGD_TESTBED_BW=1gbit\n")
    (tmp_path / "hosts").write_text("10.98.0.1 slots=1\n10.98.0.2 slots=1\n10.98.0.3 slots=1\n")
    (tmp_path / "agent").write_text("#!/bin/sh\n")
    found = ddp.testbed_hosts()
    assert ddp.testbed_problem([2, 3], found) is None
    assert ddp.testbed_problem([2, 4], found) == "--P 2 4: the testbed has 3 hosts (make testbed-up P=4)"
    commands = ddp.rank_commands(3, ["--worker"], {"OMP_NUM_THREADS": "1", "HOME": "/x"}, found)
    for r, argv in enumerate(commands):
        assert argv[:2] == [str(tmp_path / "agent"), f"10.98.0.{r + 1}"] and len(argv) == 3
        remote = shlex.split(argv[2])
        assert remote[:3] == ["exec", "env", "OMP_NUM_THREADS=1"] and "HOME=/x" not in remote
        assert remote[-4:] == ["--rank", str(r), "--addr", "10.98.0.1"]
    local = ddp.rank_commands(2, ["--worker"], {}, None)
    assert [argv[-4:] for argv in local] == [["--rank", "0", "--addr", "127.0.0.1"], ["--rank", "1", "--addr",
                                                                                       "127.0.0.1"]]


def test_progress_scales_the_remaining_estimates_by_this_runs_pace(tmp_path):
    progress = load("progress")
    parts = list(progress.PARTS)
    left, pace = progress.remaining_s({}, parts)
    assert (left, pace) == (sum(progress.PARTS.values()), 1.0)
    done = {parts[0]: 2 * progress.PARTS[parts[0]]}               # the first part took twice its estimate
    left, pace = progress.remaining_s(done, parts[1:])
    assert pace == 2.0 and left == 2 * sum(progress.PARTS[p] for p in parts[1:])
    assert progress.main(["start", str(tmp_path)]) == 0
    assert progress.main(["next", str(tmp_path), parts[0]]) == 0
    assert progress.main(["next", str(tmp_path), parts[1]]) == 0
    state = json.loads((tmp_path / ".bench-progress").read_text())
    assert list(state["done"]) == [parts[0]] and state["current"][0] == parts[1]
    assert float((tmp_path / ".bench-start").read_text()) == state["start"]
    assert progress.main(["next", str(tmp_path)]) == 2
