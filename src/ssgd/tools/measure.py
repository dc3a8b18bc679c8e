"""Profile a configured model on THIS machine: per-layer forward/backward times and sizes.

    python -m ssgd.tools.measure model=resnet20 dataset=synthetic_cifar10 trainer.batch_size=32 \
        [device=cuda] [out=outputs/profiles/resnet20-local.json] [reps=10]

Runs as one worker of the trainer does (one intra-op thread), times every module that owns
parameters with forward (pre-)hooks and full backward (pre-)hooks over `reps` iterations after a
warm-up (median per layer), puts what no such module accounts for (activations, pooling, loss,
autograd bookkeeping) into a last "other" layer with 0 parameters, and times exact top-k selection,
Gaussian-k selection and the SGD update of the flat d-vector. On `device=cuda` the batch, the model and
the d-vector live on the GPU, every timed region ends with a CUDA synchronise, and the batch's copy to
the GPU is timed as h2d_s (0 on the CPU). Writes a `Profile` JSON that `ssgd.perf.iteration`,
`paper_figs/fig_scaling.py` and a run's `cluster.compute_profile` (`make profile`) read like the
shipped ones. The default file is outputs/profiles/<name>.json (not tracked).
"""
from __future__ import annotations

import statistics
import sys
import warnings
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch import nn

from ssgd.compress.gaussiank import GaussianK
from ssgd.compress.topk import TopK
from ssgd.perf.iteration import Profile
from ssgd.loop.replica import loss_and_correct
from ssgd.utils.atomic import full_disk_is_one_line, write_text_atomic


def weighted_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Modules that own parameters directly, in registration (forward) order."""
    return [(name or "model", m) for name, m in model.named_modules() if any(True for _ in m.parameters(recurse=False))]


def _sync(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU), so that a timer reads finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _now(device: torch.device) -> float:
    _sync(device)
    return time.perf_counter()


def _timed(fn, reps: int, device: torch.device = torch.device("cpu")) -> float:
    """Median seconds of `fn()` over `reps` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        start = _now(device)
        fn()
        times.append(_now(device) - start)
    return statistics.median(times)


def _forward_backward(model: nn.Module, x: torch.Tensor, y: torch.Tensor, params: list, reps: int,
                      on_warmup=lambda: None) -> tuple[float, float]:
    """Median forward and backward seconds over `reps` iterations after one warm-up (then
    `on_warmup()`), both timed inside the same iterations, so that neither is a difference of two
    noisy medians."""
    f, b = [], []
    for i in range(reps + 1):
        t0 = _now(x.device)
        loss, _ = loss_and_correct(model(x), y)
        t1 = _now(x.device)
        torch.autograd.grad(loss, params, allow_unused=True)
        t2 = _now(x.device)
        if i:
            f.append(t1 - t0)
            b.append(t2 - t1)
        else:
            on_warmup()
    return statistics.median(f), statistics.median(b)


