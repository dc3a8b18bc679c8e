"""`python -m ssgd.perf.make_profiles [--out DIR]`: write the shipped profiles (src/ssgd/perf/profiles/).

Calibration to the gTop-k paper's cluster (one P102-100 GPU per 1 GbE machine, inferred; papers.md 7):

  * Compute per iteration T = bs / v_1, with v_1 the P = 1 per-worker throughput of the scaling lists
    (papers.md 7) and bs the scaling figure's batch per worker (VGG-16 128, the others 32;
    papers.md 6.4). All of T is forward + backward: t_f = T / 3, t_b = 2 T / 3 (the authors'
    t_f = 0.5 t_b, papers.md 4); t_io = t_h2d = t_update = 0 because papers.md gives no split.
  * Layers: every module with weights that do arithmetic (Conv, Linear, LSTM, Embedding) starts a
    layer; normalisation parameters (BatchNorm) join the weighted layer that precedes them in the
    forward pass. Backward order = reverse of the forward call order. Parameter counts come from the
    real models (ssgd.models, or torchvision with weights=None, or the CIFAR VGG-16 built here).
  * Split rule: t_f and t_b are shared across layers in proportion to each layer's forward
    multiply-accumulates per sample (counted by forward hooks on one sample); not parameter counts,
    which would give AlexNet's and VGG's FC layers nearly all the time.
  * select_s (exact top-k of the flat d-vector) = the "Compression" seconds of the 32-worker gTop-k
    time breakdown (papers.md 7). It depends on d, not on the batch, so the breakdown's different batch
    sizes do not matter. Where no breakdown exists (LSTM-PTB) it is the authors' top-k model
    s d log2 d, s = 2.18896957e-10 s (papers.md 3.4, same GPU per its code comment).
  * threshold_select_s (Gaussian-k, Random-k) = select_s * 6 / log2 d: an ASSUMPTION, not paper data
    (6 passes over d: std_mean, |u|, up to 3 compare-and-nonzero, against ~log2 d for a sort-like top-k).

Models lacking the paper data (LSTM-AN4, ResNet-56, FNN-3, ...: no scaling list) are not shipped.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ssgd.perf.iteration import Profile

TOPK_SECONDS_PER_NLOGN = 2.18896957e-10        # papers.md 3.4, topk_perf_model (P102-100)
GAUSSIAN_PASSES = 6                            # assumption, see the module docstring
FORWARD_SHARE = 1 / 3                          # t_f = 0.5 t_b (papers.md 4, gmwfbp_speedup)
WEIGHTED = (nn.Conv2d, nn.Linear, nn.LSTM, nn.Embedding)


@dataclass(frozen=True)
class PaperModel:
    """One model's numbers from papers.md 7 (authors' plotting scripts)."""

    name: str
    title: str
    batch_size: int                            # scaling figure's batch per worker
    v1: float                                  # P = 1 per-worker throughput, samples/s
    breakdown_s: tuple[float, float, float] | None   # 32-worker gTop-k computation/compression/communication
    breakdown_samples: int | None              # samples per iteration of the breakdown run


PAPER_MODELS = (
    PaperModel("vgg16", "VGG-16 (CIFAR-10)", 128, 1317.333, (0.1395, 0.0914, 0.8118), 128),
    PaperModel("resnet20", "ResNet-20 (CIFAR-10)", 32, 920.632, (0.1460, 0.00162, 0.0247), 128),
    PaperModel("alexnet", "AlexNet (ImageNet)", 32, 173.469, (0.2572, 0.3838, 3.3630), 64),
    PaperModel("resnet50", "ResNet-50 (ImageNet)", 32, 52.873, (4.882, 0.154, 1.424), 256),
    PaperModel("lstm_ptb", "LSTM-PTB", 32, 392.0, None, None),
)


# --- the real models -----------------------------------------------------------------------------
def build_model(name: str) -> tuple[nn.Module, torch.Tensor]:
    """(model in eval mode, one input sample) for a PAPER_MODELS name."""
    from ssgd.data.base import DataSpec
    from ssgd.models import LSTMLM, resnet20, vgg16

    if name == "vgg16":
        model, x = vgg16(DataSpec("image", (3, 32, 32), 10)), torch.zeros(1, 3, 32, 32)
    elif name == "resnet20":
        model, x = resnet20(DataSpec("image", (3, 32, 32), 10)), torch.zeros(1, 3, 32, 32)
    elif name in ("alexnet", "resnet50"):
        import torchvision

        model, x = getattr(torchvision.models, name)(weights=None), torch.zeros(1, 3, 224, 224)
    elif name == "lstm_ptb":   # papers.md 6.1: 2 layers, emb = hidden = 1500, 35 steps, keep 0.35, vocab 10k
        model = LSTMLM(DataSpec("tokens", (35,), 10000), emb=1500, hidden=1500, layers=2, dropout=0.65)
        x = torch.zeros(1, 35, dtype=torch.long)
    else:
        raise ValueError(f"unknown model {name!r}")
    return model.eval(), x


def _macs(module: nn.Module, inputs: tuple, output) -> int:
    """Forward multiply-accumulates for one sample (the hooks run on a batch of 1)."""
    out = output[0] if isinstance(output, tuple) else output
    if isinstance(module, nn.Conv2d):
        kh, kw = module.kernel_size
        return out.numel() * module.in_channels // module.groups * kh * kw
    if isinstance(module, nn.Linear):
        return out.numel() * module.in_features
    if isinstance(module, nn.LSTM):
        steps = out.shape[1] if module.batch_first else out.shape[0]
        return steps * 4 * module.hidden_size * (module.input_size + module.hidden_size)
    return 2 * out.numel()                     # lookups, normalisation: elementwise


def layer_table(model: nn.Module, x: torch.Tensor) -> list[tuple[str, int, int]]:
    """[(layer name, parameters, forward MACs per sample)] in BACKWARD order (see module docstring)."""
    calls: list[tuple[str, nn.Module, int]] = []
    seen: set[int] = set()

    def hook(name: str):
        def record(module: nn.Module, inputs: tuple, output) -> None:
            if id(module) not in seen:
                seen.add(id(module))
                calls.append((name, module, _macs(module, inputs, output)))
        return record

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules()
               if any(True for _ in m.parameters(recurse=False))]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    groups: list[list] = []
    for name, module, macs in calls:
        n = sum(p.numel() for p in module.parameters(recurse=False))
        if isinstance(module, WEIGHTED) or not groups:
            groups.append([name, n, macs])
        else:
            groups[-1][1] += n
            groups[-1][2] += macs
    total = sum(p.numel() for p in model.parameters())
    if sum(g[1] for g in groups) != total:
        raise RuntimeError(f"layer grouping lost parameters: {sum(g[1] for g in groups)} != {total}")
    return [tuple(g) for g in reversed(groups)]


# --- calibration ---------------------------------------------------------------------------------
def topk_model_seconds(d: int) -> float:
    """The authors' top-k selection time model s d log2 d (papers.md 3.4)."""
    return TOPK_SECONDS_PER_NLOGN * d * math.log2(d)


