"""Selection cost: exact Top-k vs Gaussian-k, Random-k and DGC sampling (Top-k paper's motivation).

For each device, distribution and size d, times `compress(u, density)` of every selector on the same
vector, interleaved in rounds by bench/harness.py (topk, topk_blocks, gaussiank, ... then again; one
warm-up round; calls repeated inside a round until it lasts >= --min-round-s; CUDA synchronised
around each call), and records the achieved density |I| / d of each call. Reported per cell: the
median over rounds with [min-max]; the ratio Top-k time / method time taken inside each round, its
median and [min-max] ("Top-k" is `torch.topk` over all d entries, the papers' baseline; `topk_blocks` is
the lab's TopK compressor, the same set through block peaks, `ssgd.compress.sparse.select_topk`); the
CPU other processes used during the rounds (cores, max); rounds above
--noise-threshold cores (default 0.2) are repeated (<= --retries, default 2) and a (device, u, d)
still above it is marked "noisy". This module is the one timing implementation:
`make fig-selection` (paper_figs/fig_selection.py) imports it.

    .venv/bin/python bench/selection.py
    .venv/bin/python bench/selection.py --quick          # d = 1e5, 1e6; 3 rounds
    .venv/bin/python bench/selection.py --threads 1 --sizes 1e6 1e7
Writes <--out-dir>/selection.json (default bench/results) and prints the markdown tables.

Vectors: u ~ N(0, 1), and u ~ Laplace(0, 1) (heavier tails: Gaussian-k's threshold assumes a normal
u, and real gradients have heavier tails, as Ok-Topk (Li and Hoefler, PPoPP 2022) reports).
Selectors: Top-k and Gaussian-k as in the Top-k paper (Shi, Chu, Cheung, See, arXiv:1911.08772) and
its released code hclhkbu/GaussianK-SGD (compression.py), Random-k and DGC sampling from the same file.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))
import harness  # noqa: E402
from ssgd.compress.base import Compressor  # noqa: E402
from ssgd.compress.dgc import DGCSampling  # noqa: E402
from ssgd.compress.gaussiank import GaussianK  # noqa: E402
from ssgd.compress.randomk import RandomK  # noqa: E402
from ssgd.compress.sparse import k_of, select_topk_full  # noqa: E402
from ssgd.compress.topk import TopK  # noqa: E402
from ssgd.payload import Sparse  # noqa: E402

class TorchTopK(Compressor):
    """Exact Top-k as `torch.topk(|u|, k)` over all d entries: the selection the papers' costs are measured
    against (Shi et al., arXiv:1911.08772), and the reference of every ratio here."""

    selection_cost = "exact_topk"

    def compress(self, u: torch.Tensor, density: float) -> Sparse:
        return select_topk_full(u, k_of(u.numel(), density))


# name -> factory(seed): every selector gets a fresh, seeded generator (never the global RNG)
METHODS: dict[str, Callable[[int], Compressor]] = {
    "topk": lambda seed: TorchTopK(),
    "topk_blocks": lambda seed: TopK(),          # the lab's Top-k: the same set through block peaks
    "gaussiank": lambda seed: GaussianK(),
    "randomk": lambda seed: RandomK(torch.Generator().manual_seed(seed)),
    "dgcsampling": lambda seed: DGCSampling(torch.Generator().manual_seed(seed)),
    "dgcsampling_scaled": lambda seed: DGCSampling(torch.Generator().manual_seed(seed), scale_k=True),
}
DISTRIBUTIONS = ("normal", "laplace")
DEFAULT_SIZES = (1e5, 1e6, 1e7, 2.5e7)
QUICK_SIZES = (1e5, 1e6)
QUICK_ROUNDS = 3
WARMUP_ROUNDS = 1
RESULTS = ROOT / "bench" / "results"


@dataclass(frozen=True)
class Row:
    """One (device, distribution, d, method) cell; times in ms (per round: the median of the round's
    `inner` calls; then median, min and max over `reps` rounds), densities as |I| / d over all calls,
    `topk_over_method_*`: Top-k time / this method's time inside each round, over rounds; noise of the
    (device, dist, d) series: other processes' CPU (cores, max over rounds), `noisy` (None: unmeasured)."""

    device: str
    threads: int
    dist: str
    d: int
    method: str
    reps: int
    median_ms: float
    min_ms: float
    max_ms: float
    density_target: float
    density_mean: float
    density_min: float
    density_max: float
    topk_over_method: float = float("nan")
    topk_over_method_lo: float = float("nan")
    topk_over_method_hi: float = float("nan")
    inner: int = 1
    other_cores_max: float | None = None
    noisy: bool | None = None
    repeated_rounds: int = 0
    noise_threshold: float = harness.DEFAULT_THRESHOLD_CORES


