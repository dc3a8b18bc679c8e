"""Capture of the compensated gradient u = g + e during training (Top-k paper; papers.md 2.4, 5).

Off by default. With `capture.stats=true`, every `capture.every` steps rank 0 appends one JSON line
to `<run>/capture/stats.jsonl` computed on ITS u (before the residual is updated):

  u/norm2                     ||u||^2
  err/active, err/active_sent ||u - C(u)||^2 for the scheme's local payload C(u), and for the part of
                              it that counted as sent after the collective (gTop-k keeps the rest)
  err/topk, err/randk         ||u - TopK(u)||^2 and ||u - RandK(u)||^2 at k = max(int(d * density), 1)
  ratio/<same>                each error divided by ||u||^2 (Top-k paper's bound comparison)
  bound/linear, bound/square  1 - k/d and (1 - k/d)^2 (papers.md 5)
  u/mean, u/std, u/kurtosis   signed moments (population std; kurtosis E[(u-mu)^4]/std^4, normal = 3)
  density/achieved            entries of rank 0's payload / d
and, with `capture.delta=true`, the IJCAI ratio's parts on x = mean over ranks of u_r (one extra
dense allreduce per captured step, on every rank): ijcai/err_scheme = ||x - A||^2 where A is the
scheme's aggregated gradient, ijcai/err_randk = ||x - RandK(x)||^2, ijcai/x_norm2.

At the steps in `capture.u_steps`, rank 0 also saves `<run>/capture/u_step<N>.pt`: a dict with
u (float32 [d], CPU), `selected` (int64 indices of its payload; None for dense), `sent` (those that
counted as sent), step, epoch, density, k and the scheme name. Capture never changes training: it
reads u, and draws its Random-k indices from its own generator.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from ssgd.comm.base import Payload, Reduced, accounted
from ssgd.comm.dense import DenseAllreduce
from ssgd.compress.randomk import sample_distinct
from ssgd.compress.sparse import Sparse, k_of
from ssgd.config import CaptureConfig
from ssgd.utils.seeding import rank_generator
from ssgd.world import World


def sq_norm(x: Tensor) -> float:
    """||x||^2 accumulated in float64."""
    return float(torch.dot(x.double(), x.double())) if x.numel() else 0.0


def residual_norm2(u: Tensor, kept: Payload) -> float:
    """||u - kept||^2, where `kept` is dense or sparse (its values need not equal u's)."""
    if isinstance(kept, Sparse):
        r = u.double().clone()
        r.index_add_(0, kept.idx, -kept.val.double())
        return sq_norm(r)
    return sq_norm(u.double() - kept.double())


def topk_error(u: Tensor, k: int) -> float:
    """||u - TopK(u)||^2 = ||u||^2 minus the k largest squares (float64: the difference loses at most
    1e-16 of ||u||^2)."""
    if k >= u.numel():
        return 0.0
    return max(sq_norm(u) - sq_norm(torch.topk(u.abs(), k, sorted=False).values), 0.0)


def randk_error(u: Tensor, k: int, generator: torch.Generator) -> float:
    """||u - RandK(u)||^2 for k distinct uniform coordinates (no rescaling; papers.md 5)."""
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
    errors = {"err/active": residual_norm2(u, payload), "err/active_sent": residual_norm2(u, sent),
              "err/topk": topk_error(u, k), "err/randk": randk_error(u, k, generator)}
    count = len(payload) if isinstance(payload, Sparse) else d
    return {"k": k, "d": d, "u/norm2": norm2, **errors,
            **{"ratio/" + key[4:]: (v / norm2 if norm2 > 0 else float("nan")) for key, v in errors.items()},
            "bound/linear": 1 - k / d, "bound/square": (1 - k / d) ** 2,
            **moments(u), "density/target": density, "density/achieved": count / d}


def ijcai_parts(x: Tensor, aggregated: Tensor, density: float, generator: torch.Generator) -> dict[str, float]:
    """Parts of the IJCAI delta ratio for one step (papers.md 5): x = mean of the ranks' u."""
    return {"ijcai/x_norm2": sq_norm(x), "ijcai/err_scheme": residual_norm2(x, aggregated),
            "ijcai/err_randk": randk_error(x, k_of(x.numel(), density), generator)}


class Capture:
    """Observes training steps for the analysis figures (paper_figs/fig_histograms.py, fig_bounds.py)."""

    def __init__(self, cfg: CaptureConfig, run_dir: Path, seed: int, is_root: bool, scheme: str) -> None:
        self.cfg, self.is_root, self.scheme = cfg, is_root, scheme
        self.dir = Path(run_dir) / "capture"
        self.generator = rank_generator(seed, 0, "capture")
        self.file = None
        if is_root:
            self.dir.mkdir(parents=True, exist_ok=True)
            if cfg.stats:
                self.file = open(self.dir / "stats.jsonl", "a", buffering=1)

    def wants(self, step: int) -> bool:
        """Whether `step` (1-based) is observed; the same answer on every rank."""
        return (self.cfg.stats and step % self.cfg.every == 0) or step in self.cfg.u_steps

    def observe(self, step: int, epoch: int, density: float, world: World, us: Sequence[Tensor],
                payloads: Sequence[Payload], results: Sequence[Reduced], aggregated: Tensor) -> None:
        """Call between the collective and the residual update, on every rank (the delta part is a
        collective). us/payloads/results: this process's local ranks, in rank order."""
        x = None
        if self.cfg.stats and self.cfg.delta and step % self.cfg.every == 0:
            x = world.collective(DenseAllreduce(), [u.clone() for u in us])[0][0].average()
        if not self.is_root:
            return
        u, payload = us[0], payloads[0]
        sent = accounted(payload, results[0].support)
        if self.file is not None and step % self.cfg.every == 0:
            record = {"step": step, "epoch": epoch, **u_statistics(u, payload, sent, density, self.generator)}
            if x is not None:
                record.update(ijcai_parts(x, aggregated, density, self.generator))
            self.file.write(json.dumps(record) + "\n")
        if step in self.cfg.u_steps:
            torch.save({"u": u.detach().cpu().clone(), "step": step, "epoch": epoch, "density": density,
                        "k": k_of(u.numel(), density), "scheme": self.scheme,
                        "selected": payload.idx.cpu() if isinstance(payload, Sparse) else None,
                        "sent": sent.idx.cpu() if isinstance(sent, Sparse) else None},
                       self.dir / f"u_step{step:06d}.pt")

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
