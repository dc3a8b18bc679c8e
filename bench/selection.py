"""Selection cost: exact Top-k vs Gaussian-k, Random-k and DGC sampling (Top-k paper's motivation).

For each device, distribution and size d, times `compress(u, density)` of every selector on the same
vector (all variants interleaved, one warm-up each, median and min/max over repetitions; CUDA is
synchronised around each call) and records the achieved density |I| / d of each call. This module
is the one timing implementation: `make fig-selection` (paper_figs/fig_selection.py) imports it.

    .venv/bin/python bench/selection.py                  # ~1 min on 2 cores
    .venv/bin/python bench/selection.py --threads 1 --sizes 1e6 1e7
Writes bench/results/selection.json and prints the markdown tables.

Vectors: u ~ N(0, 1), and u ~ Laplace(0, 1) (heavier tails: Gaussian-k's threshold assumes a normal
u; papers.md 2.4 reports it under-estimates k on real gradients). Selectors: papers.md 2.1, 2.4, 2.5.
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
from ssgd.compress.base import Compressor  # noqa: E402
from ssgd.compress.dgc import DGCSampling  # noqa: E402
from ssgd.compress.gaussiank import GaussianK  # noqa: E402
from ssgd.compress.randomk import RandomK  # noqa: E402
from ssgd.compress.topk import TopK  # noqa: E402

# name -> factory(seed): every selector gets a fresh, seeded generator (never the global RNG)
METHODS: dict[str, Callable[[int], Compressor]] = {
    "topk": lambda seed: TopK(),
    "gaussiank": lambda seed: GaussianK(),
    "randomk": lambda seed: RandomK(torch.Generator().manual_seed(seed)),
    "dgcsampling": lambda seed: DGCSampling(torch.Generator().manual_seed(seed)),
    "dgcsampling_scaled": lambda seed: DGCSampling(torch.Generator().manual_seed(seed), scale_k=True),
}
DISTRIBUTIONS = ("normal", "laplace")
DEFAULT_SIZES = (1e5, 1e6, 1e7, 2.5e7)


@dataclass(frozen=True)
class Row:
    """One (device, distribution, d, method) cell; times in ms, densities as |I| / d."""

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
    """Repetitions per selector: 30 up to d = 1e6 (noisier, cheap), 15 up to 1e7, then 10."""
    return 30 if d <= 1_000_000 else 15 if d <= 10_000_000 else 10


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def time_selectors(selectors: dict[str, Compressor], u: torch.Tensor, density: float,
                   reps: int) -> dict[str, tuple[list[float], list[int]]]:
    """{name: (seconds per call, entries selected per call)} over `reps` interleaved rounds, after
    one untimed warm-up call each. u is never modified (Compressor contract)."""
    device = str(u.device)
    for c in selectors.values():
        c.compress(u, density)
    out: dict[str, tuple[list[float], list[int]]] = {name: ([], []) for name in selectors}
    for _ in range(reps):
        for name, c in selectors.items():
            _sync(device)
            start = time.perf_counter()
            s = c.compress(u, density)
            _sync(device)
            out[name][0].append(time.perf_counter() - start)
            out[name][1].append(len(s))
    return out


def measure(sizes: list[int], density: float, devices: list[str], dists: list[str] | None = None,
            methods: list[str] | None = None, reps: int | None = None,
            progress: Callable[[str], None] = print) -> list[Row]:
    """Time every method in `methods` (default: all of METHODS) on every (device, dist, d); reps
    None -> default_reps(d). One progress line per (device, dist, d)."""
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
                res = time_selectors({m: METHODS[m](0) for m in methods}, u, density, n)
                del u
                for m, (secs, counts) in res.items():
                    dens = [c / d for c in counts]
                    rows.append(Row(device, threads, dist, d, m, n, 1e3 * statistics.median(secs), 1e3 * min(secs),
                                    1e3 * max(secs), density, statistics.fmean(dens), min(dens), max(dens)))
                cell = ", ".join(f"{r.method} {r.median_ms:.3g} ms" for r in rows[-len(methods):])
                progress(f"{device} {dist} d={d:,} ({n} reps, {time.perf_counter() - start:.1f} s): {cell}")
    return rows


def _cell(rows: list[Row], device: str, dist: str, d: int, method: str) -> Row | None:
    return next((r for r in rows if (r.device, r.dist, r.d, r.method) == (device, dist, d, method)), None)


def ratio(rows: list[Row], row: Row, reference: str = "topk") -> float:
    """median time of `reference` / median time of `row`, same device, distribution and d (nan if absent)."""
    ref = _cell(rows, row.device, row.dist, row.d, reference)
    return ref.median_ms / row.median_ms if ref is not None and row.median_ms > 0 else float("nan")


def times(x: float) -> str:
    """A ratio as '0.76x', '7.6x', '110x'."""
    return f"{x:.2g}x" if x < 10 else f"{x:.0f}x"


def markdown_tables(rows: list[Row]) -> str:
    """Per device and distribution: median ms of each method with Top-k / method in brackets; then the
    achieved density / target of the selectors whose count is not fixed (mean [min-max] over reps)."""
    methods = list(dict.fromkeys(r.method for r in rows))
    out = []
    for device in dict.fromkeys(r.device for r in rows):
        for dist in dict.fromkeys(r.dist for r in rows if r.device == device):
            cells = [r for r in rows if r.device == device and r.dist == dist]
            out += [f"\nSelection time, {device} ({cells[0].threads} threads), u ~ {dist}, density "
                    f"{cells[0].density_target}: median ms (Top-k / method)", "",
                    "| d | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
            for d in dict.fromkeys(r.d for r in cells):
                parts = []
                for m in methods:
                    r = _cell(rows, device, dist, d, m)
                    parts.append("" if r is None else f"{r.median_ms:.3g}" if m == "topk"
                                 else f"{r.median_ms:.3g} ({times(ratio(rows, r))})")
                out.append(f"| {d:,} | " + " | ".join(parts) + " |")
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


# --- command line (shared with paper_figs/fig_selection.py) ----------------------------------------
def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The flags of both command lines: --sizes --density --reps --threads --devices --dists --methods."""
    ap.add_argument("--sizes", type=float, nargs="+", default=list(DEFAULT_SIZES), help="vector sizes d")
    ap.add_argument("--density", type=float, default=0.001, help="target density k / d")
    ap.add_argument("--reps", type=int, default=None, help="timed calls per selector (default: 30 / 15 / 10 by d)")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(), help="intra-op threads")
    ap.add_argument("--devices", nargs="+", default=None, help="default: cpu, and cuda when available")
    ap.add_argument("--dists", nargs="+", default=list(DISTRIBUTIONS), help=f"of {', '.join(DISTRIBUTIONS)}")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), help=f"of {', '.join(METHODS)} (topk first)")


def check_arguments(args: argparse.Namespace) -> str | None:
    """Normalise args in place (sizes -> int, devices default); the first problem as one line, or None."""
    if any(s != int(s) or s < 1 for s in args.sizes):
        return f"--sizes {' '.join(f'{s:g}' for s in args.sizes)}: sizes must be integers >= 1"
    args.sizes = [int(s) for s in args.sizes]
    if not 0.0 < args.density <= 1.0:
        return f"--density {args.density}: must be in (0, 1]"
    if args.reps is not None and args.reps < 1:
        return f"--reps {args.reps}: must be >= 1"
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


def main(argv: list[str] | None = None) -> int:
    args = parse("bench/selection.py", __doc__.splitlines()[0], argv)
    rows = measure(args.sizes, args.density, args.devices, args.dists, args.methods, args.reps)
    print(markdown_tables(rows))
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "selection.json").write_text(json.dumps({"torch": torch.__version__, "rows": [asdict(r) for r in rows]},
                                                   indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
