"""The gTop-k paper's convergence run at its own size (`make fig-convergence-paper DATA=dir [DEVICE=cuda]`).

    python paper_figs/convergence_paper.py --data DIR [--device cpu|cuda|cuda:N] [--runs paper_figs/runs]
                                           [--out paper_figs/out] [--max-steps N] [--time-steps 10]
                                           [--dataset cifar10] [--set KEY=VALUE ...] [--estimate-only]
                                           [--force]

What it runs: experiments/icdcs_convergence.yaml (Shi et al., "A Distributed Synchronous SGD Algorithm
with Global Top-k Sparsification for Low Bandwidth Networks", ICDCS 2019, Section 6, convergence figure):
ResNet-20 on CIFAR-10, 4 workers, 32 samples per worker, lr 0.1 with the 10-epoch LR warm-up and x0.1 at
epochs 81 / 122 / 155, 141 epochs, density 0.004 in epoch 0 then 0.001, the same warm-ups for every
scheme; here for dense, Top-k, gTop-k and Gaussian-k (one seed each).

Steps: (1) the data folder (dataset.data_dir) must hold CIFAR-10's python batches, else one line and exit
status 2; (2) one timing process trains every scheme for --time-steps steps (records every step) and the
median step time after the first two steps, per scheme, gives the printed estimate of the whole run
(141 epochs x steps per epoch x that time, summed over the schemes; evaluation not included); (3) the
four runs are trained one at a time by paper_figs/runs.py's machinery into <runs>/convergence_paper/
<scheme>_s1 (resumable: a finished run whose config is unchanged is kept); (4) fig_convergence.py's
panels are drawn into <out>/fig_convergence_paper.{png,pdf,csv} with, beside each series, its final
validation accuracy and the paper's (the repository holds no number for the paper's final ResNet-20
accuracies, so that reads "paper value: not in this repository"), and <out>/convergence_paper_summary.csv.

--estimate-only stops after step (2). --max-steps N stops every run after N steps (a short check; the title then says so); --dataset and --set
replace the dataset and add overrides (the test runs it on synthetic_cifar10, which needs no --data).
"""
from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fig_convergence as conv
import runs as runs_py
import style
from figlib import OUT, ROOT, RUNS, fail, find_runs, plt, read_json, read_jsonl, write_csv

EXPERIMENT = "icdcs_convergence"
SCHEMES = {"dense": "dense (S-SGD)", "topk": "Top-k", "gtopk": "gTop-k", "gaussiank": "Gaussian-k"}
FIGURE = "paper"
TARGET = 0.90                  # the time-to-accuracy panel's target (a panel setting, not a paper number)
# the paper's final validation accuracies per scheme; the repository holds none, so none is drawn
PAPER_FINAL: dict[str, float] = {}
CIFAR_FILES = ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch")


def check_data(data: str | None, dataset: str) -> list[str]:
    """The dataset overrides; exits 2 with one line when dataset=cifar10 and `data` holds no batches."""
    if dataset != "cifar10":
        return [f"dataset={dataset}"]
    if not data:
        fail("DATA (dataset.data_dir) is required: the folder of CIFAR-10's python batches "
             "(make fig-convergence-paper DATA=/path/to/cifar-10-batches-py)")
    root = Path(data).expanduser()
    if not any(all((folder / f).is_file() for f in CIFAR_FILES) for folder in (root, root / "cifar-10-batches-py")):
        fail(f"DATA={data} (dataset.data_dir): no CIFAR-10 python batches there or in its cifar-10-batches-py/ "
             f"(expected {', '.join(CIFAR_FILES)})")
    return [f"dataset.data_dir={root.resolve()}"]


def base_overrides(dataset: list[str], device: str, extra: list[str]) -> list[str]:
    return ["-cn", EXPERIMENT, *dataset, f"device={device}", "seed=1", *extra]


def measure(base: list[str], steps: int, cifar: bool) -> tuple[dict[str, float], float]:
    """(scheme -> median seconds per step over steps 3..`steps`, steps per epoch), from one Hydra multirun
    over the schemes of `steps` steps each, metrics every step, in a temporary folder (on CIFAR-10 with a
    100-image validation subset: the timing runs' final evaluation is not what is timed)."""
    with tempfile.TemporaryDirectory(prefix="ssgd-timing-") as tmp:
        argv = [sys.executable, str(ROOT / "src" / "train.py"), "-cd", str(ROOT / "experiments"), *base,
                *(["dataset.val_size=100"] if cifar else []),
                "hydra.mode=MULTIRUN", f"compressor={','.join(SCHEMES)}", f"trainer.max_steps={steps}",
                "trainer.log_every=1", *runs_py.FIXED, f"hydra.sweep.dir={tmp}/sweep"]
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            tail = proc.stderr.strip().splitlines()[-1:] or proc.stdout.strip().splitlines()[-1:]
            print(f"error: the timing runs failed (exit {proc.returncode}): {' '.join(tail)}", file=sys.stderr)
            raise SystemExit(proc.returncode)
        times: dict[str, float] = {}
        per_epoch = math.nan
        for summary in sorted(Path(tmp, "sweep").rglob("summary.json")):
            records = [m for m in read_jsonl(summary.parent / "metrics.jsonl") if "time/step_s" in m]
            scheme = str(read_json(summary)["compressor"])
            warm = [m["time/step_s"] for m in records if m["step"] > 2] or [m["time/step_s"] for m in records]
            times[scheme] = statistics.median(warm)
            last = records[-1]
            per_epoch = last["step"] / last["epoch"] if last["epoch"] else math.nan
    missing = [s for s in SCHEMES if s not in times]
    if missing:
        fail(f"the timing runs wrote no metrics for {', '.join(missing)}")
    return times, per_epoch


