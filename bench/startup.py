"""How long `python src/train.py` takes to refuse bad input, and where a good run's start-up goes.

    python bench/startup.py                # make bench-startup
    python bench/startup.py --rounds 3 --out bench/results/startup.json

Cases, run as a user runs them (a fresh process each), interleaved in rounds (bench/harness.py):
a value-range error (`compressor.density=2`), an unknown key (`+foo=1`), a missing data path
(`dataset=cifar10 dataset.data_dir=<missing>`), and `--help`. Goals (issue: start-up): a config error
in under 2 s, a missing data path in under 3 s, on a quiet machine. Then one good run with
`--profile` (`trainer.max_steps=5`) prints the seconds of each start-up phase.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import harness  # noqa: E402

GOALS = {"value range": 2.0, "unknown key": 2.0, "missing data path": 3.0}


def cases(missing: str) -> dict[str, list[str]]:
    return {"value range": ["compressor.density=2"], "unknown key": ["+foo=1"],
            "missing data path": ["dataset=cifar10", f"dataset.data_dir={missing}"], "--help": ["--help"]}


def call(args: list[str], expect: int) -> float:
    proc = subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    if proc.returncode != expect:
        raise SystemExit(f"startup: `train.py {' '.join(args)}` exited {proc.returncode}, expected {expect}: "
                         f"{proc.stderr.strip().splitlines()[-1:]}")
    return 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None, help="write the rounds as JSON here")
    harness.add_noise_arguments(ap)
    args = ap.parse_args(argv)
    if (problem := harness.noise_problem(args)) is not None:
        ap.error(problem)
    noise = harness.noise_from_args(args)
    with tempfile.TemporaryDirectory() as tmp:
        missing = str(Path(tmp) / "no-such-dir")
        items = [(name, harness.timed(lambda a=a, name=name: call(a, 0 if name == "--help" else 2)))
                 for name, a in cases(missing).items()]
        series = harness.interleaved(items, args.rounds, threshold=noise.threshold, retries=noise.retries,
                                     on_round=lambda r: print(f"  round {r.index + 1}/{args.rounds}", file=sys.stderr))
        profile = subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), "--profile", "trainer.max_steps=5",
                                  f"hydra.run.dir={Path(tmp) / 'run'}"], capture_output=True, text=True, cwd=ROOT,
                                 timeout=600)
    print(f"| case | seconds, median [min-max] | goal |\n|---|---|---|")
    for name in series.names:
        s = series.spread(name)
        goal = f"< {GOALS[name]:g} s: {'met' if s.median < GOALS[name] else 'MISSED'}" if name in GOALS else ""
        print(f"| {name} | {harness.ratio_cell(s, series.noisy, 3)} | {goal} |")
    print(f"\n{harness.settings_line(series)}; other processes' CPU: {harness.noise_cell(series)}")
    print(harness.describe_method(noise.threshold, noise.retries))
    lines = [line for line in profile.stderr.splitlines() if line.startswith("profile:")]
    print("\nA good run (trainer.max_steps=5):", lines[-1] if lines else f"no profile line (exit {profile.returncode})")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"series": series.to_json(), "profile": lines[-1:]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
