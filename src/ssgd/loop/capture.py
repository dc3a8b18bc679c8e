"""Capture of the compensated gradient u = g + e during training.

For the analysis figures of Shi, Chu, Cheung, See, "Understanding Top-k Sparsification in
Distributed Deep Learning" (arXiv:1911.08772: gradient histograms and the Top-k bound comparison)
and Shi et al., "A Convergence Analysis of Distributed SGD with Communication-Efficient Gradient
Sparsification" (IJCAI 2019: the delta ratio). The released GaussianK-SGD code saves rank 0's
flat u every iteration (hclhkbu/GaussianK-SGD, `LOGGING_GRADIENTS`).

Off by default. With `capture.stats=true`, every `capture.every` steps rank 0 appends one JSON line
to `<run>/capture/stats.jsonl` computed on ITS u (before the residual is updated):

  u/norm2                     ||u||^2
  err/active, err/active_sent ||u - C(u)||^2 for the scheme's local payload C(u), and for the part of
                              it that counted as sent after the collective (gTop-k keeps the rest)
  err/topk, err/randk         ||u - TopK(u)||^2 and ||u - RandK(u)||^2 at k = max(int(d * density), 1)
  ratio/<same>                each error divided by ||u||^2 (Top-k paper's bound comparison)
  bound/linear, bound/square  1 - k/d and (1 - k/d)^2 (the Random-k expectation, and the Top-k
                              paper's tighter bound for bell-shaped u)
  u/mean, u/std, u/kurtosis   signed moments (population std; kurtosis E[(u-mu)^4]/std^4, normal = 3)
  density/achieved            entries of rank 0's payload (`Payload.count`) / d
and, with `capture.delta=true`, the IJCAI ratio's parts on x = mean over ranks of u_r (one extra
dense allreduce per captured step, on every rank): ijcai/err_scheme = ||x - A||^2 where A is the
scheme's aggregated gradient, ijcai/err_randk = ||x - RandK(x)||^2, ijcai/x_norm2.

At the steps in `capture.u_steps`, rank 0 also saves `<run>/capture/u_step<N>.pt`: a dict with
u (float32 [d], CPU), `selected` (`Payload.indices()` of its payload; None for dense), `sent` (those
that counted as sent), step, epoch, density, k and the scheme name. Capture never changes training: it
reads u, and draws its Random-k indices from its own generator.

Both files go through ssgd.utils.atomic: a stats record is one whole write, cut back when the disk cannot take
it, and a `u_step<N>.pt` is written to a temporary file and renamed; on a full disk either is the one line
(`DiskFull`, exit status 2) naming the file, the bytes needed and free, with what was written before intact.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from ssgd.comm.base import Reduced
from ssgd.comm.collectives.dense import DenseAllreduce
from ssgd.compress.randomk import sample_distinct
from ssgd.compress.sparse import k_of
from ssgd.config import CaptureConfig
from ssgd.loop.checkpoint import tensor_bytes
from ssgd.payload import Dense, Payload
from ssgd.utils.atomic import append_whole, open_appending, replacing
from ssgd.utils.seeding import rank_generator
from ssgd.worlds.base import World


def sq_norm(x: Tensor) -> float:
    """||x||^2 accumulated in float64."""
    return float(torch.dot(x.double(), x.double())) if x.numel() else 0.0


def residual_norm2(u: Tensor, kept: Tensor) -> float:
    """||u - kept||^2 in float64, for dense u and kept of one length (kept's values need not be u's)."""
    return sq_norm(u.double() - kept.double())


def topk_error(u: Tensor, k: int) -> float:
    """||u - TopK(u)||^2 = ||u||^2 minus the k largest squares (float64: the difference loses at most
    1e-16 of ||u||^2)."""
    if k >= u.numel():
        return 0.0
    return max(sq_norm(u) - sq_norm(torch.topk(u.abs(), k, sorted=False).values), 0.0)


def randk_error(u: Tensor, k: int, generator: torch.Generator) -> float:
    """||u - RandK(u)||^2 for k distinct uniform coordinates (no rescaling; its expectation is
    (1 - k/d) ||u||^2)."""
    keep = torch.ones(u.numel(), dtype=torch.bool, device=u.device)
    keep[sample_distinct(u.numel(), k, generator).to(u.device)] = False
    return sq_norm(u[keep])


def moments(u: Tensor) -> dict[str, float]:
    """Mean, population std and kurtosis E[(u - mean)^4] / std^4 (3 for a normal sample)."""
    x = u.double()
    mean = x.mean()
    c = x - mean
    var = float((c * c).mean())
    kurt = float((c * c).square().mean()) / var ** 2 if var > 0 else float("nan")
    return {"u/mean": float(mean), "u/std": var ** 0.5, "u/kurtosis": kurt}


def u_statistics(u: Tensor, payload: Payload, sent: Payload, density: float,
                 generator: torch.Generator) -> dict[str, float]:
    """The per-step scalars of one rank's u (see the module docstring); u is not modified."""
    d = u.numel()
    k = k_of(d, density)
    norm2 = sq_norm(u)
    errors = {"err/active": residual_norm2(u, payload.to_dense()),
              "err/active_sent": residual_norm2(u, sent.to_dense()),
              "err/topk": topk_error(u, k), "err/randk": randk_error(u, k, generator)}
    return {"k": k, "d": d, "u/norm2": norm2, **errors,
            **{"ratio/" + key[4:]: (v / norm2 if norm2 > 0 else float("nan")) for key, v in errors.items()},
            "bound/linear": 1 - k / d, "bound/square": (1 - k / d) ** 2,
            **moments(u), "density/scheduled": density, "density/achieved": payload.count / d}