def make_vector(dist: str, d: int, seed: int, device: str) -> torch.Tensor:
    """float32 [d] on `device`: N(0, 1) or Laplace(0, 1) (= E1 - E2, two standard exponentials),
    drawn on the CPU from a generator seeded with `seed`."""
    g = torch.Generator().manual_seed(seed)
    if dist == "normal":
        u = torch.randn(d, generator=g)
    elif dist == "laplace":
        u = torch.empty(d).exponential_(generator=g) - torch.empty(d).exponential_(generator=g)
    else:
        raise ValueError(f"dist={dist!r}: one of {', '.join(DISTRIBUTIONS)}")
    return u.to(device)


def default_reps(d: int) -> int:
    """Rounds per (device, dist, d): 15 up to d = 1e6 (noisier, cheap), 9 up to 1e7, then 7."""
    return 15 if d <= 1_000_000 else 9 if d <= 10_000_000 else 7


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def time_selectors(selectors: dict[str, Compressor], u: torch.Tensor, density: float, rounds: int,
                   noise: harness.Noise = harness.Noise(), on_round: Callable[[harness.Round], None] | None = None
                   ) -> tuple[harness.Series, dict[str, list[int]]]:
    """Interleaved rounds of `compress(u, density)` of each selector (bench/harness.py), after one
    warm-up round; returns the series and {name: entries selected per timed call (all attempts)}. u is never modified
    (Compressor contract)."""
    device = str(u.device)
    counts: dict[str, list[int]] = {name: [] for name in selectors}

    def call(name: str, c: Compressor) -> Callable[[], float]:
        def run() -> float:
            _sync(device)
            start = time.perf_counter()
            s = c.compress(u, density)
            _sync(device)
            seconds = time.perf_counter() - start
            counts[name].append(len(s))
            return seconds
        return run

    series = harness.interleaved([(n, call(n, c)) for n, c in selectors.items()], rounds,
                                 threshold=noise.threshold, retries=noise.retries, warmup=WARMUP_ROUNDS,
                                 min_round_s=noise.min_round_s, on_round=on_round)
    return series, {name: c[WARMUP_ROUNDS:] for name, c in counts.items()}     # the timed calls only


def measure(sizes: list[int], density: float, devices: list[str], dists: list[str] | None = None,
            methods: list[str] | None = None, reps: int | None = None,
            progress: Callable[[str], None] = print, noise: harness.Noise = harness.Noise()) -> list[Row]:
    """Time every method in `methods` (default: all of METHODS) on every (device, dist, d); reps
    (rounds) None -> default_reps(d). One progress line per (device, dist, d)."""
    dists = list(dists or DISTRIBUTIONS)
    methods = list(methods or METHODS)
    threads = torch.get_num_threads()
    rows: list[Row] = []
    for device in devices:
        for dist in dists:
            for d in sizes:
                start = time.perf_counter()
                u = make_vector(dist, d, seed=d, device=device)
                n = reps or default_reps(d)
                series, counts = time_selectors({m: METHODS[m](0) for m in methods}, u, density, n, noise)
                del u
                info = series.to_json()
                for m in methods:
                    sp, r = series.spread(m), series.ratio(methods[0], m)
                    dens = [c / d for c in counts[m]]
                    rows.append(Row(device, threads, dist, d, m, n, 1e3 * sp.median, 1e3 * sp.lo, 1e3 * sp.hi,
                                    density, statistics.fmean(dens), min(dens), max(dens), r.median, r.lo, r.hi,
                                    series.inner, info["other_cores_max"], series.noisy, info["repeated_rounds"],
                                    noise.threshold))
                cell = ", ".join(f"{r.method} {r.median_ms:.3g} ms" for r in rows[-len(methods):])
                progress(f"{device} {dist} d={d:,} ({n} rounds x {series.inner}, {time.perf_counter() - start:.1f} s, "
                         f"other CPU {harness.noise_cell(info)}): {cell}")
    return rows


