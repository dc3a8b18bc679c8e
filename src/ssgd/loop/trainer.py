"""The S-SGD loop: forward/backward on every rank, compress, aggregate, one update, evaluate, log.

Data-parallel synchronous SGD with weak scaling (batch size per worker, as in both released trainers,
hclhkbu/gtopkssgd and hclhkbu/GaussianK-SGD): each step,
every rank r computes g_r on its own micro-batch, compresses u_r = g_r + e_r, the scheme's
collective aggregates, every rank updates its residual, and the averaged gradient drives one SGD
step (momentum and weight decay act after aggregation, as released). The trainer has no
compressor- or backend-specific branches: the scheme and the world carry those.

Runs that never lie: the summary's means are running totals that checkpoints carry, so a resumed run
reports what the uninterrupted run reports; a checkpoint is never written from non-finite state (a
diverged run keeps its last good one and records `diverged_at_step`); a stop request (SIGTERM, SIGINT:
`ssgd.loop.stop`) ends the run at the next step boundary with a checkpoint and `ssgd.errors.Interrupted`.

The averaged gradient is decoded into one persistent flat buffer whose views are the parameters'
.grad (`ssgd.loop.decode.Decoder`): no d-sized allocation per step, and a sparse result costs O(k).
"""
from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from ssgd.loop.capture import Capture
from ssgd.loop.checkpoint import Resume, save_checkpoint
from ssgd.loop.decode import ParamGrads
from ssgd.comm.ops import RankLog
from ssgd.config import TrainConfig
from ssgd.data.base import TensorData
from ssgd.data.loader import ShardedLoader
from ssgd.errors import Interrupted
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.loop.replica import LocalStep, Replica, loss_and_correct
from ssgd.loop.schedule import LRSchedule
from ssgd.loop.stop import StopRequest, exit_status, meaning
from ssgd.loop.sync import RankSync, Scheme, counts_of
from ssgd.utils.metrics import MetricWriter
from ssgd.utils.progress import Progress
from ssgd.utils.seeding import rank_generator
from ssgd.worlds.base import World


