"""Every key a run writes to metrics.jsonl, summary.json and wandb: one name, one quantity, one unit.

`METRICS` is the registry; docs/metrics.md is generated from it (`python -m ssgd.utils.metric_names
docs/metrics.md`; without a path it prints the page) and a test fails when the page is stale or when a
short real run writes a key that is not here.

Two clocks, never mixed: `time/*` and `throughput/here` are seconds measured on this host (the "here"
clock); `target/*` and `throughput/target` are modelled (alpha-beta, or SimGrid) on the target cluster,
from the target's compute profile and network only (`ssgd.perf.target`), so they do not move with this
host's load. Configured and achieved values carry different names (`density/configured`,
`density/scheduled`, `density/achieved`).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

KINDS = MappingProxyType({
    "step": "a per-step value; each metrics.jsonl training record holds its mean over the steps since the "
            "previous record",
    "step+run": "a per-step value; metrics.jsonl training records hold its mean over the steps since the previous "
                "record, summary.json its mean over every step of the run",
    "window": "computed over a window: in a metrics.jsonl record over the steps since the previous record, in "
              "summary.json over the run (all ranks' samples of one step / the window's mean step time)",
    "record": "metrics.jsonl only: the value when the record was written",
    "eval": "an evaluation: in metrics.jsonl evaluation records, and the last one in summary.json",
    "run": "summary.json only: one value for the run",
})
CLOCKS = MappingProxyType({"here": "measured on this host", "target": "modelled on the target cluster",
                           "-": "not a time"})


@dataclass(frozen=True)
class Metric:
    """One key: its unit, what it means, its kind (`KINDS`) and its clock (`CLOCKS`)."""

    unit: str
    meaning: str
    kind: str
    clock: str = "-"

    def __post_init__(self) -> None:
        if self.kind not in KINDS or self.clock not in CLOCKS:
            raise ValueError(f"metric kind={self.kind!r} clock={self.clock!r}: allowed {list(KINDS)} / {list(CLOCKS)}")


def _here(meaning: str) -> Metric:
    return Metric("s", meaning, "step+run", "here")


def _target(meaning: str) -> Metric:
    return Metric("s", meaning, "step+run", "target")


METRICS: MappingProxyType[str, Metric] = MappingProxyType({
    # -- metrics.jsonl bookkeeping
    "step": Metric("steps", "steps done when the record was written", "record"),
    "epoch": Metric("epochs", "epochs done when the record was written (fractional inside an epoch)", "record"),
    "lr": Metric("1", "learning rate of the step (after the schedule)", "step"),
    "residual/norm": Metric("1", "L2 norm of the first local rank's residual (error-feedback memory) at the record",
                            "record"),
    "train/loss": Metric("nats", "training loss (cross-entropy, natural log) of the step, mean over the P ranks' "
                          "micro-batches", "step"),
    "train/acc": Metric("fraction", "training accuracy of the step over all P ranks' samples (fraction)", "step"),
    # -- evaluation
    "val/loss": Metric("nats", "validation loss (cross-entropy, natural log) of rank 0's replica", "eval"),
    "val/acc": Metric("fraction", "validation accuracy of rank 0's replica (fraction)", "eval"),
    "val/ppl": Metric("1", "validation perplexity exp(val/loss) (token datasets only)", "eval"),
    # -- density: configured, scheduled, achieved
    "density/configured": Metric("fraction", "compressor.density as configured (k/d after any warm-up)", "run"),
    "density/scheduled": Metric("fraction", "density the scheme asked for at the step: the warm-up schedule's value in "
                                "warm-up epochs, else compressor.density", "step+run"),
    "density/achieved": Metric("fraction", "entries the P ranks sent / (P d) at the step", "step+run"),
    # -- bytes and messages
    "comm/bytes_sent": Metric("B", "bytes the busiest rank sent in the step's collective", "step+run"),
    "comm/bytes_all_ranks": Metric("B", "bytes all P ranks sent in the step's collective (sum over ranks)",
                                   "step+run"),
    "comm/bytes_total": Metric("B", "bytes all P ranks sent over the whole run (an integer: the sum over steps of "
                               "comm/bytes_all_ranks)", "run"),
    "comm/messages": Metric("messages", "messages the busiest rank sent in the step's collective", "step+run"),
    # -- the here clock
    "time/compute_s": _here("forward + backward of one rank, mean over ranks"),
    "time/compress_s": _here("compensate + compress + residual update of one rank, mean over ranks"),
    "time/comm_s": _here("wall-clock seconds of the collective phase (all ranks)"),
    "time/comm_min_s": _here("fewest seconds a rank spent in the collective (waits included)"),
    "time/comm_max_s": _here("most seconds a rank spent in the collective (waits included)"),
    "time/staging_s": _here("device <-> host copies of the MPI executor, the slowest rank's"),
    "time/update_s": _here("decode into .grad, residual settle and the optimizer step"),
    "time/step_s": _here("the whole step: compute phase + collective + update"),
    "throughput/here": Metric("samples/s", "samples per second of this host's steps", "window", "here"),
    # -- the target clock
    "target/comm_s": _target("the step's collective on the target network, alpha-beta closed form for the "
                             "step's counts"),
    "target/comm_sim_s": _target("the step's collective simulated on SimGrid, the slowest rank's seconds "
                                 "(cluster.network.engine=simgrid only)"),
    "target/compute_s": _target("io + h2d + forward + backward of one target worker, from its compute profile "
                                "at the run's batch (absent without a profile)"),
    "target/compress_s": _target("one selection of the compressor's cost kind on the target, from the profile "
                                 "(absent without a profile)"),
    "target/update_s": _target("the optimizer step on the target, from the profile (absent without a profile)"),
    "target/iter_s": _target("one step on the target: target compute + compress + communication (SimGrid's when "
                             "simulated, else alpha-beta) + update (absent without a profile)"),
    "throughput/target": Metric("samples/s", "samples per second of the target's steps (absent without a "
                                "profile)", "window", "target"),
    "target/profile": Metric("name", "the compute profile the target clock uses: cluster.compute_profile's, else "
                             "the shipped one of the model's d (absent: none describes the model)", "run", "target"),
    "target/profile_file": Metric("path", "the file cluster.compute_profile names, absolute (absent: a shipped "
                                  "profile or none)", "run", "target"),
    "target/profile_sha256": Metric("hex", "SHA-256 of that file's bytes: the same bytes and config give the same "
                                    "target/* to the digit (absent with the file)", "run", "target"),
    # -- run labels and sizes
    "compressor": Metric("name", "compressor.name", "run"),
    "cluster": Metric("name", "cluster.name: the target cluster", "run"),
    "model": Metric("name", "the model's _target_", "run"),
    "dataset": Metric("name", "the dataset's name", "run"),
    "backend": Metric("name", "backend: thread, mpi or torch", "run"),
    "seed": Metric("1", "seed", "run"),
    "steps": Metric("steps", "steps trained", "run"),
    "epochs": Metric("epochs", "whole epochs trained", "run"),
    "wall_s": Metric("s", "wall-clock seconds of the training loop here", "run", "here"),
    "world_size": Metric("ranks", "P, the number of workers", "run"),
    "batch_size_per_worker": Metric("samples", "samples per worker per step", "run"),
    "params": Metric("1", "d, the model's trainable parameters", "run"),
    "diverged_at_step": Metric("steps", "step whose training loss or weights were not finite (absent: none)", "run"),
})

# Keys of earlier versions -> what replaced them; an old run folder is read with one line saying so
# (`ssgd.utils.result_files.older_version`). The old modelled times used this host's measured compute.
RENAMED = MappingProxyType({
    "time/iter_model_s": "target/iter_s (now from the target's compute profile, not this host's)",
    "throughput_model": "throughput/target", "throughput/model": "throughput/target",
    "throughput_measured": "throughput/here", "throughput/measured": "throughput/here",
    "time/comm_model_s": "target/comm_s", "time/comm_sim_s": "target/comm_sim_s",
    "density/target": "density/scheduled (per step) and density/configured (the run's setting)",
    "comm/bytes_sent_total": "comm/bytes_all_ranks (per step) and comm/bytes_total (the run's integer total)",
})
WANDB_PREFIX = "final/"


def unknown(keys: object) -> list[str]:
    """The keys among `keys` that the registry does not hold (a wandb `final/` prefix is dropped first)."""
    return sorted(k for k in keys if str(k).removeprefix(WANDB_PREFIX) not in METRICS)


def markdown() -> str:
    """docs/metrics.md: the clocks, the kinds, one table row per key, the renamed keys."""
    out = ["# Metrics: every key a run writes", "",
           "Generated from `src/ssgd/utils/metric_names.py` by `python -m ssgd.utils.metric_names docs/metrics.md`;",
           "do not edit by hand (`tests/unit/test_metric_names.py` fails when this page is stale).", "",
           "A run writes `metrics.jsonl` (training and evaluation records), `summary.json` (once, at the end) and",
           "logs both to wandb: the records as they are, the summary at the end, where the keys that wandb",
           f"summarizes itself (best `val/*`, last `throughput/*`) are written as `{WANDB_PREFIX}<key>`.", "",
           "## Two clocks", ""]
    out += [f"- **{c}**: {text}" for c, text in CLOCKS.items() if c != "-"]
    out += ["", "`time/*`, `throughput/here` and `wall_s` are measured here and move with this host's load. "
            "`target/*` and `throughput/target` come from the target's compute profile and the network model "
            "only, so the same config gives the same target time under any load. The profile is the file "
            "`cluster.compute_profile` names (one `make profile` measured on the target's hardware: "
            "[scaling-model.md](scaling-model.md#a-target-time-for-your-model)), else the shipped one of the "
            "gTop-k paper's GPU whose model has the run's parameter count (`src/ssgd/perf/profiles`). Every "
            "cluster's workers are taken to be that device (`cluster=local` too); the selection time is the "
            "profile's for the compressor's selection cost kind; with `cluster.network.engine=simgrid` the "
            "communication is SimGrid's network time alone. A model no profile describes has no target compute: "
            "`target/iter_s` is absent and the run ends with one line saying so; this host's compute is never "
            "borrowed.", "",
            "## Kinds", ""]
    out += [f"- **{k}**: {text}" for k, text in KINDS.items()]
    out += ["", "## Keys", "", "| key | unit | kind | clock | meaning |", "|---|---|---|---|---|"]
    out += [f"| `{k}` | {m.unit} | {m.kind} | {m.clock} | {m.meaning} |" for k, m in METRICS.items()]
    out += ["", "## Renamed keys", "", "Run folders of earlier versions hold these; `python -m ssgd.report` reads",
            "them and says in one line that they are from an older version.", "", "| old | now |", "|---|---|"]
    out += [f"| `{old}` | {new} |" for old, new in RENAMED.items()]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """`python -m ssgd.utils.metric_names [PATH]`: write the page to PATH, or print it."""
    args = sys.argv[1:] if argv is None else argv
    if args:
        Path(args[0]).write_text(markdown())
    else:
        sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
