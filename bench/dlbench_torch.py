"""PyTorch side of `bench/dlbench.py`: the DLBench models and one timed training step (eager or compiled).

The CNNs and the LSTM are the package's own definitions (`ssgd.models.alexnet_r`, `resnet56`,
`LSTMLM` at DLBench's size, no dropout); FCN-5 and FCN-R are plain `nn.Sequential`s of Linear +
Sigmoid as DLBench's definitions. A step is what DLBench timed: forward, cross-entropy loss,
backward and an SGD update (lr 0.01, momentum 0.9) on one fixed synthetic mini-batch (no input
pipeline). Run by the driver in a subprocess whose thread count is already set.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))
from dlbench_workloads import (FCN5_HIDDEN, FCNR_HIDDEN, LEARNING_RATE, LSTM_HIDDEN, LSTM_LAYERS,  # noqa: E402
                               MOMENTUM, Workload, redundant_lstm_bias)

TOOLS = ("torch", "torch_compile")


def mlp(sizes: tuple[int, ...]) -> nn.Module:
    """Flatten, then Linear + Sigmoid through `sizes`, the last Linear without activation."""
    layers: list[nn.Module] = [nn.Flatten()]
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.Sigmoid())
    return nn.Sequential(*layers)


def build_model(w: Workload) -> nn.Module:
    """The PyTorch definition of workload `w` (float32, CPU, train mode)."""
    from ssgd.data.base import DataSpec
    from ssgd.models import LSTMLM, alexnet_r, resnet56

    spec = DataSpec(w.kind, w.input_shape, w.classes, w.key)
    if w.key == "fcn5":
        return mlp((w.input_shape[0], *FCN5_HIDDEN, w.classes))
    if w.key == "fcnr":
        return mlp((784, *FCNR_HIDDEN, w.classes))
    if w.key == "alexnet_r":
        return alexnet_r(spec)
    if w.key == "resnet56":
        return resnet56(spec)
    if w.key == "lstm":
        return LSTMLM(spec, emb=LSTM_HIDDEN, hidden=LSTM_HIDDEN, layers=LSTM_LAYERS, dropout=0.0)
    raise ValueError(f"no PyTorch definition of workload {w.key!r}")


def canonical_params(model: nn.Module) -> tuple[int, int]:
    """(count comparable across tools, raw PyTorch count): the LSTM's b_hh is not counted in the first."""
    raw = sum(p.numel() for p in model.parameters())
    lstms = [m for m in model.modules() if isinstance(m, nn.LSTM)]
    redundant = redundant_lstm_bias(lstms[0].hidden_size, len(lstms)) if lstms else 0
    return raw - redundant, raw


def synthetic_batch(w: Workload, batch: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    """One fixed mini-batch: N(0, 1) inputs or uniform token ids, uniform labels."""
    gen = torch.Generator().manual_seed(seed)
    if w.kind == "tokens":
        x = torch.randint(0, w.classes, (batch, *w.input_shape), generator=gen)
        return x, torch.roll(x, -1, dims=1)
    return torch.randn((batch, *w.input_shape), generator=gen), torch.randint(0, w.classes, (batch,), generator=gen)


def train_step(model: nn.Module, forward: Callable[[Tensor], Tensor], opt: torch.optim.Optimizer,
               x: Tensor, y: Tensor) -> float:
    """Forward, loss, backward, update; returns the loss (a host value: the step has finished)."""
    opt.zero_grad(set_to_none=True)
    out = forward(x)
    loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    loss.backward()
    opt.step()
    return loss.item()


def prepare(tool: str, w: Workload, batch: int, warmup: int) -> tuple[Callable[[], float], dict]:
    """Build workload `w`, warm up; returns (one training step returning its loss, facts of the cell:
    parameter counts, setup and warm-up seconds)."""
    if tool not in TOOLS:
        raise ValueError(f"tool={tool!r}: must be one of {', '.join(TOOLS)}")
    torch.manual_seed(0)
    t0 = time.perf_counter()
    model = build_model(w).train()
    forward = torch.compile(model) if tool == "torch_compile" else model
    opt = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    x, y = synthetic_batch(w, batch)
    setup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(max(warmup, 1 if tool == "torch_compile" else 0)):   # compiling happens in the first step
        train_step(model, forward, opt, x, y)
    warmup_s = time.perf_counter() - t0
    params, raw = canonical_params(model)
    return (lambda: train_step(model, forward, opt, x, y)), {"params": params, "params_raw": raw, "setup_s": setup_s,
                                                            "warmup_s": warmup_s}


def set_threads(tool: str, threads: int) -> None:
    """Intra-op threads of this process; torch.compile's generated C++ kernels get the same count
    (Inductor bakes its OpenMP team size into the code, and the count is part of its cache key)."""
    torch.set_num_threads(threads)
    if tool == "torch_compile":
        import torch._inductor.config as inductor

        inductor.cpp.threads = threads


def versions(tool: str) -> dict[str, str]:
    """Library versions and thread settings as this process sees them."""
    return {"torch": torch.__version__, "torch_threads": str(torch.get_num_threads()),
            "torch_interop_threads": str(torch.get_num_interop_threads()),
            "torch_parallel_info": torch.__config__.parallel_info().splitlines()[1:4].__repr__()}
