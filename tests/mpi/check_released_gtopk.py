"""The released gTop-k baseline of bench/comm.py against the package's collective, on real MPI ranks.

Run as `mpiexec -n P python -m mpi4py tests/mpi/check_released_gtopk.py` (P a power of two).
For each case every rank draws its own u, takes its exact top-k, and runs both the package's
GTopKAllreduce and bench/released_gtopk.py (a re-implementation of hclhkbu/gtopkssgd's
`gtopk_sparse_allreduce`). They must agree on every rank:
  * the global index set, exactly (compared as sets: the released code returns no particular order);
  * the global values, to float32 rounding (the released code sums in float64 after the first
    round and rounds to float32 when it packs; the package sums in float32);
  * the rank's sent entries (released: `included`, positions of its original indices in the
    global set; package: its payload restricted to the result's support), exactly;
  * the decoded averaged gradient (released: its reused buffer; package: the trainer's decode), to rounding.
Cases: independent N(0, 1) per rank (little overlap between ranks), and a shared component plus
per-rank noise (large overlap: the "sum common indices first" step decides the result).
Verdicts are combined with one allreduce, so a failing rank cannot strand the others; exit 1 on
every rank if any check failed anywhere.
"""
from __future__ import annotations

import sys
import traceback
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import ours  # noqa: E402
import released_gtopk as released  # noqa: E402

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
torch.set_num_threads(1)


def make_u(case: str, d: int) -> torch.Tensor:
    mine = torch.randn(d, generator=torch.Generator().manual_seed(100 + rank))
    if case == "independent":
        return mine
    shared = torch.randn(d, generator=torch.Generator().manual_seed(7))
    return shared + 0.3 * mine


def close(a: np.ndarray, b: np.ndarray) -> bool:
    scale = float(np.abs(b).max()) if b.size else 1.0
    return bool(np.allclose(a, b, rtol=1e-5, atol=1e-6 * scale))


def check(case: str, d: int, k: int) -> list[str]:
    u = make_u(case, d)
    payload = ours.select(u, k)
    idx, val = ours.payload_arrays(payload)
    reduced, _ = ours.run(ours.gtopk(), payload, comm)
    given = val.copy()
    v_g, i_g, included = released.gtopk_sparse_allreduce(comm, given, idx, storage={})
    problems = []
    o_idx, o_val = ours.global_set(reduced)
    r_idx = i_g.astype(np.int64)
    if len(set(r_idx.tolist())) != k or set(r_idx.tolist()) != set(o_idx.tolist()):
        problems.append(f"index sets differ: {len(set(r_idx.tolist()) ^ set(o_idx.tolist()))} indices")
    else:
        r_sorted = v_g[np.argsort(r_idx)]
        o_sorted = o_val[np.argsort(o_idx)]
        if not close(r_sorted.astype(np.float64), o_sorted.astype(np.float64)):
            problems.append(f"values differ by up to {np.abs(r_sorted - o_sorted).max():.3g}")
    if set(idx[included].tolist()) != set(ours.sent_indices(payload, reduced).tolist()):
        problems.append("the sent entries (released `included`) differ")
    dense_released = released.decode(torch.empty(d), v_g, i_g, P).numpy()
    dense_ours = ours.decode(reduced, ours.make_params(d)).numpy()
    if not close(dense_released.astype(np.float64), dense_ours.astype(np.float64)):
        problems.append("decoded averages differ")
    if given.any():
        problems.append("the released code must have zeroed its input values (it does, in place)")
    every = comm.allgather(sorted(r_idx.tolist()))
    if any(e != every[0] for e in every):
        problems.append("ranks disagree on the released global set")
    union = set().union(*comm.allgather(set(idx.tolist())))
    overlap = P * k - len(union)
    if case == "shared" and P > 1 and overlap < k // 2:
        problems.append(f"case 'shared' overlaps too little to test the merge's sums ({overlap} common entries)")
    return [f"{case} d={d} k={k}: {p}" for p in problems]


def main() -> int:
    cases = [("independent", 20_000, 200), ("shared", 20_000, 200), ("shared", 3_000, 1), ("independent", 1 << 18, 262)]
    failed = []
    for case, d, k in cases:
        try:
            failed += check(case, d, k)
        except Exception:
            failed.append(f"{case} d={d} k={k}: {traceback.format_exc()}")
    every = comm.allgather(failed)
    if rank == 0:
        for r, fails in enumerate(every):
            for f in fails:
                print(f"rank {r}: FAIL {f}")
        n_failed = sum(len(f) for f in every)
        print(f"P={P}: {len(cases)} cases, released gTop-k == ours: {'yes' if not n_failed else 'NO'} "
              f"({n_failed} failures)")
    return 1 if any(every) else 0


if __name__ == "__main__":
    sys.exit(main())
