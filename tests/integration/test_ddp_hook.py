"""The DDP communication hook (ssgd.ddp): the example script under torchrun, and a hook step == a trainer step.

All on CPU with gloo: the example runs as a user runs it (`torchrun --nproc-per-node 2`, marked `slow`); the
equality tests run in forked ranks of one gloo group (tests/torch_ranks.py), each under a timeout.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import group_options
from ddp_steps import STEPS, buckets_async_and_blocking, hook_error, same_bits, trainer_and_hook
from torch_ranks import run_ranks

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("compressor", group_options("compressor"))     # every scheme in conf/compressor/
def test_with_one_bucket_a_hook_step_equals_the_trainer_step(compressor, tmp_path):
    """One bucket covers FNN-3 (bucket_cap_mb=100, also after DDP's first-iteration rebuild, which reorders the
    bucket): after 4 steps the DDP model's weights and every rank's residual equal the trainer's, bitwise (both
    on torch.distributed, so the dense all_reduce is the same too)."""
    P = 2
    out = run_ranks(P, trainer_and_hook, (compressor, str(tmp_path), {"bucket_cap_mb": 100}), timeout=120)
    for rank, r in enumerate(out):
        assert r["buckets"] == 1 and r["calls"] == STEPS
        assert all(same_bits(a, b) for a, b in zip(r["trainer"], r["hook"])), f"rank {rank}: weights differ"
        assert same_bits(r["trainer_e"], r["hook_e"]), f"rank {rank}: residuals differ"
    assert all(same_bits(a, b) for a, b in zip(out[0]["hook"], out[1]["hook"]))   # the ranks agree


@pytest.mark.parametrize("compressor", ["gtopk", "oktopk"])      # oktopk: each bucket keeps its own thresholds
def test_several_buckets_train_and_the_ranks_agree(tmp_path, compressor):
    """bucket_cap_mb=0.2 with find_unused_parameters=True: FNN-3's first layer in one bucket, the rest in another
    (whose gradients DDP orders last-layer first). Each bucket has its own selection and residual, so this is not
    the trainer's whole-model step; the ranks must still agree bitwise."""
    args = {"bucket_cap_mb": 0.2, "find_unused_parameters": True}
    out = run_ranks(2, trainer_and_hook, (compressor, str(tmp_path), args), timeout=120)
    assert out[0]["buckets"] == 2 and out[0]["calls"] == 2 * STEPS
    assert all(same_bits(a, b) for a, b in zip(out[0]["hook"], out[1]["hook"]))
    assert all(np.isfinite(a).all() for a in out[0]["hook"])
    assert not all(same_bits(a, b) for a, b in zip(out[0]["trainer"], out[0]["hook"]))


@pytest.mark.parametrize("how", ["pair", "blocking"])
@pytest.mark.parametrize("compressor", ["gtopk", "topk", "gaussiank"])
def test_on_three_ranks_the_pair_and_the_blocking_hook_equal_the_trainer(compressor, how, tmp_path):
    """P = 3 (gTop-k's tree with a rank that has no partner in the last round): one bucket, the hook attached as
    PyTorch's hooks are (`register_comm_hook(hook_state(...), sparse_hook)`, asynchronous) or with overlap=False;
    weights and residuals equal the trainer's bitwise after STEPS steps."""
    out = run_ranks(3, trainer_and_hook, (compressor, str(tmp_path), {"bucket_cap_mb": 100}, "cpu", how), timeout=120)
    for rank, r in enumerate(out):
        assert r["buckets"] == 1 and r["calls"] == STEPS and r["overlap"] == (how == "pair")
        assert all(same_bits(a, b) for a, b in zip(r["trainer"], r["hook"])), f"rank {rank}: weights differ"
        assert same_bits(r["trainer_e"], r["hook_e"]), f"rank {rank}: residuals differ"


# make test-fast runs two of the six (P = 3 with the strict rule: a tree with an unpaired rank and the
# conservation check; P = 2 with Top-k); make test runs all six
@pytest.mark.parametrize("compressor, P", [
    (c, P) if (c, P) in {("gtopk:strict", 3), ("topk", 2)} else pytest.param(c, P, marks=pytest.mark.slow)
    for P in (2, 3) for c in ("gtopk", "gtopk:strict", "topk")])
