"""The lines printed at the end of a run (launcher process or MPI rank 0)."""
from __future__ import annotations

from ssgd.perf import profiles


def final_lines(summary: dict) -> str:
    """The lines printed at the end of a run: this host's measured step beside the target cluster's
    modelled one (two clocks, `ssgd.utils.metric_names`), or one line saying why the target has none."""
    on = summary["cluster"]
    keys = [("val/acc", "final val accuracy", "{:.4f}"), ("val/loss", "final val loss", "{:.4f}"),
            ("time/step_s", "measured time per step here (this machine)", "{:.4f} s"),
            ("throughput/here", "measured throughput here", "{:.1f} samples/s"),
            ("target/comm_s", f"modelled communication per iteration on {on} (alpha-beta)", "{:.6f} s"),
            ("target/comm_sim_s", f"simulated communication per iteration on {on} (SimGrid)", "{:.6f} s"),
            ("target/iter_s", f"modelled time per iteration on {on} ({profile_label(summary)})", "{:.4f} s"),
            ("throughput/target", f"modelled throughput on {on}", "{:.1f} samples/s")]
    lines = [f"{summary['compressor']} S-SGD, P={summary['world_size']}, {summary['steps']} steps, "
             f"{summary['wall_s']:.1f} s wall"]
    lines += [f"  {label}: {fmt.format(summary[key])}" for key, label, fmt in keys if key in summary]
    if "target/iter_s" not in summary:
        lines.append(f"  no modelled time per iteration on {on}: no target compute profile has this model's "
                     f"{summary.get('params')} parameters (shipped: {', '.join(profiles.names())}); only its "
                     "communication is modelled; measure one on the target's hardware with `make profile` and "
                     "pass it as cluster.compute_profile=FILE (docs/scaling-model.md)")
    if "diverged_at_step" in summary:
        lines.append(f"  DIVERGED: the training loss was not finite at step {summary['diverged_at_step']}; training "
                     "stopped there (lower optimizer.lr, add schedule.warmup_epochs or raise compressor.density)")
    return "\n".join(lines)


def profile_label(summary: dict) -> str:
    """Which compute profile the target time comes from: the shipped one's name, or the user's file."""
    name = summary.get("target/profile")
    file = summary.get("target/profile_file")
    return f"{name} profile" if file is None else f"{name} profile from cluster.compute_profile={file}"


def diverged(summary: dict) -> str | None:
    """The one line that ends a diverged run (exit status 3), or None if it did not diverge."""
    if "diverged_at_step" not in summary:
        return None
    return (f"diverged: the training loss or the weights were not finite at step {summary['diverged_at_step']} "
            "(summary.json: diverged_at_step); no checkpoint holds that state")