class Trainer:
    """Runs S-SGD for one scheme on one world; `fit()` returns the summary (also written)."""

    def __init__(self, cfg: TrainConfig, world: World, model: nn.Module, data: TensorData, scheme: Scheme,
                 make_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer], schedule: LRSchedule,
                 net: AlphaBeta, writer: MetricWriter, seed: int, run_dir: Path, labels: dict | None = None,
                 capture: Capture | None = None, identity: dict | None = None, resume: Resume | None = None,
                 stop: StopRequest | None = None) -> None:
        self.cfg, self.world, self.data, self.scheme, self.capture = cfg, world, data, scheme, capture
        self.net, self.writer, self.run_dir, self.labels = net, writer, Path(run_dir), labels or {}
        self.identity = identity or {}                 # saved in checkpoints (ssgd.loop.checkpoint.check_fits)
        self.stop = stop or StopRequest()
        self.stop_seen = 0                             # the stop signal any rank had at the last step's gather
        self.P = world.size
        # first: a global batch larger than the data fails here, before P ranks' state is allocated
        self.loader = ShardedLoader(data.x_train, data.y_train, self.P, cfg.batch_size, seed)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.d = sum(p.numel() for p in self.params)
        self.device = self.params[0].device            # the model arrives on its device (build.model)
        modules = world.replicate(model)
        self.replicas = {r: Replica(m, self.params, RankSync(scheme, r, self.d, self.device,
                                                                 [p.shape for p in self.params]),
                                    rank_generator(seed, r, "dropout", self.device))
                         for r, m in zip(world.local_ranks, modules)}
        self.grads = ParamGrads(self.params)
        self.optimizer = make_optimizer(self.params)
        self.schedule = schedule
        self.epoch, self.step_count = 0, 0
        self.diverged_at: int | None = None     # step whose training loss (or, at a checkpoint, state) was not finite
        # the run's running sums, carried by checkpoints: every step metric since step 1 (`summed` steps),
        # the metrics.jsonl interval not yet logged, and the last evaluation
        self.totals: dict[str, float] = defaultdict(float)
        self.summed = 0
        self.interval: dict[str, float] = defaultdict(float)
        self.n_interval = 0
        self.val: dict[str, float] = {}
        if resume is not None:
            self._restore(resume)

    # -- one step --------------------------------------------------------------------------------
    def step(self, it: int, density: float) -> dict[str, float]:
        """One S-SGD step on batch `it` of the current epoch; returns its metrics (all ranks)."""
        t0 = time.perf_counter()
        local: list[LocalStep] = self.world.map(
            lambda r: self.replicas[r].step(*self.loader.batch(it, r), density))
        t1 = time.perf_counter()
        results, logs = self.world.collective(self.scheme.collective_for(self.d, density), [s.payload for s in local])
        t2 = time.perf_counter()
        aggregated = self.grads.set(results[0])        # the .grad are views of it
        capture_s = self._observe(density, local, results, aggregated)
        settle_s = []
        for r, s, res in zip(self.world.local_ranks, local, results):
            ts = time.perf_counter()
            self.replicas[r].settle(s.payload, res)
            settle_s.append(time.perf_counter() - ts)
        self._apply()
        t3 = time.perf_counter()
        return self._step_metrics(local, logs, settle_s, density, wall=(t1 - t0, t2 - t1, t3 - t2 - capture_s))

    def _observe(self, density: float, local: list[LocalStep], results: list, aggregated: Tensor) -> float:
        """Capture (analysis, off by default) between the collective and the residual update; returns
        its seconds, which are kept out of the step's timings."""
        if self.capture is None or not self.capture.wants(self.step_count + 1):
            return 0.0
        start = time.perf_counter()
        self.capture.observe(self.step_count + 1, self.epoch, density, self.world, [s.u for s in local],
                             [s.payload for s in local], results, aggregated)
        return time.perf_counter() - start

    def _apply(self) -> None:
        """One optimizer step on the parameters' .grad (set by `self.grads.set`)."""
        if self.cfg.grad_clip:
            norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip)
            if not torch.isfinite(norm):       # scaled by NaN: the zeros outside the support are gone
                self.grads.decoder.invalidate()
        self.optimizer.step()

    def _step_metrics(self, local: list[LocalStep], logs: list[RankLog], settle_s: list[float], density: float,
                      wall: tuple[float, float, float]) -> dict[str, float]:
        """Metrics of one step over all P ranks; wall = (compute phase, collective, update) seconds."""
        stop = self.stop.signum or 0      # gathered with the metrics: every rank sees every rank's stop request
        rows: list[RankMetrics] = self.world.allgather(
            [RankMetrics(s.loss, s.correct, s.samples, s.compute_s, s.compress_s + settle, count, log.stats.messages,
                         log.stats.bytes, log.staging_s, wall[1], stop)
             for s, settle, count, log in zip(local, settle_s, counts_of([s.payload for s in local]), logs)])
        self.stop_seen = max(m.stop for m in rows)
        P, counts, sent = self.P, [m.count for m in rows], [m.bytes_sent for m in rows]
        comm_model = self.scheme.collective_for(self.d, density).model_seconds(self.net, P, self.d, counts)
        compute_s, compress_s = sum(m.compute_s for m in rows) / P, sum(m.compress_s for m in rows) / P
        iter_model = compute_s + compress_s + comm_model + wall[2]
        samples = sum(m.samples for m in rows)
        return {
            "train/loss": sum(m.loss for m in rows) / P,
            "train/acc": sum(m.correct for m in rows) / samples,
            "density/target": density, "density/achieved": sum(counts) / (P * self.d),
            "comm/bytes_sent": max(sent), "comm/bytes_sent_total": sum(sent),
            "comm/messages": max(m.messages for m in rows),
            "time/compute_s": compute_s, "time/compress_s": compress_s, "time/comm_s": wall[1],
            "time/comm_min_s": min(m.comm_s for m in rows), "time/comm_max_s": max(m.comm_s for m in rows),
            "time/staging_s": max(m.staging_s for m in rows), "time/update_s": wall[2], "time/step_s": sum(wall),
            "time/comm_model_s": comm_model,
            "time/iter_model_s": iter_model,
            "throughput/measured": samples / max(sum(wall), 1e-12),          # samples per second
            "throughput/model": samples / max(iter_model, 1e-12),
        }

    # -- evaluation ------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Loss and accuracy of rank 0's replica (its batch-norm statistics) on the validation split."""
        module = self.replicas[self.world.local_ranks[0]].module
        module.eval()
        total_loss, total_correct, total = 0.0, 0.0, 0
        for start in range(0, self.data.x_val.shape[0], self.cfg.eval_batch):
            x = self.data.x_val[start:start + self.cfg.eval_batch].to(self.device)
            y = self.data.y_val[start:start + self.cfg.eval_batch].to(self.device)
            loss, correct = loss_and_correct(module(x), y)
            total_loss += loss.item() * y.numel()
            total_correct += float(correct)
            total += y.numel()
        out = {"val/loss": total_loss / total, "val/acc": total_correct / total}
        if self.data.spec.kind == "tokens":
            out["val/ppl"] = math.exp(min(out["val/loss"], 50.0))
        return out

    # -- the loop --------------------------------------------------------------------------------
    def fit(self) -> dict[str, float]:
        """Train to the end (or to `max_steps`, or to divergence) and return the summary (also written).
        Raises `Interrupted` at the first step boundary after a stop request, once a checkpoint is written."""
        cfg, spe = self.cfg, self.loader.steps_per_epoch
        total_steps = cfg.epochs * spe if cfg.max_steps is None else min(cfg.max_steps, cfg.epochs * spe)
        start = time.perf_counter()
        show = cfg.progress and self.world.is_root
        bar = Progress(total_steps, self.step_count, f"{self.scheme.name} P={self.P}", show, cfg.status_every_s)
        try:
            while self.step_count < total_steps and self.diverged_at is None:
                it = self.step_count - self.epoch * spe       # a checkpoint may sit inside an epoch
                self.loader.set_epoch(self.epoch)
                density = self.scheme.density(self.epoch)
                lr = self.schedule(self.epoch + it / spe)
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
                metrics = self.step(it, density)
                metrics["lr"] = lr
                self.step_count += 1
                if not math.isfinite(metrics["train/loss"]):
                    self.diverged_at = self.step_count   # stop: every later step would be NaN too
                self.n_interval += 1
                self.summed += 1
                for key, value in metrics.items():
                    self.interval[key] += value
                    self.totals[key] += value
                last = self.step_count >= total_steps or self.diverged_at is not None
                if self.step_count % cfg.log_every == 0 or last:
                    record = {k: v / self.n_interval for k, v in self.interval.items()}
                    self.writer.log({"step": self.step_count, "epoch": self.epoch + (it + 1) / spe, **record,
                                     "residual/norm": self.replicas[self.world.local_ranks[0]].sync.memory.norm()})
                    bar.set_postfix(loss=f"{record['train/loss']:.3f}", acc=f"{record['train/acc']:.3f}")
                    self.interval.clear()
                    self.n_interval = 0
                bar.update(1)
                finished_epoch = self.step_count % spe == 0
                if finished_epoch:
                    self.epoch += 1
                if self.world.is_root and (last or (finished_epoch and self.epoch % cfg.eval_every == 0)):
                    self.val = self.evaluate()
                    self.writer.log({"step": self.step_count, "epoch": float(self.epoch), **self.val})
                    bar.write(f"epoch {self.epoch}: " + "  ".join(f"{k}={v:.4f}" for k, v in self.val.items()))
                self._step_boundary(finished_epoch, last)
        finally:
            bar.close()
        if self.capture is not None:
            self.capture.close()
        return self._summary(self.val, self.totals, time.perf_counter() - start)

    def _step_boundary(self, finished_epoch: bool, last: bool) -> None:
        """Checkpoints that are due, and the stop request: every rank takes the same decisions here (they
        depend on the step count, the gathered loss and the gathered stop signals only)."""
        cfg = self.cfg
        due = (finished_epoch and cfg.checkpoint_every and self.epoch % cfg.checkpoint_every == 0) or \
            (cfg.checkpoint_every_steps and self.step_count % cfg.checkpoint_every_steps == 0)
        saved = self._checkpoint() if due else None
        signum = self.stop_seen
        if signum and not last and self.diverged_at is None:
            saved = saved or self._checkpoint()
            name = meaning(signum).name
            where = (f"wrote {saved}; continue with the same command and trainer.resume=auto "
                     f"hydra.run.dir={self.run_dir}") if saved else "no checkpoint written (the state was not finite)"
            raise Interrupted(f"interrupted by {name} at step {self.step_count}: {where}", exit_status(signum),
                              step=self.step_count, checkpoint=str(saved) if saved else None)

    def _summary(self, val: dict[str, float], totals: dict[str, float], wall_s: float) -> dict[str, float]:
        n = max(self.summed, 1)       # steps in `totals` (all of them since step 1, checkpoints carry them)
        means = {key: value / n for key, value in totals.items() if key.startswith(("time/", "comm/", "density/"))}
        samples = self.P * self.cfg.batch_size
        extra = {} if self.diverged_at is None else {"diverged_at_step": self.diverged_at}
        summary = {**self.labels, **val, **extra, "steps": self.step_count, "epochs": self.epoch, "wall_s": wall_s,
                   "world_size": self.P, "batch_size_per_worker": self.cfg.batch_size, "params": self.d, **means,
                   "throughput_measured": samples / means["time/step_s"] if means.get("time/step_s") else 0.0,
                   "throughput_model": samples / means["time/iter_model_s"] if means.get("time/iter_model_s") else 0.0}
        self.writer.summary(summary)
        return summary

    # -- checkpoints -----------------------------------------------------------------------------
    def _finite(self) -> bool:
        """Whether the weights are finite (identical on every rank: every rank decides alike)."""
        return all(bool(torch.isfinite(p).all()) for p in self.params)

    def _checkpoint(self) -> Path | None:
        """Write checkpoint.pt, unless the weights are not finite: then the last good checkpoint stays and
        the run counts as diverged at this step. Returns the path written, or None."""
        if self.diverged_at is not None or not self._finite():
            self.diverged_at = self.diverged_at or self.step_count
            return None
        ranks = self.world.gather_root({r: rep.state_dict() for r, rep in self.replicas.items()})
        run = {"totals": dict(self.totals), "summed": self.summed, "interval": dict(self.interval),
               "n_interval": self.n_interval, "val": dict(self.val), "records": self.writer.records,
               "wandb_id": self.writer.wandb_id}
        shared = {"params": [p.detach().clone() for p in self.params], "optimizer": self.optimizer.state_dict(),
                  "epoch": self.epoch, "step": self.step_count, "P": self.P, "d": self.d,
                  "identity": self.identity, "run": run}
        return save_checkpoint(self.run_dir, shared, ranks, is_root=self.world.is_root)

    def _restore(self, resume: Resume) -> None:
        """Continue from a checkpoint (ssgd.run.build checked that it fits); weights only: a new run from its weights."""
        shared = resume.shared
        with torch.no_grad():
            for p, saved in zip(self.params, shared["params"]):
                p.copy_(saved)
        if resume.weights_only:
            return
        self.optimizer.load_state_dict(shared["optimizer"])
        for r, state in resume.ranks.items():
            self.replicas[r].load_state_dict(state)
        self.epoch, self.step_count = shared["epoch"], shared["step"]
        run = shared.get("run", {})               # absent in checkpoints written before the totals were saved
        self.totals.update(run.get("totals", {}))
        self.summed = run.get("summed", 0)
        self.interval.update(run.get("interval", {}))
        self.n_interval = run.get("n_interval", 0)
        self.val = dict(run.get("val", {}))


@dataclass(frozen=True)
class RankMetrics:
    """What one rank contributes to a step's metrics (gathered from every rank each step)."""

    loss: float
    correct: float           # correct predictions in its micro-batch
    samples: float
    compute_s: float         # forward + backward
    compress_s: float        # compensate + compress, plus the residual update after the collective
    count: int               # entries of its payload (`Payload.count`)
    messages: int            # messages and bytes it sent in the collective
    bytes_sent: int
    staging_s: float         # device <-> host copies of the MPI executor
    comm_s: float            # its own seconds in the collective, from entering to leaving (waits included)
    stop: int                # the signal number of a stop request this rank received (0: none)