def _cell(rows: list[Row], device: str, dist: str, d: int, method: str) -> Row | None:
    return next((r for r in rows if (r.device, r.dist, r.d, r.method) == (device, dist, d, method)), None)


def ratio(rows: list[Row], row: Row, reference: str = "topk") -> float:
    """Top-k time / `row`'s time, the median over rounds of the per-round ratio (1.0 for Top-k itself;
    nan if Top-k was not measured in the same series)."""
    if row.method == reference:
        return 1.0
    return row.topk_over_method if _cell(rows, row.device, row.dist, row.d, reference) else float("nan")


def times(x: float) -> str:
    """A ratio as '0.76x', '7.6x', '110x'."""
    return f"{x:.2g}x" if x < 10 else f"{x:.0f}x"


def markdown_tables(rows: list[Row]) -> str:
    """Per device and distribution: median ms of each method with Top-k / method [min-max over rounds]
    in brackets, and the other processes' CPU; every number of a noisy (device, u, d) carries the mark.
    Then the achieved density / target of the selectors whose count is not fixed."""
    methods = list(dict.fromkeys(r.method for r in rows))
    out = []
    for device in dict.fromkeys(r.device for r in rows):
        for dist in dict.fromkeys(r.dist for r in rows if r.device == device):
            cells = [r for r in rows if r.device == device and r.dist == dist]
            c0 = cells[0]
            out += [f"\nSelection time, {device} ({c0.threads} threads), u ~ {dist}, density {c0.density_target}: "
                    f"median ms over rounds (Top-k / method per round: median [min-max]); noise threshold "
                    f"{c0.noise_threshold:g} cores", "",
                    "| d | rounds x calls | " + " | ".join(methods) + f" | {harness.NOISE_COLUMN} |",
                    "|---" * (len(methods) + 3) + "|"]
            for d in dict.fromkeys(r.d for r in cells):
                parts = []
                for m in methods:
                    r = _cell(rows, device, dist, d, m)
                    if r is None:
                        parts.append("")
                    elif m == methods[0]:
                        parts.append(f"{r.median_ms:.3g}" + harness.mark(r.noisy))
                    else:
                        parts.append(f"{r.median_ms:.3g} ({times(r.topk_over_method)} "
                                     f"[{times(r.topk_over_method_lo)}-{times(r.topk_over_method_hi)}])"
                                     + harness.mark(r.noisy))
                r = _cell(rows, device, dist, d, methods[0])
                noise = "unmeasured" if r.other_cores_max is None else (
                    f"{r.other_cores_max:.2f}" + (f" ({r.repeated_rounds} repeated)" if r.repeated_rounds else "")
                    + harness.mark(r.noisy))
                out.append(f"| {d:,} | {r.reps} x {r.inner} | " + " | ".join(parts) + f" | {noise} |")
    approx = [m for m in methods if m not in ("topk", "randomk")]
    out += ["\nAchieved density / target: mean [min-max] over the timed calls", "",
            "| device | u | d | " + " | ".join(approx) + " |", "|---" * (len(approx) + 3) + "|"]
    for device, dist, d in dict.fromkeys((r.device, r.dist, r.d) for r in rows):
        parts = []
        for m in approx:
            r = _cell(rows, device, dist, d, m)
            t = r.density_target
            parts.append(f"{r.density_mean / t:.3f} [{r.density_min / t:.2f}-{r.density_max / t:.2f}]")
        out.append(f"| {device} | {dist} | {d:,} | " + " | ".join(parts) + " |")
    return "\n".join(out)


