"""Train the runs the analysis and convergence figures read (`make figs-runs`; part of `make figs`).

    python paper_figs/runs.py [--out paper_figs/runs] [--profile full|quick] [--figure NAME]
                              [--only NAME ...] [--jobs N] [--force] [--fresh] [--list]

Each run is `src/train.py` with an experiment file of experiments/ and a few overrides, written to
<out>/<name>; which runs is the registry's (paper_figs/figures.yaml, `load_figures`):
- every entry's `runs` (full profile only; e.g. the histograms' and bounds' short Top-k / gTop-k runs with
  capture on, on the embedded real MNIST digits and on synthetic PTB-shaped tokens), into <out>/<name>;
- the convergence runs: every series of every panel, once per seed of the profile (`full`: 3 seeds,
  `quick`: 2 seeds and 300 steps; the quick profile trains only these), into
  <out>/convergence/<panel>/<series>_s<seed>;
- the density runs (the `sweep`, full profile only): every scheme at every density, and one
  dense run (density 1) per seed, into <out>/density/<scheme>_d<density>_s<seed> and <out>/density/dense_s<seed>.
`--figure NAME` trains the runs the entry NAME reads (its own and those of its `reads`).
A run whose summary.json exists and whose saved config equals the one its experiment file and overrides
compose to now is kept (rerun with --force, e.g. after changing src/), so an interrupted `make figs`
resumes and an edited experiment file retrains only its runs. `--jobs N` trains N runs at once, each with one
thread (`threads=1`; results do not depend on it). Each run is a process forked from one server that
imported torch, Hydra and the lab once (forked.py), or with --fresh a new interpreter. One line per finished run says how many are done,
the time spent and the expected time left (from figures.yaml's per-step estimates, rescaled by the
pace of the runs finished so far).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.context import BaseContext
from dataclasses import dataclass, field
from pathlib import Path

import yaml

import analysis as an
import forked
import registry
from figlib import ROOT, RUNS, fail, read_jsonl

FIGURES_FILE = registry.FIGURES_FILE
TRAIN_PY = ROOT / "src" / "train.py"
PROFILES = ("full", "quick")
FIXED = ["wandb.mode=disabled", "trainer.progress=false"]   # added to every run


@dataclass
class Job:
    """One run to train: its directory name under --out, overrides, and what it needs."""

    name: str
    overrides: list[str]
    figures: tuple[str, ...]
    est_s: float
    info: dict = field(default_factory=dict)          # written to <run>/run_info.json
    density_from: list[str] = field(default_factory=list)   # names of the runs whose achieved density it takes


def load_figures(path: Path = FIGURES_FILE) -> dict:
    """The training plan of paper_figs/figures.yaml (`registry.load`), checked: `profiles`, `startup_s`,
    `figures` (the convergence panels: each names an experiment file, a target and its series), `density`
    (the sweep, or None), `analysis` (every entry's `runs`: name -> (overrides, the entries that read it,
    expected seconds)) and `owners` (the entries of the panels and of the sweep)."""
    spec = registry.load(path)
    entries = registry.entries(spec)
    owner = {key: next((e.name for e in entries if key in e.spec), None) for key in ("panels", "sweep")}
    plan = {"profiles": spec["profiles"], "startup_s": spec["startup_s"], "analysis": analysis_runs(path, entries),
            "figures": spec["figures"][owner["panels"]]["panels"] if owner["panels"] else {},
            "density": spec["figures"][owner["sweep"]]["sweep"] if owner["sweep"] else None,
            "owners": {"convergence": owner["panels"] or "convergence", "density": owner["sweep"] or "density"}}
    for name, fig in plan["figures"].items():
        check_panel(path, name, fig)
    if plan["density"] is not None:
        check_sweep(path, plan["density"])
    for name in PROFILES:
        if name not in spec["profiles"]:
            fail(f"{path}: profiles lacks '{name}'")
    return plan


def flat(overrides: list) -> list[str]:
    """An entry's override list with its nested lists (YAML aliases) spliced in."""
    return [o for item in overrides for o in (flat(item) if isinstance(item, list) else [item])]


