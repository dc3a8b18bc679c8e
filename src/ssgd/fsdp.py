"""Compressed gradient reduce-scatter for FSDP2 (`torch.distributed.fsdp.fully_shard`), with error feedback.

    from ssgd.fsdp import compress_reduce_scatter
    fully_shard(model)
    rs = compress_reduce_scatter(model, compressor="topk", density=0.01)

FSDP2 hands each module's reduce-scatter to a `torch.distributed.fsdp.ReduceScatter` set with
`FSDPModule.set_custom_reduce_scatter`. It is called as `comm(output, input, group, op)`: `input` is this
rank's flat gradient of the module's parameters, padded so that P divides it, and laid out so that chunk j is
rank j's shard; `output` receives this rank's shard of the sum (op SUM) or of the mean (op AVG).
`CompressedReduceScatter` runs the lab's collective programs there, on the group's torch.distributed backend
(`ssgd.comm.executors.torch_dist`):

  * `topk`: u = input + e; the exact top-k of u (k = density x numel) is sent, each entry to the rank owning its
    shard, which sums what it receives in rank order (`SparseReduceScatter`); e = u - what was sent;
  * `oktopk`: the same, with Ok-Topk's threshold reuse for the selection (`OkTopkSelect(tau)`: the exact top-k
    every tau calls, the reused threshold in between): the first phase of Ok-Topk (Li and Hoefler, PPoPP 2022)
    with the regions fixed to FSDP's shards;
  * `dense16`: every value rounded once to `values` (bf16 or fp16) on the wire, summed in float32
    (`DenseReduceScatter`); no error feedback (the rounding error is not kept).

k = density x numel per module, unless the modules share a `budget` (`ssgd.compress.budget.GlobalBudget`,
`topk` only): then each module's k follows its share of the previous step's global top-k over all of them, as
one Top-k over the whole model would send (a module's numel is its padded flat gradient's).

The residual e is float32, as large as the module's whole (unsharded) gradient, on every rank: the memory FSDP
saves on gradients comes back for the residual (docs/fsdp.md measures it). `state_dict()` gives it as a DTensor
of shape [P, numel] sharded by rank (row r is rank r's residual), so that torch.distributed.checkpoint saves
every rank's row; `load_state_dict` takes it back.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.fsdp import FSDPModule
from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter   # torch 2.14: not re-exported

from ssgd.comm.collectives.reduce_scatter import DenseReduceScatter, SparseReduceScatter
from ssgd.comm.executors.torch_dist import TorchExecutor, run_torch
from ssgd.comm.ops import RankLog
from ssgd.compress.budget import GlobalBudget
from ssgd.compress.oktopk import OkTopkSelect
from ssgd.compress.topk import TopK
from ssgd.errors import ConfigError
from ssgd.payload import Dense

SCHEMES = ("topk", "oktopk", "dense16")


class CompressedReduceScatter(ReduceScatter):
    """One FSDP module's compressed reduce-scatter (module docstring). `log` sums what this rank sent."""

    def __init__(self, compressor: str = "topk", density: float = 0.01, tau: int = 32, values: str = "bf16",
                 budget: GlobalBudget | None = None) -> None:
        if compressor not in SCHEMES:
            raise ConfigError(f"compressor={compressor!r}: allowed: {', '.join(SCHEMES)}")
        if not 0 < density <= 1:
            raise ConfigError(f"density={density!r}: must be in (0, 1]")
        if budget is not None and compressor != "topk":
            raise ConfigError(f"compressor={compressor!r} with a shared budget: only topk takes one")
        if budget is not None and budget.density != density:
            raise ConfigError(f"density={density!r} with a budget of density {budget.density!r}: give both the same")
        self.budget, self.member = budget, None
        self.compressor, self.density = compressor, density
        self.select = OkTopkSelect(tau) if compressor == "oktopk" else TopK()
        self.collective = DenseReduceScatter(values) if compressor == "dense16" else SparseReduceScatter()
        self.residual: Tensor | None = None
        self.log, self.calls = RankLog(), 0
        self._executor: TorchExecutor | None = None

    def allocate(self, size: Any, *, dtype: torch.dtype, device: torch.device) -> Tensor:
        return torch.empty(size, dtype=dtype, device=device)

    def __call__(self, output_tensor: Tensor, input_tensor: Tensor, group: dist.ProcessGroup,
                 op: Any, async_op: bool = False) -> None:
        if op not in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            raise ValueError(f"ssgd.fsdp: reduce op {op} is not supported (SUM or AVG)")
        if self._executor is None:
            self._executor = TorchExecutor(group)
        P = dist.get_world_size(group)
        reduced, log = run_torch(self.collective, self._payload(input_tensor), executor=self._executor)
        self.log.stats.add((log.stats.messages, log.stats.bytes))
        self.calls += 1
        rank = dist.get_rank(group)
        shard = input_tensor.numel() // P
        total = reduced.total.to_dense()
        mine = total[rank * shard:(rank + 1) * shard] if total.numel() == input_tensor.numel() else total
        output_tensor.copy_(mine / P if op == dist.ReduceOp.AVG else mine)
        return None

    def _payload(self, grad: Tensor) -> Any:
        """What this rank sends: the rounded dense vector, or the selection of u = grad + e (e updated)."""
        flat = grad.detach().view(-1).float()
        if self.compressor == "dense16":
            return self.collective.encode(Dense(flat))
        if self.residual is None or self.residual.numel() != flat.numel():
            self.residual = torch.zeros_like(flat)
        u = self.residual.add_(flat)
        if self.budget is not None:
            if self.member is None:
                self.member = self.budget.join(u.numel())
            payload = self.budget.select(self.member, u)
        else:
            payload = self.select.compress(u, self.density)
        payload.subtract_from(u)                 # e = u - sent: zero at the sent entries
        return payload

    def state_dict(self) -> dict:
        """{"residual": DTensor [P, numel] (row r: rank r's e), "select": the selection's state, "calls"}, and with
        a budget "share" (DTensor [P, 1]: row r is rank r's k for this module's next step, -1 before it has one) and
        "numel" (the module's size in the budget, 0 before its first call). Call it at a step's end."""
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard

        e = self.residual if self.residual is not None else torch.zeros(0)
        mesh = init_device_mesh(e.device.type, (dist.get_world_size(),))
        state = {"residual": DTensor.from_local(e.unsqueeze(0), mesh, [Shard(0)]),
                 "select": self.select.state_dict(), "calls": self.calls}
        if self.budget is not None:
            share = self.budget.state_dict(self.member)["share"] if self.member is not None else -1
            numel = self.budget.sizes[self.member] if self.member is not None else 0
            state |= {"share": DTensor.from_local(torch.tensor([[share]]), mesh, [Shard(0)]), "numel": numel}
        return state

    def load_state_dict(self, state: dict) -> None:
        residual = state["residual"]
        local = residual.to_local() if hasattr(residual, "to_local") else residual
        self.residual = local.reshape(-1).clone() if local.numel() else None
        self.select.load_state_dict(state["select"])
        self.calls = int(state["calls"])
        if self.budget is not None and int(state.get("numel", 0)) > 0:
            if self.member is None:
                self.member = self.budget.join(int(state["numel"]))
            share = state["share"]
            share = share.to_local() if hasattr(share, "to_local") else share
            self.budget.load_state_dict(self.member, {"share": int(share.reshape(-1)[0])})


def compress_reduce_scatter(module: FSDPModule, compressor: str = "topk", density: float = 0.01,
                            tau: int = 32, values: str = "bf16",
                            budget: GlobalBudget | None = None) -> CompressedReduceScatter:
    """Give `module` (already `fully_shard`-ed) a `CompressedReduceScatter`; returns it (its `state_dict` goes into
    the user's checkpoint, its `log` counts what was sent). `budget`: one `GlobalBudget(density)` passed to every
    module of the model, for Top-k's k shared as one global Top-k would (module docstring). ConfigError (one
    line) for a module that is not an FSDPModule or a bad setting."""
    if not isinstance(module, FSDPModule):
        raise ConfigError(f"ssgd.fsdp.compress_reduce_scatter: {type(module).__name__} is not an FSDPModule; call "
                          "torch.distributed.fsdp.fully_shard(model) first")
    comm = CompressedReduceScatter(compressor, density, tau, values, budget)
    module.set_custom_reduce_scatter(comm)
    return comm
