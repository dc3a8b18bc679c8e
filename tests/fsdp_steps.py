"""Rank functions of tests/integration/test_fsdp.py (run by tests/torch_ranks.py): FSDP2 models on gloo ranks."""
from __future__ import annotations

import torch
import torch.distributed as dist


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(20, 24), torch.nn.ReLU(), torch.nn.Linear(24, 6))


def _steps(rank: int, model: torch.nn.Module, steps: int, skip: int = 0) -> list:
    """SGD steps on this rank's own batches (the first `skip` of its stream drawn and dropped: a run continued);
    the local shards of the gradients of the last step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    for _ in range(skip):
        torch.randn(16, 20, generator=g), torch.randint(0, 6, (16,), generator=g)
    grads = []
    for _ in range(steps):
        x, y = torch.randn(16, 20, generator=g), torch.randint(0, 6, (16,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        grads = [p.grad.to_local().clone().numpy() for p in model.parameters()]
        opt.step()
    return grads


def own_vs_compressed(rank: int, P: int, compressor: str, density: float, steps: int, tau: int = 1) -> dict:
    """The same training with FSDP's own reduce-scatter and with ssgd.fsdp's (`tau`: Ok-Topk's period; 1, exact
    every step): both runs' gradient shards and the bytes the compressed one sent, plus its residual on this rank."""
    from torch.distributed.fsdp import fully_shard

    from ssgd.fsdp import compress_reduce_scatter

    own = fully_shard(_model(0))
    ours = fully_shard(_model(0))
    rs = compress_reduce_scatter(ours, compressor=compressor, density=density, tau=tau)
    a, b = _steps(rank, own, steps), _steps(rank, ours, steps)
    e = rs.residual
    return {"own": a, "ours": b, "bytes": rs.log.stats.bytes, "calls": rs.calls,
            "residual_numel": 0 if e is None else e.numel(),
            "residual_norm": 0.0 if e is None else float(e.norm())}


def resume_is_bitwise(rank: int, P: int, path: str) -> dict:
    """Top-k with error feedback: 4 steps straight against 2 steps, a torch.distributed.checkpoint of the model,
    the optimizer-free state and the reduce-scatter's residual, a fresh model loaded from it, 2 more steps."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.fsdp import fully_shard

    from ssgd.fsdp import compress_reduce_scatter

    straight = fully_shard(_model(0))
    compress_reduce_scatter(straight, density=0.05, tau=1)
    want = _steps(rank, straight, 4)
    first = fully_shard(_model(0))
    rs = compress_reduce_scatter(first, density=0.05)
    _steps(rank, first, 2)
    dcp.save({"model": first.state_dict(), "rs": rs.state_dict()}, checkpoint_id=path)
    dist.barrier()
    second = fully_shard(_model(1))                     # other weights: the load must replace them
    rs2 = compress_reduce_scatter(second, density=0.05)
    state = {"model": second.state_dict(), "rs": rs2.state_dict()}
    rs2.residual = torch.zeros(rs.residual.numel())     # the DTensor to load into needs this rank's row
    state["rs"] = rs2.state_dict()
    dcp.load(state, checkpoint_id=path)
    second.load_state_dict(state["model"])
    rs2.load_state_dict(state["rs"])
    return {"want": want, "got": _steps(rank, second, 2, skip=2)}


def _units(model: torch.nn.Module, density: float | None) -> list:
    """Every Linear and the whole model `fully_shard`-ed; with a density, each given ssgd.fsdp's Top-k sharing one
    GlobalBudget. Returns the reduce-scatters, in the order they were made."""
    from torch.distributed.fsdp import fully_shard

    from ssgd.compress.budget import GlobalBudget
    from ssgd.fsdp import compress_reduce_scatter

    budget = GlobalBudget(density) if density is not None else None
    comms = []
    for module in [m for m in model if isinstance(m, torch.nn.Linear)] + [model]:
        fully_shard(module)
        if budget is not None:
            comms.append(compress_reduce_scatter(module, "topk", density, budget=budget))
    return comms


def budget_own_vs_compressed(rank: int, P: int, density: float, steps: int) -> dict:
    """FSDP per module, its own reduce-scatters against ssgd.fsdp's Top-k with one shared budget: both runs'
    gradient shards, and per module the calls, bytes and the k it selected last."""
    own, ours = _model(0), _model(0)
    _units(own, None)
    comms = _units(ours, density)
    a, b = _steps(rank, own, steps), _steps(rank, ours, steps)
    budget = comms[0].budget
    return {"own": a, "ours": b, "calls": [c.calls for c in comms], "bytes": [c.log.stats.bytes for c in comms],
            "sizes": [budget.sizes[c.member] for c in comms if c.member is not None], "shares": [budget.shares.get(c.member) for c in comms if c.member is not None]}


def budget_resume_is_bitwise(rank: int, P: int, path: str) -> dict:
    """Per-module Top-k with a shared budget: 5 steps straight against 3, a checkpoint of the model and every
    module's reduce-scatter state (residual and share), a fresh model loaded from it, 2 more steps."""
    import torch.distributed.checkpoint as dcp

    straight = _model(0)
    _units(straight, 0.05)
    want = _steps(rank, straight, 5)
    first = _model(0)
    comms = _units(first, 0.05)
    _steps(rank, first, 3)
    dcp.save({"model": first.state_dict(), "rs": [c.state_dict() for c in comms]}, checkpoint_id=path)
    dist.barrier()
    second = _model(1)
    comms2 = _units(second, 0.05)
    for c, old in zip(comms2, comms):                     # the DTensors to load into need this rank's rows
        c.residual = None if old.residual is None else torch.zeros(old.residual.numel())
    state = {"model": second.state_dict(), "rs": [c.state_dict() for c in comms2]}
    dcp.load(state, checkpoint_id=path)
    second.load_state_dict(state["model"])
    for c, s in zip(comms2, state["rs"]):
        c.load_state_dict(s)
    return {"want": want, "got": _steps(rank, second, 2, skip=3),
            "shares": [comms2[0].budget.shares.get(c.member) for c in comms2 if c.member is not None]}
