"""One Top-k budget shared by the selections of several parts of a model (FSDP's units, one selection each).

Top-k with error feedback over the whole flattened model (Shi et al., ICDCS 2019, arXiv:1901.04359; TopK-SGD)
sends the k = density x d entries of largest magnitude wherever they lie. A model whose parts select one at a
time (FSDP2 reduce-scatters module by module during backward) cannot see every part's u before the first part
must send. `GlobalBudget` gives each part the share it held in the previous step's global top-k instead:

  * each member (a part, numbered in the order it joins) selects the k_m entries of largest |u_m| and reports
    the K = density x d largest magnitudes of its u_m (d: the sum of the members' sizes, K at most its size);
  * when a member calls again (a new step has begun), the reports of the step before are combined: t is the
    K-th largest of all reported magnitudes, and each member's k_m becomes its count of magnitudes >= t (at least
    1): the parts' shares of the global top-k of that step's u. Until a member has one such share, k_m is
    density x n_m (the per-part rule, `k_of`). A round in which a member joined after others had reported (the
    first step, when members join at their first call) gives no shares: its early reports were of a smaller K.

The shares follow u with one step's lag; ties at t may give a sum of k_m a few entries above K. Every rank keeps
its own budget (its u differs), so k_m differs between ranks; collectives that exchange counts (the sparse
reduce-scatter) carry that. At a step's end every member has reported: `state_dict` then closes the round (what the
next call would do, with the same reports) and gives a member's share alone, so a checkpoint holds one integer per
member and rank, and a run resumed from it selects as the run that went on.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ssgd.compress.sparse import k_of, select_topk
from ssgd.payload import Sparse


class GlobalBudget:
    """The shared share-keeping of the module docstring. `join(numel)` gives a member its number."""

    def __init__(self, density: float) -> None:
        if not 0 < density <= 1:
            raise ValueError(f"GlobalBudget: density={density!r} must be in (0, 1]")
        self.density = density
        self.sizes: list[int] = []
        self.reports: dict[int, Tensor] = {}     # member -> its K largest |u_m| of the current round
        self.shares: dict[int, int] = {}         # member -> k_m, from the last completed round
        self.stale = False                       # a member joined during the round in progress

    def join(self, numel: int) -> int:
        """A new member of `numel` entries; returns its number."""
        self.sizes.append(int(numel))
        self.stale = self.stale or bool(self.reports)
        return len(self.sizes) - 1

    @property
    def K(self) -> int:
        """density x (the members' total size), at least 1 (`k_of`)."""
        return k_of(sum(self.sizes), self.density)

    def k_for(self, member: int) -> int:
        """This step's k_m; a member calling again first closes the previous round (module docstring)."""
        if member in self.reports:
            self.close_round()
        n = self.sizes[member]
        return min(self.shares.get(member, k_of(n, self.density)), n)

    def select(self, member: int, u: Tensor) -> Sparse:
        """The k_m entries of u of largest magnitude (increasing indices), and this member's report."""
        k = self.k_for(member)
        top = select_topk(u, min(self.K, u.numel()))
        mags = top.val.abs()
        self.reports[member] = mags
        if k < top.idx.numel():
            keep = torch.topk(mags, k, sorted=False).indices.sort().values
            return Sparse(top.idx.index_select(0, keep), top.val.index_select(0, keep), u.numel())
        return top

    def close_round(self) -> None:
        """The shares from the reports of the round in progress (none: nothing changes)."""
        if not self.reports or self.stale:
            self.reports, self.stale = {}, False
            return
        mags = torch.cat(list(self.reports.values()))
        K = min(self.K, mags.numel())
        t = torch.topk(mags, K, sorted=False).values.min()
        self.shares = {m: max(int((r >= t).sum()), 1) for m, r in self.reports.items()}
        self.reports = {}

    def state_dict(self, member: int) -> dict:
        """{"share": member `member`'s k for the next step, or -1 before it has one}, at a step's end (the round
        is closed first)."""
        self.close_round()
        return {"share": self.shares.get(member, -1)}

    def load_state_dict(self, member: int, state: dict) -> None:
        self.reports.pop(member, None)
        if int(state["share"]) >= 0:
            self.shares[member] = int(state["share"])