def test_several_buckets_overlap_backward_and_keep_order_bits_and_error_feedback(compressor, P):
    """bucket_cap_mb=0.2 with find_unused_parameters=True: two buckets, rebuilt after the first iteration.
    Asynchronous hook: (1) it returns to backward before reducing: the first bucket's reduction is held until
    backward has computed parameter 0's gradient (in the other bucket), which a hook that reduces inside the call
    (overlap=False, the control) never lets happen; (2) every rank reduced the same buckets in the same order, each
    step covering every parameter once; (3) its weights equal the blocking hook's bitwise, on every rank, and the
    ranks agree; (4) error feedback is conserved per step: sum over ranks of (g + e_before) = P * average +
    sum over ranks of e_after (no bucket loses or double-counts a residual), to float32 rounding. (4) does not hold
    for gTop-k's default `released` residual rule once a tree has intermediate merges (P = 3: a value dropped in a
    merge is neither applied nor kept, ssgd.comm.collectives.gtopk), so there it is checked with the `strict` rule."""
    args = {"bucket_cap_mb": 0.2, "find_unused_parameters": True}
    out = run_ranks(P, buckets_async_and_blocking, (compressor, args), timeout=150)
    for rank, r in enumerate(out):
        a, b = r["async"], r["blocking"]
        assert a["passed"] == [True] and b["passed"] == [False], f"rank {rank}: {a['passed']} {b['passed']}"
        assert a["buckets"] == 2 and a["calls"] == 2 * STEPS
        assert a["keys"] == out[0]["async"]["keys"], f"rank {rank} reduced its buckets in another order"
        for step in range(STEPS):
            keys = a["keys"][2 * step:2 * step + 2]
            assert sorted(i for k in keys for i in k) == list(range(a["params"]))
        assert all(same_bits(x, y) for x, y in zip(a["weights"], b["weights"])), f"rank {rank}: async != blocking"
        assert all(same_bits(x, y) for x, y in zip(a["weights"], out[0]["async"]["weights"]))
    if compressor == "gtopk" and P > 2:
        return
    for step in range(STEPS):
        rows = [r["async"]["steps"][step] for r in out]
        sent = sum(x["g"].astype(np.float64) + x["e0"] for x in rows)
        kept = P * rows[0]["avg"].astype(np.float64) + sum(x["e1"].astype(np.float64) for x in rows)
        assert all(same_bits(x["avg"], rows[0]["avg"]) for x in rows)
        scale = max(np.abs(sent).max(), 1e-12)
        assert np.abs(sent - kept).max() <= 1e-5 * scale, (step, np.abs(sent - kept).max(), scale)
        assert np.abs(rows[0]["e1"]).max() > 0            # a residual is kept (the check is not vacuous)


def test_an_error_on_the_communication_thread_reaches_backward():
    """The thread completes the bucket's future with the exception: loss.backward() raises it on every rank
    instead of waiting forever, and the next step is served."""
    for text in run_ranks(2, hook_error, (), timeout=60):
        assert "bucket refused" in text and text.endswith("| calls 1"), text


def bf16_model_step(rank: int, P: int, values, narrow=None) -> dict:
    """One DDP step of a bf16 MLP (d = 1,560) with the topk hook at density 0.1 (k = 156)."""
    from torch.nn.parallel import DistributedDataParallel

    import ssgd.ddp

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 50), torch.nn.ReLU(), torch.nn.Linear(50, 10)).to(torch.bfloat16)
    ddp = DistributedDataParallel(model, bucket_cap_mb=100)
    extra = {} if narrow is None else {"narrow_indices": narrow}
    hook = ssgd.ddp.register(ddp, compressor="topk", density=0.1, seed=0, values=values, **extra)
    x = torch.randn(8, 20, generator=torch.Generator().manual_seed(rank)).to(torch.bfloat16)
    ddp(x).float().pow(2).mean().backward()
    return {"bytes": hook.stats.bytes_sent, "entries": hook.stats.entries, "wire": hook.scheme.collective.wire.values,
            "grads": [p.grad.float().numpy() for p in model.parameters()]}


@pytest.mark.parametrize("values, narrow, wire, entry_bytes", [
    (None, False, "bf16", 6), ("fp32", False, "fp32", 8),     # int32 indices
    (None, None, "bf16", 4), ("fp32", None, "fp32", 6),       # the default: uint16 indices (d = 1,560 <= 2^16)
])
def test_a_bf16_model_sends_bf16_values(values, narrow, wire, entry_bytes):
    """A bf16 model's hook sends bf16 values unless told fp32, with 2-byte indices by default (the bucket
    has d = 1,560 <= 2^16 elements); the ranks agree on the averaged gradient."""
    out = run_ranks(2, bf16_model_step, (values, narrow), timeout=120)
    for r in out:
        assert r["wire"] == wire and r["entries"] == 156
        assert r["bytes"] == entry_bytes * 156                  # P = 2: one block to the other rank
    assert all(same_bits(a, b) for a, b in zip(out[0]["grads"], out[1]["grads"]))


@pytest.mark.slow
def test_the_example_trains_under_torchrun(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(ROOT / "examples" / "ddp_gtopk.py"), "--steps", "150"],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = re.search(r"gtopk density 0.001 on 2 ranks \(gloo\): validation accuracy ([0-9.]+); achieved density "
                  r"0.00100; 238,800 bytes and 150 messages", proc.stdout)
    assert m is not None, proc.stdout
    assert float(m.group(1)) > 0.5, proc.stdout          # chance is 0.1


