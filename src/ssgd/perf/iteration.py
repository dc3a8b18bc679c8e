"""Iteration-time model of one S-SGD step and the scaling efficiency it implies.

One step on P workers, decomposed as in Shi, Wang, Chu, "Performance Modeling and Evaluation of
Distributed Deep Learning Frameworks on GPUs", DataCom 2018 (arXiv:1711.05979):

    t_iter = t_io + t_h2d + t_f + [t_b (+) t_comm] + t_compress + t_update

A scheme is what `SchemeCost` holds, handed in by the caller (this package never names compressors):

  * its collective: any object with ``model_seconds(net, P, d, counts)`` (`CollectiveCost`; every
    `ssgd.comm` collective is one), so the modelled communication is exactly the one the trainer
    logs for that collective;
  * its selection cost kind (`SELECTION_COSTS`; a compressor class declares it as
    ``selection_cost``): "none" costs nothing, "exact_topk" the profile's select_s, "linear" its
    threshold_select_s;
  * how many (index, value) entries each rank sends (`SchemeCost.count`; None: all d, a dense payload);
  * whether the collective runs layer-wise, overlapped with backward (`layerwise_overlap`).

Without overlap, the trainer's step (`ssgd.loop.trainer`: the gradient is flattened after the backward
pass, selected model-wide, then one collective): t_b, then one call of the collective over the flat
d-vector, as the authors' simulator's "SyncEASGD" (`Simulator.synceasgd` in hclhkbu/gtopkssgd
scripts/icdcs2019/communication.py). With ``layerwise_overlap`` (dense payloads only): one call per
layer of its n_l gradients, overlapped with backward by the WFBP timeline (`ssgd.perf.wfbp`,
`Simulator.wfbp` there). The trainer does not overlap; the paper's dense baseline (Horovod) does,
with tensor fusion. The merge work inside gTopKAllReduce and the residual update are not modelled.

Scaling efficiency: eff(P) = v_P / v_1 with the batch per worker fixed (the authors'
`realdata_speedup` in the same script), where v is per-worker throughput, v_P = bs / t_iter(P) and
v_1 = bs / (t_io + t_h2d + t_f + t_b + t_update) is the plain single-worker run shared by every scheme
(the script's lists start with one P = 1 entry for all methods). Hence eff(1) = 1 for a dense scheme,
and for a sparse scheme eff(1) < 1 by exactly its selection time.

`threads_step_time` is the same step as the threads backend runs it on one machine (P workers on K
pool threads), from the same profile and cost functions; `paper_figs/validate_model.py` compares
both models with real runs.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from ssgd.perf.alphabeta import AlphaBeta
from ssgd.perf.wfbp import wfbp_seconds

PROFILE_FORMAT = 1

# selection cost kind -> the Profile field that times it (None: free). A compressor class names its
# kind in `selection_cost` (ssgd.compress.base.Compressor).
SELECTION_COSTS = MappingProxyType({"none": None, "exact_topk": "select_s", "linear": "threshold_select_s"})


class CollectiveCost(Protocol):
    """What the model needs of a collective: its alpha-beta time of one call on P ranks over a
    d-element gradient, where counts[r] is the number of entries rank r contributes."""

    def model_seconds(self, net: AlphaBeta, P: int, d: int, counts: Sequence[int]) -> float:
        ...


@dataclass(frozen=True)
class SchemeCost:
    """One S-SGD scheme as the iteration model sees it (see the module docstring).

    collective: its aggregation (`CollectiveCost`).
    selection: its selection cost kind, a key of SELECTION_COSTS.
    count: entries each rank contributes per step (k for Top-k; round(factor * k) for Gaussian-k,
           whose count is not trimmed to k); None: all d entries (a dense payload).
    layerwise_overlap: one call of the collective per layer, overlapped with backward (WFBP);
           only for a dense payload (count None).
    name: a label for tables and figures.
    """

    collective: CollectiveCost
    selection: str = "none"
    count: int | None = None
    layerwise_overlap: bool = False
    name: str = ""

    def __post_init__(self) -> None:
        if not callable(getattr(self.collective, "model_seconds", None)):
            raise ValueError(f"scheme {self.name!r}: collective {self.collective!r} has no "
                             "model_seconds(net, P, d, counts)")
        if self.selection not in SELECTION_COSTS:
            raise ValueError(f"scheme {self.name!r}: selection={self.selection!r}; allowed: "
                             f"{', '.join(SELECTION_COSTS)}")
        if self.count is not None and (isinstance(self.count, bool) or not isinstance(self.count, int)
                                       or self.count < 1):
            raise ValueError(f"scheme {self.name!r}: count={self.count!r} must be an int >= 1 or None (dense)")
        if self.layerwise_overlap and self.count is not None:
            raise ValueError(f"scheme {self.name!r}: layer-wise overlap needs a dense payload (count None), "
                             f"got count={self.count}")


@dataclass(frozen=True)
class Profile:
    """What one worker spends on one iteration of one model, in seconds.

    Per-layer lists are in backward order (first = output layer) and have equal lengths; a "layer"
    is whatever the profile's author grouped (here: a weighted layer with its normalisation
    parameters). params[l] is layer l's parameter count, so d = sum(params).

    batch_size: samples per worker per step (weak scaling, as the gTop-k paper's scaling runs).
    io_s, h2d_s, update_s: data loading, host-to-device copy and the optimizer step.
    select_s: exact top-k of the flat d-vector at the profile's d (selection cost "exact_topk").
    threshold_select_s: an O(d) selection (Gaussian-k threshold, Random-k draw; "linear").
    derivation: free text saying where every number comes from.
    """

    name: str
    batch_size: int
    layers: tuple[str, ...]
    params: tuple[int, ...]
    forward_s: tuple[float, ...]
    backward_s: tuple[float, ...]
    io_s: float = 0.0
    h2d_s: float = 0.0
    update_s: float = 0.0
    select_s: float = 0.0
    threshold_select_s: float = 0.0
    derivation: str = ""

    def __post_init__(self) -> None:
        for key in ("layers", "params", "forward_s", "backward_s"):
            if not isinstance(getattr(self, key), (list, tuple)):
                raise ValueError(f"profile {self.name!r}: {key} must be a list, got {getattr(self, key)!r}")
            object.__setattr__(self, key, tuple(getattr(self, key)))
        n = len(self.layers)
        if n == 0:
            raise ValueError(f"profile {self.name!r}: needs at least one layer")
        for key in ("params", "forward_s", "backward_s"):
            if len(getattr(self, key)) != n:
                raise ValueError(f"profile {self.name!r}: {key} has {len(getattr(self, key))} entries, "
                                 f"layers has {n}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"profile {self.name!r}: batch_size={self.batch_size!r} must be an int >= 1")
        if any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in self.params):
            raise ValueError(f"profile {self.name!r}: params must be ints >= 0")
        scalars = [self.io_s, self.h2d_s, self.update_s, self.select_s, self.threshold_select_s]
        if not all(isinstance(x, (int, float)) and x >= 0 and math.isfinite(x)
                   for x in (*self.forward_s, *self.backward_s, *scalars)):
            raise ValueError(f"profile {self.name!r}: all times must be finite numbers >= 0 (seconds)")

    @property
    def d(self) -> int:
        """Number of model parameters."""
        return sum(self.params)

    @property
    def t_f(self) -> float:
        return sum(self.forward_s)

    @property
    def t_b(self) -> float:
        return sum(self.backward_s)

    def selection_seconds(self, kind: str) -> float:
        """Seconds of one selection of cost kind `kind` (a key of SELECTION_COSTS) on the flat d-vector."""
        if kind not in SELECTION_COSTS:
            raise ValueError(f"selection cost {kind!r}: allowed: {', '.join(SELECTION_COSTS)}")
        field = SELECTION_COSTS[kind]
        return 0.0 if field is None else getattr(self, field)

    def single_worker_seconds(self) -> float:
        """Plain SGD on one worker: t_io + t_h2d + t_f + t_b + t_update (no selection, no collective)."""
        return self.io_s + self.h2d_s + self.t_f + self.t_b + self.update_s

    # -- JSON ------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        out = {"format": PROFILE_FORMAT}
        out.update({k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()})
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Profile:
        """The profile of a `to_dict` mapping; ValueError (one line) on anything else."""
        known = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.default is MISSING}
        if not isinstance(data, dict):
            raise ValueError(f"profile: expected a JSON object with keys {sorted(required)}, "
                             f"got {type(data).__name__}")
        data = dict(data)
        version = data.pop("format", PROFILE_FORMAT)
        if version != PROFILE_FORMAT:
            raise ValueError(f"profile format {version!r}: this code reads format {PROFILE_FORMAT}")
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"profile: unknown keys {unknown}; allowed: {sorted(known)}")
        missing = sorted(required - set(data))
        if missing:
            raise ValueError(f"profile: missing keys {missing}")
        try:
            return cls(**data)
        except TypeError as err:                  # e.g. a number where a list belongs
            raise ValueError(f"profile {data.get('name')!r}: {err}") from err

    def to_json(self) -> str:
        """The profile as JSON (2-space indent, trailing newline): what `save` writes and `load` reads."""
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def save(self, path: str | Path) -> None:
        """Write `to_json` to `path` (the lab's tools write it atomically instead: ssgd.utils.atomic)."""
        Path(path).write_text(self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        """Read a `save`d profile; OSError if the file cannot be read, ValueError if it is not a profile."""
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"not JSON ({err})") from err
        return cls.from_dict(data)


def rescale_batch(profile: Profile, batch_size: int) -> Profile:
    """The same model at another batch size per worker, assuming t_io, t_h2d, t_f and t_b scale
    linearly with the batch (a first-order assumption; GPUs are usually more efficient at larger
    batches) while t_update and the selection times depend on d only."""
    s = batch_size / profile.batch_size
    return replace(profile, batch_size=batch_size, io_s=profile.io_s * s, h2d_s=profile.h2d_s * s,
                   forward_s=tuple(x * s for x in profile.forward_s),
                   backward_s=tuple(x * s for x in profile.backward_s))


@dataclass(frozen=True)
class IterationTime:
    """One modelled step, split into the parts of the perf-model paper's decomposition (seconds).

    comm_s is the communication NOT hidden behind backward (all of it unless the scheme overlaps
    layer-wise), so the parts add up to the iteration time.
    """

    io_s: float
    h2d_s: float
    forward_s: float
    backward_s: float
    compress_s: float
    comm_s: float
    update_s: float

    @property
    def compute_s(self) -> float:
        """Everything but compression and exposed communication ("Computation" of the gTop-k
        paper's time breakdown, `plot_breakdown` in hclhkbu/gtopkssgd scripts/icdcs2019/communication.py)."""
        return self.io_s + self.h2d_s + self.forward_s + self.backward_s + self.update_s

    @property
    def total_s(self) -> float:
        return self.compute_s + self.compress_s + self.comm_s


def _check_P(P: int) -> None:
    if isinstance(P, bool) or not isinstance(P, int) or P < 1:
        raise ValueError(f"P={P!r}: must be an int >= 1")


def comm_seconds(scheme: SchemeCost, net: AlphaBeta, P: int, d: int) -> float:
    """Seconds of one call of the scheme's collective over the flat d-vector on P ranks, each rank
    contributing `scheme.count` entries (all d when None)."""
    _check_P(P)
    count = d if scheme.count is None else scheme.count
    return scheme.collective.model_seconds(net, P, d, [count] * P)


def iteration_time(profile: Profile, scheme: SchemeCost, net: AlphaBeta, P: int) -> IterationTime:
    """Modelled step of `scheme` on P workers (see the module docstring)."""
    _check_P(P)
    t_b = profile.t_b
    if scheme.layerwise_overlap:
        per_layer = [scheme.collective.model_seconds(net, P, n, [n] * P) for n in profile.params]
        exposed = wfbp_seconds(profile.backward_s, per_layer) - t_b
    else:
        exposed = comm_seconds(scheme, net, P, profile.d)
    return IterationTime(io_s=profile.io_s, h2d_s=profile.h2d_s, forward_s=profile.t_f, backward_s=t_b,
                         compress_s=profile.selection_seconds(scheme.selection), comm_s=max(exposed, 0.0),
                         update_s=profile.update_s)


def iteration_seconds(profile: Profile, scheme: SchemeCost, net: AlphaBeta, P: int) -> float:
    """t_iter of `iteration_time`."""
    return iteration_time(profile, scheme, net, P).total_s


def throughput(profile: Profile, scheme: SchemeCost, net: AlphaBeta, P: int) -> float:
    """Per-worker samples per second, bs / t_iter."""
    return profile.batch_size / iteration_seconds(profile, scheme, net, P)


def scaling_efficiency(profile: Profile, scheme: SchemeCost, net: AlphaBeta, P: int) -> float:
    """eff(P) = v_P / v_1 = t_single / t_iter(P), v_1 the plain single-worker run (module docstring)."""
    return profile.single_worker_seconds() / iteration_seconds(profile, scheme, net, P)


def threads_step_time(profile: Profile, scheme: SchemeCost, P: int, K: int, net: AlphaBeta) -> IterationTime:
    """Modelled step of the trainer under ``backend=thread`` on ONE machine (`ssgd.worlds.base.ThreadWorld`).

    There the P virtual workers do not each own a machine, so the step is not `iteration_time`'s.
    Its three phases:

      * compute phase: the workers run on K' = min(K, P) pool threads, each thread running its
        ceil(P / K') workers one after another with one intra-op thread; a worker spends the
        profile's single-thread io + h2d + forward + backward + selection, and the phase lasts as
        long as the busiest thread: ceil(P / K') x that;
      * collective phase: the scheme's one collective over all P ranks, in the calling thread,
        costed by the same alpha-beta functions (`comm_seconds`) with `net` (on one machine, the
        `local` cluster's shared-memory constants);
      * update phase: one optimizer step on the shared parameters (the profile's update_s).

    The parts of the returned `IterationTime` are those phases' shares: forward_s, backward_s,
    io_s, h2d_s and compress_s are ceil(P / K') times the profile's; comm_s and update_s are
    `iteration_time`'s. Assumes K' idle cores, no contention for Python's global lock or memory
    bandwidth between the pool threads, no pool overhead, and (as `iteration_time`) no modelled
    cost for the residual update or the executor's per-call Python work. A layer-wise overlapped
    scheme is rejected: the trainer does not overlap.
    """
    if scheme.layerwise_overlap:
        raise ValueError(f"scheme {scheme.name!r}: the trainer does not overlap communication with backward; "
                         "use a scheme without layerwise_overlap")
    if isinstance(K, bool) or not isinstance(K, int) or K < 1:
        raise ValueError(f"K={K!r}: must be an int >= 1 (pool threads)")
    one = iteration_time(profile, scheme, net, P)
    n = math.ceil(P / min(K, P))
    return replace(one, io_s=n * one.io_s, h2d_s=n * one.h2d_s, forward_s=n * one.forward_s,
                   backward_s=n * one.backward_s, compress_s=n * one.compress_s)
