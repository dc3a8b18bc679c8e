"""One scenario shared by the DDP-hook tests on CPU (tests/integration/test_ddp_hook.py) and on GPUs (tests/gpu/):
the trainer and a DDP model with the ssgd.ddp hook take the same STEPS steps in one rank of a process group."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from conftest import make_cfg

STEPS = 4


def trainer_and_hook(rank: int, P: int, compressor: str, run_dir: str, ddp_args: dict, device: str = "cpu",
                     how: str = "register") -> dict:
    """STEPS steps of the trainer (TorchWorld) and of DDP + ssgd.ddp on the same model, batches and LR, in rank
    `rank` of an initialised process group; `device`: cpu, or cuda (this rank's current GPU). `how` the hook is
    attached: register (asynchronous, the default), pair (`model.register_comm_hook(hook_state(...),
    sparse_hook)`), blocking (register with overlap=False)."""
    from torch.nn.parallel import DistributedDataParallel

    import ssgd.ddp
    from ssgd.run import build
    from ssgd.loop.replica import loss_and_correct
    from ssgd.worlds.torch_dist import TorchWorld

    cfg = make_cfg("backend=torch", f"compressor={compressor}", "compressor.density=0.01",
                   "compressor.density_warmup=[]", f"cluster.world_size={P}", f"trainer.max_steps={STEPS}",
                   "seed=3", "trainer.eval_every=1000",
                   f"device={'cuda:%d' % torch.cuda.current_device() if device == 'cuda' else 'cpu'}")
    trainer, writer, _ = build.trainer(cfg, Path(run_dir), TorchWorld.joined())
    try:
        trainer.fit()
    finally:
        writer.close()
    data = trainer.data
    model = build.model(cfg, data, cfg.seed)                   # the trainer's initial weights
    model_device = next(model.parameters()).device
    ddp = DistributedDataParallel(model, **ddp_args)
    if how == "pair":
        hook = ssgd.ddp.hook_state(ddp, compressor=compressor, density=0.01, seed=cfg.seed)
        ddp.register_comm_hook(hook, ssgd.ddp.sparse_hook)
    else:
        hook = ssgd.ddp.register(ddp, compressor=compressor, density=0.01, seed=cfg.seed, overlap=how != "blocking")
    opt = build.optimizer_factory(cfg)(list(model.parameters()))
    loader = trainer.loader.__class__(data.x_train, data.y_train, P, cfg.trainer.batch_size, cfg.seed)
    loader.set_epoch(0)
    for it in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = trainer.schedule(it / loader.steps_per_epoch)
        x, y = (t.to(model_device) for t in loader.batch(it, rank))
        opt.zero_grad(set_to_none=True)
        loss_and_correct(ddp(x), y)[0].backward()
        opt.step()
    residual = torch.zeros(trainer.d, device=model_device)
    offsets = np.cumsum([0] + [p.numel() for p in trainer.params])
    for bucket in hook.buckets.values():
        e = bucket.compression.memory.state_dict().get("e", torch.zeros(sum(hook.params[i].numel() for i in bucket.key),
                                                                 device=model_device))
        for pos in bucket.key:
            n = hook.params[pos].numel()
            residual[offsets[pos]:offsets[pos] + n] = e[bucket.offsets[pos]:bucket.offsets[pos] + n]
    trainer_e = trainer.sync.ranks[rank].memory.state_dict().get("e", torch.zeros(trainer.d, device=model_device))
    return {"trainer": [p.detach().cpu().numpy() for p in trainer.params],
            "hook": [p.detach().cpu().numpy() for p in model.parameters()],
            "trainer_e": trainer_e.cpu().numpy(), "hook_e": residual.cpu().numpy(),
            "buckets": len(hook.buckets), "calls": hook.stats.calls, "overlap": hook.overlap}


def model_residual(hook, d: int, device) -> torch.Tensor:
    """Every bucket's residual e of `hook`, laid out in the model's parameter order (zeros: no residual)."""
    offsets = np.cumsum([0] + [p.numel() for p in hook.params])
    residual = torch.zeros(d, device=device)
    for bucket in hook.buckets.values():
        e = bucket.compression.memory.state_dict().get("e")
        for pos in bucket.key:
            n = hook.params[pos].numel()
            if e is not None:
                residual[offsets[pos]:offsets[pos] + n] = e[bucket.offsets[pos]:bucket.offsets[pos] + n]
    return residual


def buckets_async_and_blocking(rank: int, P: int, compressor: str, ddp_args: dict, device: str = "cpu") -> dict:
    """STEPS steps of two DDP models from the same weights and batches, one with the asynchronous hook, one with
    overlap=False, in rank `rank` (`compressor`: a conf/compressor name, or gtopk:strict for the tree with the
    strict residual rule). Per step of the asynchronous one: this rank's local gradient g (a copy of the
    module, no DDP), the residual before (e0) and after (e1) and the averaged gradient DDP left (avg), all in
    model order; the bucket keys the hook reduced, in order; and `passed`: whether the first bucket's reduction,
    held until backward has computed parameter 0's gradient (a later bucket), was let through: only when the
    hook returned to backward before reducing (overlap), else it gives up after 1 s."""
    import copy
    import dataclasses
    import threading

    from torch.nn.parallel import DistributedDataParallel

    import ssgd.ddp
    from ssgd.comm.collectives.gtopk import GTopKAllreduce
    from ssgd.loop.replica import loss_and_correct
    from ssgd.run import build

    scheme, _, rule = compressor.partition(":")
    cfg = make_cfg(f"compressor={scheme}", f"cluster.world_size={P}", "seed=3",
                   f"device={'cuda:%d' % torch.cuda.current_device() if device == 'cuda' else 'cpu'}")
    data = build.dataset(cfg)
    out: dict = {}
    for overlap in (True, False):
        model = build.model(cfg, data, cfg.seed)
        dev = next(model.parameters()).device
        local = copy.deepcopy(model)
        ddp = DistributedDataParallel(model, **ddp_args)
        hook = ssgd.ddp.register(ddp, compressor=scheme, density=0.01, seed=cfg.seed, overlap=overlap)
        if rule:                                          # gtopk:strict -- the tree with the strict residual rule
            hook.scheme = dataclasses.replace(hook.scheme, collective=GTopKAllreduce(residual=rule))
        keys, passed, reduce = [], [], hook._reduce
        gate = threading.Event()

        def traced(job, reduce=reduce, keys=keys, gate=gate, passed=passed, overlap=overlap):
            if 0 not in job.positions and not passed:     # the step's first bucket waits for parameter 0's gradient
                passed.append(gate.wait(10.0 if overlap else 1.0))
            keys.append(tuple(sorted(job.positions)))
            reduce(job)
        hook._reduce = traced
        hook.params[0].register_hook(lambda grad, gate=gate: gate.set())   # runs on backward's thread
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        d = sum(p.numel() for p in hook.params)
        steps = []
        gen = torch.Generator().manual_seed(rank)
        for it in range(STEPS):
            pick = torch.randint(len(data.y_train), (32,), generator=gen)
            x, y = data.x_train[pick].to(dev), data.y_train[pick].to(dev)
            local.load_state_dict(model.state_dict())
            local.zero_grad(set_to_none=True)
            loss_and_correct(local(x), y)[0].backward()
            g = torch.cat([p.grad.reshape(-1) for p in local.parameters() if p.requires_grad])
            e0 = model_residual(hook, d, dev)
            opt.zero_grad(set_to_none=True)
            loss_and_correct(ddp(x), y)[0].backward()
            avg = torch.cat([p.grad.reshape(-1) for p in hook.params])
            steps.append({k: v.cpu().numpy() for k, v in
                          {"g": g, "e0": e0, "e1": model_residual(hook, d, dev), "avg": avg}.items()})
            opt.step()
        hook.close()
        out["async" if overlap else "blocking"] = {
            "weights": [p.detach().cpu().numpy() for p in model.parameters()], "steps": steps, "keys": keys,
            "calls": hook.stats.calls, "buckets": len(hook.buckets), "params": len(hook.params),
            "passed": passed}
    return out


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.int32), b.view(np.int32))


def hook_error(rank: int, P: int) -> str:
    """A bucket whose reduction raises on the communication thread: backward raises it (the future carries it);
    the thread goes on serving the next step. Returns the error text."""
    from torch.nn.parallel import DistributedDataParallel

    import ssgd.ddp

    torch.manual_seed(0)
    ddp = DistributedDataParallel(torch.nn.Linear(8, 4))
    hook = ssgd.ddp.register(ddp, compressor="topk", density=0.5)
    reduce = hook._reduce

    def failing(job):
        raise ValueError("bucket refused")
    hook._reduce = failing
    try:
        ddp(torch.randn(2, 8)).sum().backward()
        text = "no error"
    except RuntimeError as exc:
        text = str(exc)
    hook._reduce = reduce
    ddp(torch.randn(2, 8)).sum().backward()      # DDP may refuse to go on after a failed step: then this raises
    hook.close()
    return text + f" | calls {hook.stats.calls}"
