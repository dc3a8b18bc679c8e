"""`python -m ssgd.tools.make_profiles [--out DIR] [--only NAME ...]`: write the shipped profiles
(src/ssgd/perf/profiles/*.json) from the gTop-k paper's numbers (`ssgd.perf.paper`) and the real models.

Calibration to the gTop-k paper's cluster (Shi et al., ICDCS 2019, arXiv:1901.04359: 32 machines on
1 GbE, one P102-100 GPU each by a code comment of the released code):

  * Compute per iteration T = bs / v_1, with v_1 the P = 1 per-worker throughput of the authors'
    scaling lists (`realdata_speedup` in hclhkbu/gtopkssgd scripts/icdcs2019/communication.py) and bs
    that figure's batch per worker (VGG-16 128, the others 32). All of T is forward + backward:
    t_f = T / 3, t_b = 2 T / 3 (t_f = 0.5 t_b, as the authors' `gmwfbp_speedup` in the same script);
    t_io = t_h2d = t_update = 0 because the paper's data has no split.
  * Layers: every module with weights that do arithmetic (Conv, Linear, LSTM, Embedding) starts a
    layer; normalisation parameters (BatchNorm) join the weighted layer that precedes them in the
    forward pass. Backward order = reverse of the forward call order. Parameter counts come from the
    real models (ssgd.models, or torchvision with weights=None, or the CIFAR VGG-16 built here).
  * Split rule: t_f and t_b are shared across layers in proportion to each layer's forward
    multiply-accumulates per sample (counted by forward hooks on one sample); not parameter counts,
    which would give AlexNet's and VGG's FC layers nearly all the time.
  * select_s (exact top-k of the flat d-vector) = the "Compression" seconds of the 32-worker gTop-k
    time breakdown (`plot_breakdown` in the same script). It depends on d, not on the batch, so the
    breakdown's different batch sizes do not matter. Where no breakdown exists (LSTM-PTB) it is the
    authors' top-k model s d log2 d, s = 2.18896957e-10 s (`topk_perf_model`, hclhkbu/GaussianK-SGD
    utils.py, commented "P102-100").
  * threshold_select_s (Gaussian-k, Random-k) = select_s * 6 / log2 d: an ASSUMPTION, not paper data
    (6 passes over d: std_mean, |u|, up to 3 compare-and-nonzero, against ~log2 d for a sort-like top-k).

Models lacking the paper data (LSTM-AN4, ResNet-56, FNN-3, ...: no scaling list) are not shipped.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
from torch import nn

from ssgd.perf import profiles
from ssgd.perf.iteration import Profile
from ssgd.perf.paper import PAPER_MODELS, TOPK_SECONDS_PER_NLOGN, PaperModel
from ssgd.utils.atomic import full_disk_is_one_line, write_text_atomic

GAUSSIAN_PASSES = 6                            # assumption, see the module docstring
FORWARD_SHARE = 1 / 3                          # t_f = 0.5 t_b (the authors' `gmwfbp_speedup`)
WEIGHTED = (nn.Conv2d, nn.Linear, nn.LSTM, nn.Embedding)
SOURCE = "hclhkbu/gtopkssgd scripts/icdcs2019/communication.py"


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
    elif name == "lstm_ptb":   # gTop-k released code (hclhkbu/gtopkssgd): 2 layers, emb = hidden = 1500, 35 steps, keep 0.35
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
    """The authors' top-k selection time model s d log2 d (`topk_perf_model`, hclhkbu/GaussianK-SGD utils.py)."""
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
        f"Compute: T = bs / v_1 = {pm.batch_size} / {pm.v1} samples/s = {T:.6g} s (P = 1 entry of the gTop-k paper's "
        f"scaling lists, `realdata_speedup` in {SOURCE}), all of it forward + backward, t_f = T/3 = {t_f:.6g} s, "
        f"t_b = 2T/3 = {t_b:.6g} s (t_f = 0.5 t_b as the authors' `gmwfbp_speedup`); io, h2d and update 0 "
        "(the paper's data has no split).",
        f"Per-layer split proportional to forward MACs per sample (total {total_macs:,}); BatchNorm parameters "
        "join the preceding weighted layer.",
    ]
    if pm.breakdown_s is not None:
        comp, sel, comm = pm.breakdown_s
        lines.append(
            f"select_s = {sel} s: 'Compression' of the 32-worker gTop-k time breakdown (`plot_breakdown` in the same "
            f"script); the authors' s d log2 d model (`topk_perf_model`, hclhkbu/GaussianK-SGD utils.py) gives "
            f"{model_sel:.4g} s. Cross-check: the breakdown's computation "
            f"{comp} s for {pm.breakdown_samples} samples is {pm.breakdown_samples / comp:.1f} samples/s vs v_1 = {pm.v1}; "
            f"its total {sum(pm.breakdown_s):.4g} s is {pm.breakdown_samples / sum(pm.breakdown_s):.2f} samples/s per worker.")
        select = sel
    else:
        lines.append(f"select_s = {model_sel:.4g} s from the authors' top-k model s d log2 d, s = {TOPK_SECONDS_PER_NLOGN} "
                     "(`topk_perf_model`, hclhkbu/GaussianK-SGD utils.py): the authors' scripts have no time "
                     "breakdown for this model.")
        select = model_sel
    threshold = select * GAUSSIAN_PASSES / math.log2(d)
    lines.append(f"threshold_select_s = select_s * {GAUSSIAN_PASSES} / log2 d = {threshold:.4g} s: an assumption "
                 "(Gaussian-k is O(d), a few passes), not paper data.")
    return Profile(name=pm.name, batch_size=pm.batch_size, layers=tuple(names), params=tuple(params),
                   forward_s=tuple(forward), backward_s=tuple(backward), select_s=select,
                   threshold_select_s=threshold, derivation=" ".join(lines))


@full_disk_is_one_line
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write the shipped iteration-time profiles (JSON)")
    ap.add_argument("--out", default=None, help="output folder (default: the ssgd.perf.profiles package)")
    ap.add_argument("--only", nargs="*", default=None, help="model names (default: all)")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.only or ()) - {pm.name for pm in PAPER_MODELS})
    if unknown:
        print(f"error: --only {' '.join(unknown)}: not a model of the paper's scaling data; allowed: "
              f"{', '.join(pm.name for pm in PAPER_MODELS)}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else profiles.directory()
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    for pm in PAPER_MODELS:
        if args.only and pm.name not in args.only:
            continue
        prof = make_profile(pm)
        write_text_atomic(out / f"{pm.name}.json", prof.to_json(), "the profile")
        print(f"{pm.name:<9} d={prof.d:>11,} layers={len(prof.layers):>3} t_f+t_b={prof.t_f + prof.t_b:.4g} s "
              f"select={prof.select_s:.4g} s -> {out / (pm.name + '.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
