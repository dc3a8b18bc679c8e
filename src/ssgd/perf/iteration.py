"""Iteration-time model of one S-SGD step and the scaling efficiency it implies.

One step on P workers (papers.md 4; the perf-model paper's decomposition, unverified as printed):

    t_iter = t_io + t_h2d + t_f + [t_b (+) t_comm] + t_compress + t_update

Schemes, as this package's trainer runs them (`ssgd.trainer`: the gradient is flattened after the
backward pass, selected model-wide, then one collective; papers.md 2.1):

  * ``dense``       : t_b, then one ring allreduce of all d gradients (`cost.dense_seconds`); no
                      overlap, which is what the trainer does ("SyncEASGD" in papers.md 4).
  * ``dense_wfbp``  : layer-wise ring allreduce (`cost.allreduce_seconds(net, P, n_l)`) overlapped
                      with backward by the WFBP timeline (`ssgd.perf.wfbp`; papers.md 4). Not run by the
                      trainer; the paper's dense baseline (Horovod) overlaps, with tensor fusion.
  * ``topk``        : exact top-k selection over the flat d-vector, then a ring allgather of k (index,
                      value) pairs per rank (`cost.sparse_allgather_seconds(net, [k] * P)`).
  * ``randomk``     : same collective; the selection is an O(d) random draw (`threshold_select_s`).
  * ``gtopk``       : top-k selection, then gTopKAllReduce (`cost.gtopk_seconds(net, P, k)`).
  * ``gaussiank``   : O(d) threshold selection (`threshold_select_s`), then a ring allgather of
                      round(factor * k) pairs per rank; factor is the achieved density / target density
                      (Gaussian-k does not trim to k; papers.md 2.4, 9.3).

k = max(int(d * density), 1) as in both released code bases (papers.md 2.5). The merge work inside
gTopKAllReduce (top-k of 2k candidates per round) and the residual update are not modelled.

Scaling efficiency (papers.md 4 and 7): eff(P) = v_P / v_1 with the batch per worker fixed, where v is
per-worker throughput, v_P = bs / t_iter(P) and v_1 = bs / (t_io + t_h2d + t_f + t_b + t_update) is the
plain single-worker run shared by every scheme (the paper's lists start with one P = 1 entry for all
methods). Hence eff(1) = 1 for dense, and for a sparse scheme eff(1) < 1 by exactly its selection time.

`threads_step_time` is the same step as the threads backend runs it on one machine (P workers on K
pool threads), from the same profile and cost functions; `paper_figs/validate_model.py` compares
both models with real runs.
"""
from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path

from ssgd.compress.sparse import k_of
from ssgd.perf import cost
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.perf.wfbp import no_overlap_seconds, wfbp_seconds

SCHEMES = ("dense", "dense_wfbp", "topk", "randomk", "gtopk", "gaussiank")
PROFILE_FORMAT = 1
DEFAULT_DENSITY = 0.001                 # rho of every gTop-k / Gaussian-k experiment (papers.md 6)


