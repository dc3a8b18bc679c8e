"""The benchmark harnesses run (not how fast): bench/dlbench.py, bench/trainer_vs_peers.py, bench/summary.py.

Each workload runs one tiny iteration through the real driver (a worker subprocess per tool and
thread count); parameter counts are pinned, so a model definition that drifts from DLBench's, or
differs between tools, fails here. Timings are never asserted.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
TOOLS_PY = ROOT / ".venv-tools" / "bin" / "python"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dlbench = load("dlbench")
workloads = load("dlbench_workloads")

PINNED = {"fcn5": 117_997_696, "fcnr": 14_205_962, "alexnet_r": 85_098, "resnet56": 853_018, "lstm": 6_180_624}


def run(script: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_parameter_counts_are_pinned_and_derived():
    assert {k: w.params for k, w in workloads.WORKLOADS.items()} == PINNED
    assert workloads.dense_params((26752, 2048, 2048, 2048, 26752)) == PINNED["fcn5"]
    assert workloads.dense_params((784, 2048, 4096, 1024, 10)) == PINNED["fcnr"]   # papers.md 8: "14.2M"
    emb, lstm, dec = 10000 * 256, 2 * 4 * (256 * 512 + 256), 256 * 10000 + 10000
    assert emb + lstm + dec == PINNED["lstm"]


def test_pytorch_definitions_have_the_pinned_counts():
    torch_side = load("dlbench_torch")
    for key, w in workloads.WORKLOADS.items():
        canonical, raw = torch_side.canonical_params(torch_side.build_model(w))
        assert canonical == PINNED[key], key
        assert raw - canonical == (2 * 4 * 256 if key == "lstm" else 0), key   # nn.LSTM's second bias


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
    assert proc.stderr == "error: --parts gpu: not one of threads, mpi\n"


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
    assert "| LSTM | 32 | 2 | 200 (150-250) (params!) |" in table
    assert "Skipped tensorflow: absent" in table


@pytest.mark.slow
def test_trainer_vs_peers_runs_both_parts(tmp_path):
    out = tmp_path / "peers.json"
    proc = run("trainer_vs_peers.py", "--P", "2", "--models", "fnn3", "--schemes", "dense", "topk", "--reps", "1",
               "--quick", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [(r["compressor"], r["P"]) for r in result["threads"]] == [("dense", 2), ("gtopk", 2)]   # the fnn3 cases
    assert all(r["ratio"] > 0 for r in result["threads"])
    (row,) = result["mpi"]
    assert row["P"] == 2 and row["model"] == "fnn3"
    assert set(row["times_s"]) == {"ssgd_dense", "ssgd_topk", "ddp"}
    assert all(len(v) == 1 for v in row["times_s"].values())
    assert row["ssgd_dense_over_ddp"] > 0 and set(row["scheme_over_dense"]) == {"ssgd_topk"}
    assert {"compute", "comm", "update", "step"} <= set(row["ssgd_parts_ms_rank0"]["ssgd_dense"])
    assert "ssgd dense / DDP" in out.with_suffix(".md").read_text()


def test_summary_reads_what_exists(tmp_path):
    summary = load("summary")
    text = summary.summary(wall_s=90.0)
    assert text.startswith("# Benchmark summary") and "1.5 min" in text
    for section in ("bench-dlbench", "bench-trainer", "bench-threads", "bench-comm", "fig-selection"):
        assert f"(`make {section}`)" in text
