"""The target cluster's clock for the trainer: each step's modelled seconds on the target, never this host's.

A run measures its own steps on this host (`time/*` metrics) and models the same steps on the target
cluster (`target/*` metrics, `ssgd.loop.step_metrics`). The target's seconds are

    target/iter_s = target/compute_s + target/compress_s + target/comm + target/update_s

where compute (io + h2d + forward + backward), compress (one selection of the compressor's
`selection_cost` kind: `Profile.selection_seconds`) and update come from a per-layer profile of the
target's GPU (`ssgd.perf.profiles`: the gTop-k paper's P102-100), rescaled to the run's batch per worker
(`ssgd.perf.iteration.rescale_batch`), and the communication is the collective's alpha-beta time on the
target network for the step's actual counts (or SimGrid's simulated time with
cluster.network.engine=simgrid). Nothing in it is measured here, so the same config gives the same
target time under any load. As `ssgd.perf.iteration.iteration_time` without overlap (the trainer does
not overlap), the merge work inside gTopKAllReduce and the residual update are not modelled.

A shipped profile describes one model exactly: it applies to a run whose model has the same number of
trainable parameters d (resnet20 on CIFAR-10 shapes: 269,722; vgg16, alexnet, resnet50, lstm_ptb likewise;
`model=replay` with a profile). A profile the user passes (`cluster.compute_profile`, a file `make profile`
wrote on the target's hardware; `ssgd.run.target_profile` reads and checks it) takes the shipped one's
place and must describe the same d. Any other run has no target compute: its target time is absent, and
the end of the run says so (`ssgd.run.final_lines`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ssgd.perf import profiles
from ssgd.perf.iteration import Profile, rescale_batch


@dataclass(frozen=True)
class TargetCompute:
    """Seconds one target worker spends per step outside the collective (constant over a run).

    profile: the profile's name; compute_s: io + h2d + forward + backward at the run's batch;
    compress_s: one selection of the compressor's cost kind at the profile's d; update_s: the optimizer step;
    file, sha256: the file the profile was read from and its content's SHA-256 (None: a shipped profile).
    """

    profile: str
    compute_s: float
    compress_s: float
    update_s: float
    file: str | None = None
    sha256: str | None = None

    def iteration_seconds(self, comm_s: float) -> float:
        """The target's seconds of one step whose communication takes `comm_s` on the target network."""
        return self.compute_s + self.compress_s + comm_s + self.update_s


def matching_profile(d: int) -> Profile | None:
    """The shipped profile of a model with exactly d parameters, or None."""
    return next((p for p in map(profiles.load, profiles.names()) if p.d == d), None)


def target_compute(d: int, batch_size: int, selection: str, given: Profile | None = None) -> TargetCompute | None:
    """The target's per-step compute of a d-parameter model at `batch_size` samples per worker whose
    compressor has selection cost kind `selection` (`ssgd.perf.iteration.SELECTION_COSTS`), from the profile
    `given` (ValueError unless it describes d parameters) or else the shipped one of d; None when neither is."""
    if given is not None and given.d != d:
        raise ValueError(f"profile {given.name!r}: describes d = {given.d} parameters, the model has {d}")
    found = given if given is not None else matching_profile(d)
    if found is None:
        return None
    p = rescale_batch(found, batch_size)
    return TargetCompute(profile=p.name, compute_s=p.io_s + p.h2d_s + p.t_f + p.t_b,
                         compress_s=p.selection_seconds(selection), update_s=p.update_s)
