"""Ok-Topk's local selection with threshold reuse (Li and Hoefler, PPoPP 2022): the exact top-k every `tau` calls,
and in between every entry whose magnitude reaches the last exact call's k-th magnitude (one O(d) comparison
pass, about k entries). The collective is `ssgd.comm.collectives.oktopk.OkTopkAllreduce`, with the same `tau`."""
from __future__ import annotations

import torch
from torch import Tensor

from ssgd.compress.base import Compressor
from ssgd.compress.sparse import k_of, select_topk
from ssgd.errors import BadArgument
from ssgd.payload import Sparse


class OkTopkSelect(Compressor):
    """Exact Top-k on calls 0, tau, 2 tau, ...; entries with |u| >= the last exact threshold otherwise."""

    selection_cost = "linear"        # tau - 1 of every tau calls are one comparison pass

    def __init__(self, tau: int = 1, generator: torch.Generator | None = None) -> None:
        super().__init__(generator)
        if isinstance(tau, bool) or not isinstance(tau, int) or tau < 1:
            raise BadArgument("tau", tau, "must be an integer >= 1 (calls)")
        self.tau, self.calls, self.threshold = tau, 0, 0.0

    def compress(self, u: Tensor, density: float) -> Sparse:
        exact = self.calls % self.tau == 0
        self.calls += 1
        if exact:
            s = select_topk(u, k_of(u.numel(), density))
            self.threshold = float(s.val.abs().min()) if len(s) else 0.0
            return s
        idx = (u.abs() >= self.threshold).nonzero().view(-1)
        return Sparse(idx, u.index_select(0, idx), u.numel())

    def state_dict(self) -> dict:
        return {**super().state_dict(), "calls": self.calls, "threshold": self.threshold}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.calls, self.threshold = int(state.get("calls", 0)), float(state.get("threshold", 0.0))