def ijcai_parts(x: Tensor, aggregated: Tensor, density: float, generator: torch.Generator) -> dict[str, float]:
    """Parts of the IJCAI 2019 delta ratio for one step, ||x - A||^2 against ||x - RandK(x)||^2, where
    x = mean of the ranks' u and A the scheme's aggregated gradient."""
    return {"ijcai/x_norm2": sq_norm(x), "ijcai/err_scheme": residual_norm2(x, aggregated),
            "ijcai/err_randk": randk_error(x, k_of(x.numel(), density), generator)}


def _cpu(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.cpu()


class Capture:
    """Observes training steps for the analysis figures (paper_figs/fig_histograms.py, fig_bounds.py)."""

    def __init__(self, cfg: CaptureConfig, run_dir: Path, seed: int, is_root: bool, scheme: str) -> None:
        self.cfg, self.is_root, self.scheme = cfg, is_root, scheme
        self.dir = Path(run_dir) / "capture"
        self.generator = rank_generator(seed, 0, "capture")
        self.file = None
        self.records = 0
        if is_root:
            self.dir.mkdir(parents=True, exist_ok=True)
            if cfg.stats:
                self.file = open_appending(self.stats_path, "the capture's statistics")

    @property
    def stats_path(self) -> Path:
        return self.dir / "stats.jsonl"

    def wants(self, step: int) -> bool:
        """Whether `step` (1-based) is observed; the same answer on every rank."""
        return (self.cfg.stats and step % self.cfg.every == 0) or step in self.cfg.u_steps

    def observe(self, step: int, epoch: int, density: float, world: World, us: Sequence[Tensor],
                payloads: Sequence[Payload], results: Sequence[Reduced], aggregated: Tensor) -> None:
        """Call between the collective and the residual update, on every rank (the delta part is a
        collective). us/payloads/results: this process's local ranks, in rank order."""
        x = None
        if self.cfg.stats and self.cfg.delta and step % self.cfg.every == 0:
            x = world.collective(DenseAllreduce(), [Dense(u.clone()) for u in us])[0][0].average()
        if not self.is_root:
            return
        u, payload = us[0], payloads[0]
        sent = results[0].sent(payload)
        if self.file is not None and step % self.cfg.every == 0:
            record = {"step": step, "epoch": epoch, **u_statistics(u, payload, sent, density, self.generator)}
            if x is not None:
                record.update(ijcai_parts(x, aggregated, density, self.generator))
            self.append_stats(record)
        if step in self.cfg.u_steps:
            self.save_u(step, {"u": u.detach().cpu().clone(), "step": step, "epoch": epoch, "density": density,
                               "k": k_of(u.numel(), density), "scheme": self.scheme,
                               "selected": _cpu(payload.indices()), "sent": _cpu(sent.indices())})

    def append_stats(self, record: dict) -> None:
        """Append `record` to capture/stats.jsonl as one whole line, or nothing (DiskFull on a full disk)."""
        append_whole(self.file, (json.dumps(record) + "\n").encode(), self.stats_path,
                     f"the capture record of step {record['step']}", f"its {self.records} records before it are kept")
        self.records += 1

    def save_u(self, step: int, state: dict) -> Path:
        """Write `state` to capture/u_step<step>.pt atomically and space-checked (the bytes of its tensors)."""
        path = self.dir / f"u_step{step:06d}.pt"
        with replacing(path, f"the captured gradient of step {step}", tensor_bytes(state)) as tmp:
            with open(tmp, "wb") as f:             # a file object: torch then raises the OSError itself
                torch.save(state, f)
        return path

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
