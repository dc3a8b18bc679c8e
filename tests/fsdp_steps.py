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