@dataclass(frozen=True)
class Profile:
    """What one worker spends on one iteration of one model, in seconds.

    Per-layer lists are in backward order (first = output layer) and have equal lengths; a "layer"
    is whatever the profile's author grouped (here: a weighted layer with its normalisation
    parameters). params[l] is layer l's parameter count, so d = sum(params).

    batch_size: samples per worker per step (weak scaling; papers.md 6.1).
    io_s, h2d_s, update_s: data loading, host-to-device copy and the optimizer step.
    select_s: exact top-k of the flat d-vector at the profile's d (Top-k and gTop-k).
    threshold_select_s: an O(d) selection (Gaussian-k threshold, Random-k draw).
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

    def save(self, path: str | Path) -> None:
        """Write the profile as JSON (2-space indent, trailing newline)."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

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
    """One modelled step, split into the parts papers.md 4 and 7 name (seconds).

    comm_s is the communication NOT hidden behind backward (all of it unless the scheme is
    dense_wfbp), so the parts add up to the iteration time.
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
        """Everything but compression and exposed communication (papers.md 7's "Computation")."""
        return self.io_s + self.h2d_s + self.forward_s + self.backward_s + self.update_s

    @property
    def total_s(self) -> float:
        return self.compute_s + self.compress_s + self.comm_s


def _check_scheme(scheme: str) -> None:
    if scheme not in SCHEMES:
        raise ValueError(f"scheme={scheme!r}: must be one of {', '.join(SCHEMES)}")


def gaussian_counts(k: int, P: int, factor: float) -> list[int]:
    """Per-rank selection counts of Gaussian-k with achieved/target density `factor` (> 0)."""
    if not factor > 0:
        raise ValueError(f"gaussian factor={factor!r}: must be > 0 (achieved density / target density)")
    return [max(1, round(factor * k))] * P


def comm_seconds(net: AlphaBeta, scheme: str, P: int, d: int, density: float = DEFAULT_DENSITY,
                 gaussian_factor: float = 1.0) -> float:
    """Seconds of the scheme's one collective over the flat d-vector, from `ssgd.perf.cost`
    (dense_wfbp: the same single allreduce; its layer-wise timeline is in `iteration_time`)."""
    _check_scheme(scheme)
    if scheme in ("dense", "dense_wfbp"):
        return cost.dense_seconds(net, P, d)
    k = k_of(d, density)
    if scheme == "gtopk":
        return cost.gtopk_seconds(net, P, k)
    counts = gaussian_counts(k, P, gaussian_factor) if scheme == "gaussiank" else [k] * P
    return cost.sparse_allgather_seconds(net, counts)


def compress_seconds(profile: Profile, scheme: str) -> float:
    """Selection time of the scheme on the profile's flat gradient (0 for dense)."""
    _check_scheme(scheme)
    if scheme in ("topk", "gtopk"):
        return profile.select_s
    if scheme in ("gaussiank", "randomk"):
        return profile.threshold_select_s
    return 0.0


def iteration_time(profile: Profile, scheme: str, net: AlphaBeta, P: int, density: float = DEFAULT_DENSITY,
                   gaussian_factor: float = 1.0) -> IterationTime:
    """Modelled step of `scheme` on P workers (see the module docstring for each scheme)."""
    _check_scheme(scheme)
    if isinstance(P, bool) or not isinstance(P, int) or P < 1:
        raise ValueError(f"P={P!r}: must be an int >= 1")
    if not 0 < density <= 1:
        raise ValueError(f"density={density!r}: must be in (0, 1]")
    t_b = profile.t_b
    if scheme == "dense_wfbp":
        per_layer = [cost.allreduce_seconds(net, P, n) for n in profile.params]
        exposed = wfbp_seconds(profile.backward_s, per_layer) - t_b
    elif scheme == "dense":
        exposed = no_overlap_seconds(profile.backward_s, profile.params,
                                     lambda n: cost.allreduce_seconds(net, P, n)) - t_b
    else:
        exposed = comm_seconds(net, scheme, P, profile.d, density, gaussian_factor)
    return IterationTime(io_s=profile.io_s, h2d_s=profile.h2d_s, forward_s=profile.t_f, backward_s=t_b,
                         compress_s=compress_seconds(profile, scheme), comm_s=max(exposed, 0.0),
                         update_s=profile.update_s)


def iteration_seconds(profile: Profile, scheme: str, net: AlphaBeta, P: int, density: float = DEFAULT_DENSITY,
                      gaussian_factor: float = 1.0) -> float:
    """t_iter of `iteration_time`."""
    return iteration_time(profile, scheme, net, P, density, gaussian_factor).total_s


def throughput(profile: Profile, scheme: str, net: AlphaBeta, P: int, density: float = DEFAULT_DENSITY,
               gaussian_factor: float = 1.0) -> float:
    """Per-worker samples per second, bs / t_iter (papers.md 7's lists are per-worker)."""
    return profile.batch_size / iteration_seconds(profile, scheme, net, P, density, gaussian_factor)


def scaling_efficiency(profile: Profile, scheme: str, net: AlphaBeta, P: int, density: float = DEFAULT_DENSITY,
                       gaussian_factor: float = 1.0) -> float:
    """eff(P) = v_P / v_1 = t_single / t_iter(P), v_1 the plain single-worker run (papers.md 4, 7)."""
    return profile.single_worker_seconds() / iteration_seconds(profile, scheme, net, P, density, gaussian_factor)


def threads_step_time(profile: Profile, scheme: str, P: int, K: int, net: AlphaBeta,
                      density: float = DEFAULT_DENSITY, gaussian_factor: float = 1.0) -> IterationTime:
    """Modelled step of the trainer under ``backend=thread`` on ONE machine (`ssgd.world.ThreadWorld`).

    There the P virtual workers do not each own a machine, so the step is not `iteration_time`'s.
    Its three phases (README "How P workers run on one machine"; shared/reference/threads.md):

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
    cost for the residual update or the executor's per-call Python work. ``dense_wfbp`` is
    rejected: the trainer does not overlap.
    """
    if scheme == "dense_wfbp":
        raise ValueError("scheme='dense_wfbp': the trainer does not overlap communication with backward; "
                         "use 'dense'")
    if isinstance(K, bool) or not isinstance(K, int) or K < 1:
        raise ValueError(f"K={K!r}: must be an int >= 1 (pool threads)")
    one = iteration_time(profile, scheme, net, P, density, gaussian_factor)
    n = math.ceil(P / min(K, P))
    return replace(one, io_s=n * one.io_s, h2d_s=n * one.h2d_s, forward_s=n * one.forward_s,
                   backward_s=n * one.backward_s, compress_s=n * one.compress_s)
