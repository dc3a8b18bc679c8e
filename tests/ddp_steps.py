"""One scenario shared by the DDP-hook tests on CPU (tests/integration/test_ddp_hook.py) and on GPUs (tests/gpu/):
the trainer and a DDP model with the ssgd.ddp hook take the same STEPS steps in one rank of a process group."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from conftest import make_cfg

STEPS = 4


def trainer_and_hook(rank: int, P: int, compressor: str, run_dir: str, ddp_args: dict, device: str = "cpu") -> dict:
    """STEPS steps of the trainer (TorchWorld) and of DDP + ssgd.ddp on the same model, batches and LR, in rank
    `rank` of an initialised process group; `device`: cpu, or cuda (this rank's current GPU)."""
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
    hook = ssgd.ddp.register(ddp, compressor=compressor, density=0.01, seed=cfg.seed)
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
        e = bucket.sync.memory.state_dict().get("e", torch.zeros(sum(hook.params[i].numel() for i in bucket.key),
                                                                 device=model_device))
        for pos in bucket.key:
            n = hook.params[pos].numel()
            residual[offsets[pos]:offsets[pos] + n] = e[bucket.offsets[pos]:bucket.offsets[pos] + n]
    trainer_e = trainer.replicas[rank].sync.memory.state_dict().get("e", torch.zeros(trainer.d, device=model_device))
    return {"trainer": [p.detach().cpu().numpy() for p in trainer.params],
            "hook": [p.detach().cpu().numpy() for p in model.parameters()],
            "trainer_e": trainer_e.cpu().numpy(), "hook_e": residual.cpu().numpy(),
            "buckets": len(hook.buckets), "calls": hook.stats.calls}


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.int32), b.view(np.int32))


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.int32), b.view(np.int32))
