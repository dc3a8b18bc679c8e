"""`make gpu-check`: every CUDA path of the lab in one command, with a table of what passed.

    .venv/bin/python scripts/gpu_check.py [--out DIR]

On a machine without a CUDA device it says so in one line and exits 0 having run nothing GPU-specific (so the
target is safe in any CI). On a GPU machine it runs, each under a timeout:

  1. the GPU tests, `pytest -m gpu tests/gpu` (executors on NCCL and with staged CUDA payloads, one GPU per rank
     under torch.distributed and MPI, training on cuda with every backend, the DDP hook == the trainer on NCCL,
     the asynchronous hook's CUDA stream path with several buckets);
  2. a short NCCL `backend=torch` run of `src/train.py` (gTop-k, one GPU per rank, 2 ranks when there are 2 GPUs);
  3. the selection benchmark on the GPU at the papers' sizes (`bench/selection.py --devices cuda --quick --sizes
     2.5e7 1e8`: Top-k vs Gaussian-k, Random-k, DGC sampling, d = 25M and 100M, 3 rounds);
  4. the DDP-hook example on NCCL (`torchrun examples/ddp_gtopk.py --device cuda`);
  5. the FSDP example on NCCL (`torchrun examples/fsdp_topk.py --device cuda`: `ssgd.fsdp`'s Top-k reduce-scatter);

with P = 2 ranks where there are 2 GPUs, else P = 1 and a row saying that NCCL at P >= 2 was not run (one GPU
per rank: NCCL refuses two ranks on one device). Timeouts 240 + 60 + 150 + 60 + 60 s, 110 s per test: at most
10 min even when something hangs; ~4 min when all pass. Then it prints one table (check, result, seconds,
detail), writes it to <--out>/gpu_check.md with the JSON beside and every check's whole output to
<--out>/gpu_check.log (each file replaced whole, never half-written), and exits 1 if any check failed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


LOG: list[str] = []   # every check's command and whole output, written to <--out>/gpu_check.log


def run(argv: list[str], timeout: float, **kwargs) -> tuple[int | None, str, float]:
    """(exit status or None on timeout, combined output tail, seconds); the whole output goes to the log."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env, **kwargs)
        status, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as err:
        status = None
        out = "".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (err.stdout, err.stderr))
    seconds = time.perf_counter() - start
    LOG.append(f"$ {' '.join(argv)}\n# {verdict(status)} after {seconds:.1f} s\n{out}\n")
    return status, out[-4000:], seconds


def verdict(status: int | None) -> str:
    return "pass" if status == 0 else ("TIMEOUT" if status is None else f"FAIL ({status})")


def pytest_rows(tmp: Path) -> list[dict]:
    xml = tmp / "gpu.xml"
    status, out, seconds = run([PY, "-m", "pytest", "-v", "--tb=short", "--timeout", "110", "-m", "gpu", "tests/gpu",
                                f"--junitxml={xml}", "-p", "no:cacheprovider"], timeout=240)
    rows = []
    if xml.exists():
        for case in ET.parse(xml).getroot().iter("testcase"):
            outcome, detail = "pass", ""
            for child in case:
                if child.tag in ("failure", "error"):
                    outcome = "FAIL"
                    detail = " ".join((child.get("message") or "").split())[:200]
                    LOG.append(f"# {case.get('name')}: {child.tag}\n{child.text or ''}\n")
                elif child.tag == "skipped":
                    outcome = "skipped: " + (child.get("message") or "")[:60]
            rows.append({"check": f"test {case.get('name')}", "result": outcome,
                         "seconds": float(case.get("time", 0)), "detail": detail})
    if status != 0 and not any(r["result"] == "FAIL" for r in rows):
        rows.append({"check": "pytest -m gpu tests/gpu", "result": verdict(status), "seconds": seconds,
                     "detail": " ".join(out.split()[-30:])})
    return rows


def nccl_run(tmp: Path, P: int) -> dict:
    run_dir = tmp / "nccl_run"
    status, out, seconds = run([PY, "src/train.py", "backend=torch", "device=cuda", f"cluster.world_size={P}",
                                "compressor=gtopk", "trainer.max_steps=200", "trainer.progress=false",
                                "wandb.mode=disabled", f"hydra.run.dir={run_dir}"], timeout=60)
    detail = " ".join(out.split()[-12:])
    if status == 0 and (run_dir / "summary.json").exists():
        s = json.loads((run_dir / "summary.json").read_text())
        detail = (f"P={P}, 200 steps: {1e3 * s.get('time/step_s', 0):.2f} ms/step (comm {1e3 * s.get('time/comm_s', 0):.2f}), "
                  f"val acc {s.get('val/acc', 0):.3f}")
    return {"check": "train.py backend=torch device=cuda (NCCL)", "result": verdict(status), "seconds": seconds,
            "detail": detail}