def analysis_runs(path: Path, entries: list) -> dict[str, tuple[list[str], tuple[str, ...], float]]:
    """name -> (overrides, the entries that read it: its own first, then those whose `reads` name it,
    expected seconds) of every entry's `runs`, in the registry's order."""
    runs: dict[str, tuple[list[str], list[str], float]] = {}
    for e in entries:
        for name, run in e.spec.get("runs", {}).items():
            if name in runs or not (ROOT / "experiments" / f"{run['experiment']}.yaml").is_file():
                fail(f"{path}: figures.{e.name}.runs.{name}: a second definition, or no experiments/"
                     f"{run['experiment']}.yaml")
            runs[name] = (["-cn", run["experiment"], "hydra.mode=RUN", *flat(run.get("overrides", []))],
                          [e.name], float(run["est_s"]))
        for name in e.spec.get("reads", []):
            if name not in runs:
                fail(f"{path}: figures.{e.name}.reads: {name!r} is no run of an earlier entry")
            runs[name][1].append(e.name)
    return {name: (o, tuple(f), est) for name, (o, f, est) in runs.items()}


def check_panel(path: Path, name: str, fig: dict) -> None:
    """A convergence panel names an experiment file, a target, its series and their density_from."""
    for key in ("title", "experiment", "target_acc", "step_s", "series"):
        if key not in fig:
            fail(f"{path}: panels.{name} lacks '{key}'")
    extra = fig.get("overrides", [])
    if not isinstance(extra, list) or not all(isinstance(o, str) for o in extra):
        fail(f"{path}: panels.{name}.overrides={extra!r}: must be a list of override strings")
    if not (ROOT / "experiments" / f"{fig['experiment']}.yaml").is_file():
        fail(f"{path}: panels.{name}.experiment={fig['experiment']!r}: no experiments/{fig['experiment']}.yaml")
    for series, s in fig["series"].items():
        dep = s.get("density_from")
        if dep is not None and (dep not in fig["series"] or "density_from" in fig["series"][dep]):
            fail(f"{path}: panels.{name}.series.{series}.density_from={dep!r}: must name another series of "
                 f"the panel that has no density_from itself")


def check_sweep(path: Path, dens: dict) -> None:
    """The density sweep names an experiment file, its densities in (0, 1) and its schemes."""
    for key in ("title", "experiment", "target_acc", "step_s", "steps", "densities", "dense", "schemes"):
        if key not in dens:
            fail(f"{path}: sweep lacks '{key}'")
    if not (ROOT / "experiments" / f"{dens['experiment']}.yaml").is_file():
        fail(f"{path}: sweep.experiment={dens['experiment']!r}: no experiments/{dens['experiment']}.yaml")
    bad = [d for d in dens["densities"] if not (isinstance(d, (int, float)) and 0 < d < 1)]
    if bad or not dens["densities"]:
        fail(f"{path}: sweep.densities={dens['densities']!r}: a non-empty list of numbers in (0, 1)")


def steps_of(overrides: list[str], default: int) -> int:
    """The trainer.max_steps an override list sets, else `default` (for the time estimates only)."""
    for o in overrides:
        if o.startswith("trainer.max_steps="):
            return int(o.split("=", 1)[1])
    return default


def capped(profile_overrides: list[str], figure_steps: int) -> list[str]:
    """A profile's overrides for a figure of `figure_steps` steps (0: the experiment's): its
    trainer.max_steps is a cap, left out where the figure is shorter already (quick never lengthens a figure)."""
    return [o for o in profile_overrides
            if not (figure_steps and o.startswith("trainer.max_steps=") and steps_of([o], 0) >= figure_steps)]


def convergence_jobs(spec: dict, profile: str) -> list[Job]:
    """Every (figure, series, seed) of the plan; series that depend on others come after all the rest."""
    prof = spec["profiles"][profile]
    first: list[Job] = []
    later: list[Job] = []
    for fig_name, fig in spec["figures"].items():
        for series, s in fig["series"].items():
            for seed in prof["seeds"]:
                overrides = ["-cn", fig["experiment"], "hydra.mode=RUN", *fig.get("overrides", []), *s["overrides"],
                             f"seed={seed}", *capped(prof["overrides"], steps_of(fig.get("overrides", []), 0))]
                est = spec["startup_s"] + fig["step_s"] * steps_of(overrides, 2000)
                info = {"figure": fig_name, "title": fig["title"], "series": series, "label": s["label"],
                        "seed": seed, "profile": profile, "target_acc": fig["target_acc"]}
                deps = [f"convergence/{fig_name}/{s['density_from']}_s{x}" for x in prof["seeds"]] \
                    if "density_from" in s else []
                job = Job(f"convergence/{fig_name}/{series}_s{seed}", overrides, (spec["owners"]["convergence"],), est,
                          info, deps)
                (later if deps else first).append(job)
    return first + later