def make_profile(pm: PaperModel) -> Profile:
    """The profile of one paper model (rules in the module docstring)."""
    model, x = build_model(pm.name)
    table = layer_table(model, x)
    del model
    names, params, macs = (list(col) for col in zip(*table))
    d, total_macs = sum(params), sum(macs)
    T = pm.batch_size / pm.v1
    t_f, t_b = T * FORWARD_SHARE, T * (1 - FORWARD_SHARE)
    forward = [t_f * m / total_macs for m in macs]
    backward = [t_b * m / total_macs for m in macs]
    model_sel = topk_model_seconds(d)
    lines = [
        f"{pm.title}: d = {d:,} parameters in {len(names)} layers (backward order), bs {pm.batch_size} per worker.",
        f"Compute: T = bs / v_1 = {pm.batch_size} / {pm.v1} samples/s = {T:.6g} s (papers.md 7, P = 1 entry), "
        f"all of it forward + backward, t_f = T/3 = {t_f:.6g} s, t_b = 2T/3 = {t_b:.6g} s (papers.md 4: t_f = 0.5 t_b); "
        "io, h2d and update 0 (no split in papers.md).",
        f"Per-layer split proportional to forward MACs per sample (total {total_macs:,}); BatchNorm parameters "
        "join the preceding weighted layer.",
    ]
    if pm.breakdown_s is not None:
        comp, sel, comm = pm.breakdown_s
        lines.append(
            f"select_s = {sel} s: 'Compression' of the 32-worker gTop-k time breakdown (papers.md 7); the authors' "
            f"s d log2 d model (papers.md 3.4) gives {model_sel:.4g} s. Cross-check: the breakdown's computation "
            f"{comp} s for {pm.breakdown_samples} samples is {pm.breakdown_samples / comp:.1f} samples/s vs v_1 = {pm.v1}; "
            f"its total {sum(pm.breakdown_s):.4g} s is {pm.breakdown_samples / sum(pm.breakdown_s):.2f} samples/s per worker.")
        select = sel
    else:
        lines.append(f"select_s = {model_sel:.4g} s from the authors' top-k model s d log2 d, s = {TOPK_SECONDS_PER_NLOGN} "
                     "(papers.md 3.4): papers.md has no time breakdown for this model.")
        select = model_sel
    threshold = select * GAUSSIAN_PASSES / math.log2(d)
    lines.append(f"threshold_select_s = select_s * {GAUSSIAN_PASSES} / log2 d = {threshold:.4g} s: an assumption "
                 "(Gaussian-k is O(d), a few passes), not paper data.")
    return Profile(name=pm.name, batch_size=pm.batch_size, layers=tuple(names), params=tuple(params),
                   forward_s=tuple(forward), backward_s=tuple(backward), select_s=select,
                   threshold_select_s=threshold, derivation=" ".join(lines))


def main(argv: list[str] | None = None) -> int:
    from ssgd.perf import profiles

    ap = argparse.ArgumentParser(description="Write the shipped iteration-time profiles (JSON)")
    ap.add_argument("--out", default=None, help="output folder (default: the ssgd.perf.profiles package)")
    ap.add_argument("--only", nargs="*", default=None, help="model names (default: all)")
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else profiles.directory()
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    for pm in PAPER_MODELS:
        if args.only and pm.name not in args.only:
            continue
        prof = make_profile(pm)
        prof.save(out / f"{pm.name}.json")
        print(f"{pm.name:<9} d={prof.d:>11,} layers={len(prof.layers):>3} t_f+t_b={prof.t_f + prof.t_b:.4g} s "
              f"select={prof.select_s:.4g} s -> {out / (pm.name + '.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