def selection(tmp: Path) -> dict:
    status, out, seconds = run([PY, "bench/selection.py", "--devices", "cuda", "--quick", "--sizes", "2.5e7", "1e8",
                                "--results-dir", str(tmp)], timeout=150)
    detail = " ".join(out.split()[-12:])
    path = tmp / "selection.json"
    if status == 0 and path.exists():
        detail = f"tables in {path.name}; ratios Top-k time / method time per (u, d) in the printed output"
    return {"check": "bench/selection.py --devices cuda --quick --sizes 2.5e7 1e8", "result": verdict(status),
            "seconds": seconds, "detail": detail}


def ddp_example(P: int) -> dict:
    status, out, seconds = run([PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(P),
                                "examples/ddp_gtopk.py", "--device", "cuda"], timeout=60)
    lines = [line for line in out.splitlines() if "validation accuracy" in line]
    return {"check": f"torchrun examples/ddp_gtopk.py --device cuda (NCCL, P={P})", "result": verdict(status),
            "seconds": seconds, "detail": lines[-1] if lines else " ".join(out.split()[-12:])}


def fsdp_example(P: int) -> dict:
    status, out, seconds = run([PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(P),
                                "examples/fsdp_topk.py", "--device", "cuda", "--steps", "100"], timeout=60)
    lines = [line for line in out.splitlines() if "validation accuracy" in line]
    return {"check": f"torchrun examples/fsdp_topk.py --device cuda (FSDP2, NCCL, P={P})", "result": verdict(status),
            "seconds": seconds, "detail": lines[-1] if lines else " ".join(out.split()[-12:])}


def one_gpu_row(gpus: int) -> list[dict]:
    """A row saying NCCL at P >= 2 was not run, when there are fewer than 2 GPUs (none otherwise)."""
    if gpus >= 2:
        return []
    return [{"check": "NCCL with P >= 2 ranks", "result": "skipped: one GPU here", "seconds": 0.0,
             "detail": "one GPU per rank: NCCL refuses two ranks on one device; every NCCL check above ran at P = 1"}]


def table(rows: list[dict], header: str) -> str:
    out = [header, "", "| check | result | seconds | detail |", "|---|---|---|---|"]
    out += [f"| {r['check']} | {r['result']} | {r['seconds']:.1f} | {r['detail'].replace('|', '/')} |" for r in rows]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results", help="where gpu_check.md/.json go")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(f"gpu-check: no CUDA device here (torch {torch.__version__}, CUDA build {torch.version.cuda}, "
              "torch.cuda.is_available() is False): nothing GPU-specific was run")
        return 0
    gpus = torch.cuda.device_count()
    names = ", ".join(torch.cuda.get_device_name(i) for i in range(gpus))
    P = min(2, gpus)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ssgd-gpu-check-") as tmp:
        rows = pytest_rows(Path(tmp))
        rows += [nccl_run(Path(tmp), P), selection(Path(tmp)), ddp_example(P), fsdp_example(P), *one_gpu_row(gpus)]
        selection_json = Path(tmp) / "selection.json"
        selection_data = json.loads(selection_json.read_text()) if selection_json.exists() else None
    header = (f"gpu-check on {gpus} x {names} (torch {torch.__version__}, CUDA {torch.version.cuda}), "
              f"{time.perf_counter() - start:.0f} s")
    text = table(rows, header)
    print(text)
    sys.path.insert(0, str(ROOT / "src"))
    from ssgd.utils.atomic import write_text_atomic

    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out / "gpu_check.md", text, "the gpu-check table")
    write_text_atomic(args.out / "gpu_check.log", "\n".join(LOG), "the gpu-check log")
    write_text_atomic(args.out / "gpu_check.json", json.dumps({"header": header, "rows": rows,
                                                               "selection": selection_data}, indent=1) + "\n",
                      "the gpu-check results")
    failed = [r for r in rows if r["result"] != "pass" and not r["result"].startswith("skipped")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