DENSITY_WARMUP = 0.004          # the gTop-k code's warm-up density (epoch 0), raised to the target where denser


def density_jobs(spec: dict, profile: str) -> list[Job]:
    """figures.yaml's density sweep: per seed, one dense run (density 1, shared by every scheme) and every
    (scheme, density), all with the same warm-ups: density max(0.004, density) in epoch 0, the experiment's
    LR warm-up."""
    dens = spec.get("density")
    if dens is None:
        return []
    prof = spec["profiles"][profile]
    common = ["-cn", dens["experiment"], "hydra.mode=RUN"]
    jobs = []
    for seed in prof["seeds"]:
        tail = [f"trainer.max_steps={dens['steps']}", f"seed={seed}", *prof["overrides"]]
        cases = [("dense", dens["dense"], 1.0, [])] + [
            (scheme, s, rho, [f"compressor.density={rho:g}", f"compressor.density_warmup=[{max(DENSITY_WARMUP, rho):g}]"])
            for scheme, s in dens["schemes"].items() for rho in dens["densities"]]
        for scheme, s, rho, extra in cases:
            overrides = [*common, *s["overrides"], *extra, *tail]
            name = f"density/dense_s{seed}" if scheme == "dense" else f"density/{scheme}_d{rho:g}_s{seed}"
            info = {"kind": "density", "figure": "density", "title": dens["title"], "series": scheme,
                    "label": s["label"], "seed": seed, "profile": profile, "target_acc": dens["target_acc"],
                    "density": rho}
            est = spec["startup_s"] + dens["step_s"] * steps_of(overrides, dens["steps"])
            jobs.append(Job(name, overrides, (spec["owners"]["density"],), est, info))
    return jobs


def plan(profile: str, spec: dict) -> list[Job]:
    """Every run of a profile (the full one also trains the analysis runs and the density sweep); the
    runs that take another run's density come after all the rest."""
    if profile == "quick":
        return convergence_jobs(spec, profile)
    jobs = [Job(n, o, f, e) for n, (o, f, e) in spec["analysis"].items()] + convergence_jobs(spec, profile) \
        + density_jobs(spec, "full")
    return sorted(jobs, key=lambda j: bool(j.density_from))        # stable: the order is kept otherwise


def matched_density(out: Path, names: list[str]) -> tuple[float, list[float]]:
    """Mean over the runs `names` of their achieved density after the warm-up, and that run's warm-up list."""
    values, warmup = [], []
    for name in names:
        run = out / name
        cfg = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
        records = [m for m in read_jsonl(run / "metrics.jsonl") if "density/achieved" in m]
        values.append(an.steady_density([m["step"] for m in records], [m["density/achieved"] for m in records],
                                        [m["density/scheduled"] for m in records], cfg["compressor"]["density"]))
        warmup = list(cfg["compressor"]["density_warmup"] or [])
    return sum(values) / len(values), warmup


def resolve(job: Job, out: Path) -> list[str]:
    """The job's overrides, with compressor.density (and its warm-up) from its density_from runs."""
    if not job.density_from:
        return job.overrides
    rho, warmup = matched_density(out, job.density_from)
    rho = float(f"{rho:.4g}")
    job.info["density_from"] = {"runs": job.density_from, "density": rho}
    raised = ",".join(f"{max(w, rho):g}" for w in warmup)
    return [*job.overrides, f"compressor.density={rho:g}", f"compressor.density_warmup=[{raised}]"]


_HYDRA = threading.Lock()            # Hydra's compose API keeps global state
IGNORED = ("threads",)               # keys that do not change a run's results (the pool size)