def test_relayout_moves_each_parameters_residual_to_its_new_bucket():
    """Without a process group: a bucket (0, 1, 2) with a known residual, then DDP's rebuilt buckets (2,) and
    (0, 1): every parameter's residual entries move, and the old bucket is dropped."""
    from ssgd.ddp import SparseHook
    from ssgd.scheme_config import build_scheme
    from ssgd.tools.scheme_costs import load_config

    params = [torch.nn.Parameter(torch.zeros(n)) for n in (3, 2, 4)]
    config = load_config("topk")
    hook = SparseHook(build_scheme(config, 0), 0.5, params, 0, config)
    first = hook._new_bucket((0, 1, 2), torch.device("cpu"))
    first.compression.memory.load_state_dict({"e": torch.arange(9, dtype=torch.float32)})
    last = hook._new_bucket((2,), torch.device("cpu"))
    assert torch.equal(last.compression.memory.state_dict()["e"], torch.tensor([5.0, 6, 7, 8]))
    assert (0, 1, 2) in hook.buckets                        # still owns parameters 0 and 1
    head = hook._new_bucket((0, 1), torch.device("cpu"))
    assert torch.equal(head.compression.memory.state_dict()["e"], torch.tensor([0.0, 1, 2, 3, 4]))
    assert set(hook.buckets) == {(2,), (0, 1)}


def test_a_sparse_average_goes_straight_to_ddps_layout():
    """`_Bucket.in_buffer` maps positions of the bucket's model-order vector to DDP's buffer, whose parameters
    lie in another order: scattering there gives the buffer that copying a model-order average part by part
    gives (every position, both orders of the index set); a gradient that is not a view of the buffer: None."""
    from ssgd.ddp import SparseHook
    from ssgd.scheme_config import build_scheme
    from ssgd.payload import Sparse
    from ssgd.tools.scheme_costs import load_config

    sizes = (3, 2, 4)
    params = [torch.nn.Parameter(torch.zeros(n)) for n in sizes]
    config = load_config("topk")
    bucket = SparseHook(build_scheme(config, 0), 0.5, params, 0, config)._new_bucket((0, 1, 2), torch.device("cpu"))
    positions = [2, 0, 1]                                     # DDP's order: the last parameter first
    buf = torch.full((9,), -1.0)
    grads = list(buf.split([sizes[p] for p in positions]))
    total = Sparse(torch.tensor([8, 0, 4, 3, 2, 6]), torch.arange(1.0, 7.0), 9)
    want = buf.clone()
    average = total.to_dense(scale=3)                         # model order
    for p, view in zip(positions, want.split([sizes[p] for p in positions])):
        view.copy_(average[bucket.offsets[p]:bucket.offsets[p] + sizes[p]])
    for order in (torch.arange(6), torch.arange(5, -1, -1)):
        at = bucket.in_buffer(total.idx[order], positions, grads, buf)
        assert at is not None
        got = Sparse(at, total.val[order], 9).to_dense(scale=3, out=buf.clone())
        assert torch.equal(got, want), (got, want)
    assert bucket.in_buffer(total.idx, positions, [grads[0], torch.zeros(3), grads[2]], buf) is None
    for kernel in (True, False):                              # decode_into: the C kernel, then torch
        out = buf.clone()
        views = list(out.split([sizes[p] for p in positions]))
        with pytest.MonkeyPatch.context() as patch:
            if not kernel:
                patch.setattr("ssgd.native.scatter_segments", lambda *a, **kw: False)
            assert bucket.decode_into(total, 3, positions, views, out)
        assert torch.equal(out, want), (kernel, out, want)
    out = buf.clone()
    assert not bucket.decode_into(total, 3, positions, [grads[0], torch.zeros(3), grads[2]], out)
    assert torch.equal(out, buf)


EXIT_SCRIPT = """
import atexit, threading
import torch, torch.distributed as dist
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
import ssgd.ddp
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(50, 4))
state = ssgd.ddp.register(model, compressor="gtopk", density=0.1)
model(torch.randn(8, 50)).sum().backward()
alive = lambda: [t.name for t in threading.enumerate() if t.name == "ssgd-ddp-comm"]
assert alive() == ["ssgd-ddp-comm"], alive()
atexit._run_exitfuncs()      # what the interpreter runs first at exit
assert alive() == [], alive()
print("closed")
"""


@pytest.mark.slow
def test_the_communication_thread_is_closed_at_exit_without_close():
    """A script that never calls close(): the hook's atexit handler stops its thread before the interpreter
    tears torch down (left running, about one exit in three aborted with "terminate called without an
    active exception", status 134)."""
    proc = subprocess.run([sys.executable, "-c", EXIT_SCRIPT], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert (proc.returncode, proc.stdout.strip()) == (0, "closed"), proc.stderr[-3000:]