def measure_profile(model: nn.Module, x: torch.Tensor, y: torch.Tensor, name: str, reps: int = 10,
                    density: float = 0.001) -> Profile:
    """Per-layer times of `model` on the batch (x, y), both on the model's device; see the module docstring."""
    dev = x.device
    layers = weighted_modules(model)
    forward, backward = defaultdict(list), defaultdict(list)
    starts: dict[str, float] = {}
    handles = []
    for lname, module in layers:
        handles += [
            module.register_forward_pre_hook(lambda m, a, n=lname: starts.__setitem__(("f", n), _now(dev))),
            module.register_forward_hook(lambda m, a, o, n=lname: forward[n].append(_now(dev) - starts[("f", n)])),
            module.register_full_backward_pre_hook(lambda m, g, n=lname: starts.__setitem__(("b", n), _now(dev))),
            module.register_full_backward_hook(lambda m, gi, go, n=lname: backward[n].append(_now(dev) - starts[("b", n)])),
        ]
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    warnings.filterwarnings("ignore", message="Full backward hook is firing")   # first layer: input needs no grad
    hooked_f, hooked_b = _forward_backward(model, x, y, params, reps,
                                           on_warmup=lambda: (forward.clear(), backward.clear()))
    for h in handles:
        h.remove()
    names = [n for n, _ in layers][::-1]         # backward order, as Profile wants
    fwd = [statistics.median(forward[n]) if forward[n] else 0.0 for n in names]
    bwd = [statistics.median(backward[n]) if backward[n] else 0.0 for n in names]
    sizes = [sum(p.numel() for p in m.parameters(recurse=False)) for _, m in layers][::-1]
    fwd.append(max(hooked_f - sum(fwd), 0.0))     # the "other" layer
    bwd.append(max(hooked_b - sum(bwd), 0.0))
    # the hooks themselves cost time (~30 % on ResNet-20): keep their shares, but scale every layer
    # so that the totals are the forward and backward medians of iterations without hooks
    plain_f, plain_b = _forward_backward(model, x, y, params, reps)
    fwd = [t * plain_f / max(sum(fwd), 1e-12) for t in fwd]
    bwd = [t * plain_b / max(sum(bwd), 1e-12) for t in bwd]
    d = sum(sizes)
    u = torch.randn(d, device=dev)
    host = x.cpu()                               # the batch as the loader holds it, for the copy's time
    optimizer = torch.optim.SGD(params, lr=1e-9, momentum=0.9, weight_decay=1e-4)
    for p in params:
        p.grad = torch.zeros_like(p)
    return Profile(
        name=name, batch_size=int(y.shape[0]), layers=(*names, "other"), params=(*sizes, 0),
        forward_s=tuple(fwd), backward_s=tuple(bwd),
        h2d_s=_timed(lambda: host.to(dev), reps, dev) if dev.type == "cuda" else 0.0,
        select_s=_timed(lambda: TopK().compress(u, density), reps, dev),
        threshold_select_s=_timed(lambda: GaussianK().compress(u, density), reps, dev),
        update_s=_timed(optimizer.step, reps, dev),
        derivation=(f"measured by `python -m ssgd.tools.measure` on this machine ({_device_name(dev)}, "
                    f"{torch.get_num_threads()} intra-op thread(s), torch {torch.__version__}): median of {reps} "
                    f"iterations after a warm-up; per-layer "
                    f"shares from forward/backward hooks on modules that own parameters (the rest in 'other'), "
                    f"scaled to the forward and backward times measured without hooks; "
                    f"selection of the flat d = {d} vector at density {density}"),
    )


def _device_name(dev: torch.device) -> str:
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"


@full_disk_is_one_line
def main(argv: list[str]) -> int:
    from hydra import compose, initialize_config_dir

    from ssgd.run import build
    from ssgd.config import conf_dir
    from ssgd.errors import ConfigError

    options = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in argv if a.startswith(("out=", "reps="))}
    overrides = [a for a in argv if not a.startswith(("out=", "reps="))]
    conf = conf_dir()
    torch.set_num_threads(1)                     # as one worker of the trainer
    try:
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            cfg = compose("config", overrides)
        data = build.dataset(cfg)
        model = build.model(cfg, data, cfg.seed)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    b = int(cfg.trainer.batch_size)
    dev = next(model.parameters()).device
    name = f"{cfg.model._target_.rsplit('.', 1)[-1]}-{data.spec.name}-bs{b}-{dev.type}"
    x, y = data.x_train[:b].to(dev), data.y_train[:b].to(dev)
    profile = measure_profile(model, x, y, name, reps=int(options.get("reps", 10)))
    out = Path(options.get("out", f"outputs/profiles/{name}.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(Path(out), profile.to_json(), "the profile")
    print(f"{name}: d = {profile.d:,}, forward {profile.t_f * 1e3:.2f} ms, backward {profile.t_b * 1e3:.2f} ms, "
          f"top-k {profile.select_s * 1e3:.2f} ms, Gaussian-k {profile.threshold_select_s * 1e3:.2f} ms, "
          f"update {profile.update_s * 1e3:.2f} ms -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