def composed(overrides: list[str]) -> dict:
    """The job config `src/train.py -cd experiments <overrides>` would run (resolved, as plain dicts)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    name = overrides[overrides.index("-cn") + 1]
    rest = [o for i, o in enumerate(overrides) if o != "-cn" and (i == 0 or overrides[i - 1] != "-cn")]
    with _HYDRA, initialize_config_dir(config_dir=str(ROOT / "experiments"), version_base="1.3"):
        cfg = compose(name, [f"hydra.searchpath=[file://{ROOT / 'conf'}]", *rest, *FIXED])
    return {k: v for k, v in OmegaConf.to_container(cfg, resolve=True, enum_to_str=True).items() if k not in IGNORED}


def is_done(run_dir: Path, overrides: list[str]) -> bool:
    """Finished (summary.json) with exactly the config these overrides compose to now: a run whose
    experiment file or overrides changed since is trained again."""
    from omegaconf import OmegaConf

    saved = run_dir / ".hydra" / "config.yaml"
    if not (run_dir / "summary.json").exists() or not saved.exists():
        return False
    old = {k: v for k, v in OmegaConf.to_container(OmegaConf.load(saved), resolve=True).items() if k not in IGNORED}
    return old == composed(overrides)


def train(name: str, overrides: list[str], out: Path, info: dict, one_thread: bool,
          ctx: BaseContext | None = None) -> float:
    """Train one run into <out>/<name>; its wall-clock seconds. With `ctx` (forked.server) the run is a
    child of the warm server, otherwise a fresh `python src/train.py` (--fresh); the results are the same."""
    run_dir = out / name
    if run_dir.exists():
        shutil.rmtree(run_dir)            # an unfinished or outdated earlier attempt
    args = ["-cd", str(ROOT / "experiments"), *overrides, *(["threads=1"] if one_thread else []), *FIXED,
            f"hydra.run.dir={run_dir}"]
    start = time.perf_counter()
    if ctx is None:
        env = {**os.environ, **run_env(one_thread)}
        proc = subprocess.run([sys.executable, str(TRAIN_PY), *args], capture_output=True, text=True, cwd=ROOT,
                              env=env)
        status, stderr = proc.returncode, proc.stderr
    else:
        fd, log = tempfile.mkstemp(prefix="ssgd-figs-", suffix=".log")
        os.close(fd)
        try:
            status = forked.train(ctx, TRAIN_PY, args, ROOT, run_env(one_thread), Path(log))
            stderr = Path(log).read_text(errors="replace")
        finally:
            os.unlink(log)
    if status != 0:
        raise RuntimeError(f"run {name} failed (exit {status}): {stderr.strip().splitlines()[-1:]}")
    write_info(run_dir, info, overrides)
    return time.perf_counter() - start


def run_env(one_thread: bool) -> dict[str, str]:
    """The environment every run gets on top of this process's."""
    return {"WANDB_SILENT": "true", **({"OMP_NUM_THREADS": "1"} if one_thread else {})}


def write_info(run_dir: Path, info: dict, overrides: list[str]) -> None:
    """<run>/run_info.json: what fig_convergence.py needs beyond the run's own files."""
    (run_dir / "run_info.json").write_text(json.dumps({**info, "overrides": overrides}, indent=1) + "\n")


class Progress:
    """One line per finished run: done/total, its time, the time so far and the expected time left.

    Expected time left = the remaining runs' estimates (figures.yaml, 2 quiet cores) / runs at once,
    times the mean slowdown (seconds taken / estimate) of the runs trained so far here (1 before any)."""

    def __init__(self, jobs: list[Job], n_parallel: int) -> None:
        self.total, self.done, self.parallel = len(jobs), 0, n_parallel
        self.left_est = sum(j.est_s for j in jobs)
        self.slowdowns: list[float] = []
        self.start = time.perf_counter()
        self.lock = threading.Lock()

    def finished(self, job: Job, seconds: float | None) -> None:
        with self.lock:
            self.done += 1
            self.left_est -= job.est_s
            if seconds is not None:
                self.slowdowns.append(seconds / job.est_s)
            slow = sum(self.slowdowns) / len(self.slowdowns) if self.slowdowns else 1.0
            left = max(self.left_est, 0.0) / self.parallel * slow
            what = f"{seconds:.0f} s" if seconds is not None else "done earlier, kept"
            print(f"[{self.done:>2}/{self.total}] {job.name}: {what} | "
                  f"{(time.perf_counter() - self.start) / 60:.1f} min so far, ~{left / 60:.1f} min left", flush=True)