def write_json(rows: list[Row], path: Path, command: str) -> None:
    """The rows (and what produced them) as JSON: bench/summary.py reads it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"command": command, "torch": torch.__version__,
                                "rows": [asdict(r) for r in rows]}, indent=2) + "\n")


def rows_from_json(path: Path) -> list[Row]:
    return [Row(**r) for r in json.loads(path.read_text())["rows"]]


# --- command line (shared with paper_figs/fig_selection.py) ----------------------------------------
def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The flags of both command lines."""
    ap.add_argument("--sizes", type=float, nargs="+", default=None,
                    help=f"vector sizes d (default {' '.join(f'{x:g}' for x in DEFAULT_SIZES)})")
    ap.add_argument("--density", type=float, default=0.001, help="target density k / d")
    ap.add_argument("--reps", type=int, default=None,
                    help="interleaved rounds per (device, u, d) (default: 15 / 9 / 7 by d; --quick 3)")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(), help="intra-op threads")
    ap.add_argument("--devices", nargs="+", default=None, help="default: cpu, and cuda when available")
    ap.add_argument("--dists", nargs="+", default=list(DISTRIBUTIONS), help=f"of {', '.join(DISTRIBUTIONS)}")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), help=f"of {', '.join(METHODS)} (topk first)")
    ap.add_argument("--quick", action="store_true",
                    help=f"d = {', '.join(f'{x:g}' for x in QUICK_SIZES)}, {QUICK_ROUNDS} rounds, 1 retry")
    harness.add_noise_arguments(ap)
    ap.add_argument("--results-dir", type=Path, default=RESULTS,
                    help="where selection.json goes (default bench/results)")


def check_arguments(args: argparse.Namespace) -> str | None:
    """Normalise args in place (sizes -> int, devices default); the first problem as one line, or None."""
    if args.sizes is None:
        args.sizes = list(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    if any(s != int(s) or s < 1 for s in args.sizes):
        return f"--sizes {' '.join(f'{s:g}' for s in args.sizes)}: sizes must be integers >= 1"
    args.sizes = [int(s) for s in args.sizes]
    if not 0.0 < args.density <= 1.0:
        return f"--density {args.density}: must be in (0, 1]"
    if args.reps is not None and args.reps < 1:
        return f"--reps {args.reps}: must be >= 1"
    if args.quick and args.reps is None:
        args.reps = QUICK_ROUNDS
    if (problem := harness.noise_problem(args)) is not None:
        return problem
    if args.threads < 1:
        return f"--threads {args.threads}: must be >= 1"
    if args.devices is None:
        args.devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for dev in args.devices:
        if not (dev == "cpu" or dev.startswith("cuda")):
            return f"--devices {dev}: must be cpu, cuda or cuda:N"
        if dev.startswith("cuda") and not torch.cuda.is_available():
            return f"--devices {dev}: CUDA is not available on this machine"
    if bad := [x for x in args.dists if x not in DISTRIBUTIONS]:
        return f"--dists {' '.join(bad)}: must be among {', '.join(DISTRIBUTIONS)}"
    if bad := [m for m in args.methods if m not in METHODS]:
        return f"--methods {' '.join(bad)}: must be among {', '.join(METHODS)}"
    if args.methods[0] != "topk":
        return "--methods: the first method must be topk (the reference of the ratios)"
    return None


def parse(prog: str, description: str, argv: list[str] | None,
          extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """Parse and check the shared flags (plus `extra`'s); a bad flag exits 2 with one line on stderr."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    add_arguments(ap)
    if extra is not None:
        extra(ap)
    args = ap.parse_args(argv)
    if (problem := check_arguments(args)) is not None:
        print(f"{prog}: error: {problem}", file=sys.stderr)
        raise SystemExit(2)
    torch.set_num_threads(args.threads)
    return args


def run(args: argparse.Namespace, command: str) -> list[Row]:
    """Measure as the parsed flags say, print the tables, write <results-dir>/selection.json."""
    noise = harness.noise_from_args(args, quick=args.quick)
    rows = measure(args.sizes, args.density, args.devices, args.dists, args.methods, args.reps, noise=noise)
    print(markdown_tables(rows))
    print(harness.describe_method(noise.threshold, noise.retries))
    write_json(rows, args.results_dir / "selection.json", command)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse("bench/selection.py", __doc__.splitlines()[0], argv)
    run(args, " ".join(["bench/selection.py", *(sys.argv[1:] if argv is None else argv)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