def estimate_line(times: dict[str, float], per_epoch: float, epochs: int, device: str) -> tuple[str, float]:
    """The printed estimate and its seconds: every scheme's median step time x epochs x steps per epoch."""
    total = sum(t * epochs * per_epoch for t in times.values())
    h, m = divmod(int(round(total / 60)), 60)
    mean = statistics.mean(times.values())
    each = ", ".join(f"{s} {t:.3g} s" for s, t in times.items())
    return (f"estimated {h} h {m} min for {len(times)} schemes x {epochs} epochs "
            f"(step {mean:.3g} s measured on {device}: {each}; {per_epoch:.0f} steps per epoch; evaluation "
            f"not included)", total)


def jobs(base: list[str], times: dict[str, float], steps: int, title: str, profile: str) -> list[runs_py.Job]:
    out = []
    for scheme, label in SCHEMES.items():
        info = {"figure": FIGURE, "title": title, "series": scheme, "label": label, "seed": 1,
                "profile": profile, "target_acc": TARGET}
        out.append(runs_py.Job(f"convergence_paper/{scheme}_s1", [*base[:2], "hydra.mode=RUN", *base[2:],
                                                                   f"compressor={scheme}"],
                               ("convergence_paper",), 8 + times[scheme] * steps, info))
    return out


def paper_label(scheme: str) -> str:
    value = PAPER_FINAL.get(scheme)
    return f"paper {value:.3f}" if value is not None else "paper value: not in this repository"


def draw(runs_dir: Path, out: Path) -> list[Path]:
    """fig_convergence's panels for the four runs, the final accuracies (ours, the paper's) beside them."""
    found = [r for r in find_runs(runs_dir / "convergence_paper") if r.metrics]
    figures = conv.group(found, TARGET)
    info, series = figures[FIGURE]
    first, rows, summary = conv.draw(FIGURE, info, series)
    plt.close(first)

    def draw_at(width: float):
        fig = conv.draw(FIGURE, info, series, width)[0]
        for i, s in enumerate(series):
            final = float(sum(r.val_acc[-1] for r in s.runs) / len(s.runs))
            fig.axes[1].annotate(f"{s.label}: final {final:.3f}; {paper_label(s.scheme)}", xy=(0.98, 0.04 + 0.08 * i),
                                 xycoords="axes fraction", fontsize="x-small", color=style.look(s.key, i).color,
                                 ha="right", va="bottom")
        return fig

    paths = style.save(draw_at, out, "fig_convergence_paper", conv.ROW_HEADER, rows)
    header = [*conv.SUMMARY_HEADER, "paper_final_val_acc"]
    table = out / "convergence_paper_summary.csv"
    write_csv(table, header, [[*row, PAPER_FINAL.get(row[3], "not in this repository")] for row in summary])
    return [*paths, table]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="dataset.data_dir: CIFAR-10's python batches (make: DATA=)")
    ap.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (make: DEVICE=)")
    ap.add_argument("--runs", default=str(RUNS), help="folder of the runs (they go to <runs>/convergence_paper/)")
    ap.add_argument("--out", default=str(OUT), help="figure folder")
    ap.add_argument("--max-steps", type=int, default=None, help="stop every run after N steps (a short check)")
    ap.add_argument("--time-steps", type=int, default=10, help="steps per scheme of the timing runs (>= 3)")
    ap.add_argument("--dataset", default="cifar10", help="dataset group (cifar10; synthetic_cifar10 for tests)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="further overrides of every run")
    ap.add_argument("--estimate-only", action="store_true", help="print the estimate and exit (no training)")
    ap.add_argument("--force", action="store_true", help="retrain finished runs")
    args = ap.parse_args(argv)
    if args.max_steps is not None and args.max_steps < 1:
        fail(f"--max-steps {args.max_steps}: must be >= 1")
    if args.time_steps < 3:
        fail(f"--time-steps {args.time_steps}: must be >= 3 (the first two steps are not timed)")
    if not (args.device == "cpu" or args.device == "cuda" or args.device.startswith("cuda:")):
        fail(f"DEVICE={args.device} (device): allowed: cpu, cuda, cuda:N")
    base = base_overrides(check_data(args.data, args.dataset), args.device, list(args.set))
    epochs = int(runs_py.composed([*base, "hydra.mode=RUN"])["trainer"]["epochs"])
    print(f"fig-convergence-paper: timing {len(SCHEMES)} schemes x {args.time_steps} steps on {args.device} ...",
          flush=True)
    times, per_epoch = measure(base, args.time_steps, args.dataset == "cifar10")
    line, _ = estimate_line(times, per_epoch, epochs, args.device)
    print(line, flush=True)
    if args.estimate_only:
        return 0
    steps = args.max_steps if args.max_steps is not None else int(math.ceil(epochs * per_epoch))
    short = args.max_steps is not None
    if short:
        base = [*base, f"trainer.max_steps={args.max_steps}"]
        print(f"--max-steps {args.max_steps}: every run stops after {args.max_steps} steps (a short check, "
              "not the paper's run)", flush=True)
    title = ("SHORT CHECK (--max-steps), not the paper's run. " if short else "") + \
        "gTop-k paper (ICDCS 2019) convergence: ResNet-20, 4 workers, the paper's epochs and schedule"
    runs_dir = Path(args.runs)
    runs_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        runs_py.run_all(jobs(base, times, steps, title, "short" if short else "paper"), runs_dir, 1, args.force)
    except KeyboardInterrupt:
        print("interrupted: finished runs are kept; rerun to resume", file=sys.stderr)
        return 130
    for path in draw(runs_dir, Path(args.out)):
        print(f"wrote {path}")
    print(f"fig-convergence-paper: done in {(time.perf_counter() - start) / 60:.1f} min of training", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
