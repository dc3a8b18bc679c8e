"""The metrics of one S-SGD step over all P ranks: what each rank contributes (`RankMetrics`, gathered
from every rank each step) and the step's record (`step_metrics`)."""
from __future__ import annotations

from dataclasses import dataclass

from ssgd.comm.base import Collective
from ssgd.loop.replica import LocalStats
from ssgd.loop.sync import Synced
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.perf.target import TargetCompute


@dataclass(frozen=True)
class RankMetrics:
    """What one rank contributes to a step's metrics (gathered from every rank each step)."""

    loss: float
    correct: float           # correct predictions in its micro-batch
    samples: float
    compute_s: float         # forward + backward
    compress_s: float        # compensate + compress, plus the residual update after the collective
    count: int               # entries of its payload (`Payload.count`)
    messages: int            # messages and bytes it sent in the collective
    bytes_sent: int
    staging_s: float         # device <-> host copies of the MPI executor
    comm_s: float            # its own seconds in the collective, from entering to leaving (waits included)
    sim_s: float             # its simulated seconds in the collective (the SimGrid executor; 0 elsewhere)
    stop: int                # the signal number of a stop request this rank received (0: none)


def rank_metrics(synced: Synced[LocalStats], stop: int) -> list[RankMetrics]:
    """This process's local ranks' rows of one step (`stop`: this process's stop signal, 0: none)."""
    return [RankMetrics(s.loss, s.correct, s.samples, s.compute_s, compress_s, p.count, log.stats.messages,
                        log.stats.bytes, log.staging_s, synced.comm_s, log.clock, stop)
            for s, compress_s, p, log in zip(synced.local, synced.compress_s, synced.payloads, synced.logs)]


def step_metrics(rows: list[RankMetrics], density: float, d: int, collective: Collective, net: AlphaBeta,
                 wall: tuple[float, float, float], simulated: bool = False,
                 target: TargetCompute | None = None) -> dict[str, float]:
    """Metrics of one step over all P ranks' `rows` (keys: `ssgd.utils.metric_names`); wall = (compute
    phase, collective, update) seconds measured here. Two clocks, never mixed: `time/*` are this host's
    seconds, `target/*` the target cluster's: `collective`'s alpha-beta time on the network `net` for the
    step's counts, and with `target` (the target's compute, `ssgd.perf.target`; None: no profile) the
    target's iteration. `simulated`: the collective ran on SimGrid, `target/comm_sim_s` is the slowest rank's
    simulated seconds in it and the target's iteration uses it."""
    P, counts, sent = len(rows), [m.count for m in rows], [m.bytes_sent for m in rows]
    comm_model = collective.model_seconds(net, P, d, counts)
    comm_sim = max(m.sim_s for m in rows)
    here = {
        "train/loss": sum(m.loss for m in rows) / P,
        "train/acc": sum(m.correct for m in rows) / sum(m.samples for m in rows),
        "density/scheduled": density, "density/achieved": sum(counts) / (P * d),
        "comm/bytes_sent": max(sent), "comm/bytes_all_ranks": sum(sent),
        "comm/messages": max(m.messages for m in rows),
        "time/compute_s": sum(m.compute_s for m in rows) / P, "time/compress_s": sum(m.compress_s for m in rows) / P,
        "time/comm_s": wall[1],
        "time/comm_min_s": min(m.comm_s for m in rows), "time/comm_max_s": max(m.comm_s for m in rows),
        "time/staging_s": max(m.staging_s for m in rows), "time/update_s": wall[2], "time/step_s": sum(wall),
    }
    return here | target_metrics(comm_model, comm_sim if simulated else None, target)


def target_metrics(comm_model: float, comm_sim: float | None, target: TargetCompute | None) -> dict[str, float]:
    """The `target/*` metrics of one step: the alpha-beta communication, SimGrid's when simulated (not
    None), and the target's compute and iteration when it has a profile (`target`)."""
    out = {"target/comm_s": comm_model}
    if comm_sim is not None:
        out["target/comm_sim_s"] = comm_sim
    if target is not None:
        out |= {"target/compute_s": target.compute_s, "target/compress_s": target.compress_s,
                "target/update_s": target.update_s,
                "target/iter_s": target.iteration_seconds(comm_model if comm_sim is None else comm_sim)}
    return out
