"""The markdown table of the threads-backend-vs-plain-loop results (`threads_overhead.measure` rows),
shared by bench/threads_overhead.py, bench/trainer_vs_peers.py and bench/summary.py; imports neither
benchmark (no torch), so the summary and the drivers format results without loading the trainer."""
from __future__ import annotations

import harness


def threads_table(rows: list[dict]) -> list[str]:
    """Markdown rows of `threads_overhead.measure` results; every number of a noisy case carries the mark."""
    out = ["| model | scheme | P | plain loop ms/step | trainer ms/step | trainer / plain, median [min-max] "
           f"| {harness.NOISE_COLUMN} |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        noisy = r["noisy"]
        out.append(f"| {r['model']} | {r['compressor']} | {r['P']} | {harness.time_cell(r['plain_ms'] / 1e3, noisy)} "
                   f"| {harness.time_cell(r['trainer_ms'] / 1e3, noisy)} "
                   f"| {harness.ratio_cell(r['ratio_spread'], noisy, digits=2)} | {harness.noise_cell(r['series'])} |")
    return out