def run_all(jobs: list[Job], out: Path, n_parallel: int, force: bool, fresh: bool = False) -> None:
    progress = Progress(jobs, n_parallel)
    ctx = None if fresh else forked.server(run_env(one_thread=n_parallel > 1))
    futures: dict[str, Future] = {}

    def work(job: Job) -> None:
        for dep in job.density_from:
            if dep in futures:
                futures[dep].result()          # the dependencies were submitted earlier (FIFO): no deadlock
            if not (out / dep / "summary.json").exists():
                raise RuntimeError(f"run {job.name} needs the finished run {dep} (train it first)")
        overrides = resolve(job, out)
        if not force and is_done(out / job.name, overrides):
            write_info(out / job.name, job.info, overrides)      # figures.yaml's labels and target may have changed
            progress.finished(job, None)
            return
        progress.finished(job, train(job.name, overrides, out, job.info, n_parallel > 1, ctx))

    print(f"{len(jobs)} runs into {out}, {n_parallel} at a time; expected ~"
          f"{sum(j.est_s for j in jobs) / n_parallel / 60:.0f} min on 2 quiet cores", flush=True)
    with ThreadPoolExecutor(max_workers=n_parallel) as pool:
        for job in jobs:
            futures[job.name] = pool.submit(work, job)
        errors = []
        for fut in futures.values():
            try:
                fut.result()
            except RuntimeError as err:
                errors.append(str(err))
    if errors:
        print("error: " + "; ".join(errors), file=sys.stderr)
        raise SystemExit(1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="folder of the run directories (default: paper_figs/runs; "
                                                "outputs/figs-quick/runs with --profile quick)")
    ap.add_argument("--profile", default="full", help=f"one of: {', '.join(PROFILES)}")
    ap.add_argument("--only", nargs="+", default=None, help="run names (see --list)")
    ap.add_argument("--figure", default=None, help="only the runs of one figure (see --list)")
    ap.add_argument("--jobs", type=int, default=1, help="runs trained at once (each with one thread)")
    ap.add_argument("--force", action="store_true", help="retrain runs that already finished")
    ap.add_argument("--fresh", action="store_true",
                    help="start every run as a fresh `python src/train.py` (default: forked from one warm "
                         "process that imported torch, Hydra and the lab once; same results, a few s less per run)")
    ap.add_argument("--list", action="store_true", help="print the runs and exit")
    args = ap.parse_args(argv)
    if args.profile not in PROFILES:
        fail(f"--profile {args.profile}: unknown profile; allowed: {', '.join(PROFILES)}")
    if args.jobs < 1:
        fail(f"--jobs {args.jobs}: must be >= 1")
    jobs = plan(args.profile, load_figures())
    figures = sorted({f for j in jobs for f in j.figures})
    if args.figure is not None and args.figure not in figures:
        fail(f"--figure {args.figure}: unknown figure; allowed: {', '.join(figures)}")
    names = [j.name for j in jobs]
    unknown = [n for n in args.only or [] if n not in names]
    if unknown:
        fail(f"--only {' '.join(unknown)}: unknown run; allowed: {', '.join(names)}")
    jobs = [j for j in jobs if (args.only is None or j.name in args.only)
            and (args.figure is None or args.figure in j.figures)]
    if args.list:
        for j in jobs:
            print(f"{j.name}  (for: {', '.join(j.figures)}; ~{j.est_s:.0f} s)  {' '.join(j.overrides)}")
        return 0
    default = RUNS if args.profile == "full" else ROOT / "outputs" / "figs-quick" / "runs"
    out = Path(args.out) if args.out else default
    out.mkdir(parents=True, exist_ok=True)
    try:
        run_all(jobs, out, args.jobs, args.force, args.fresh)
    except KeyboardInterrupt:
        print("interrupted: finished runs are kept; rerun to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
