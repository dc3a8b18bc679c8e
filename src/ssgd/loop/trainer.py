"""The S-SGD loop: forward/backward on every rank, compress, aggregate, one update, evaluate, log.

Data-parallel synchronous SGD with weak scaling (batch size per worker, as in both released trainers,
hclhkbu/gtopkssgd and hclhkbu/GaussianK-SGD): each step,
every rank r computes g_r on its own micro-batch, compresses u_r = g_r + e_r, the scheme's
collective aggregates, every rank updates its residual, and the averaged gradient drives one SGD
step (momentum and weight decay act after aggregation, as released). The trainer has no
compressor- or backend-specific branches: the scheme and the world carry those.

Runs that never lie: the summary's means come from running sums that checkpoints carry
(`ssgd.loop.sums.RunningSums`), so a resumed run reports what the uninterrupted run reports; a
checkpoint is never written from non-finite state (a diverged run keeps its last good one and records
`diverged_at_step`); a stop request (SIGTERM, SIGINT: `ssgd.loop.stop`) ends the run at the next step
boundary with a checkpoint and `ssgd.errors.Interrupted`.

A step reads forward/backward -> sync -> apply: `ssgd.loop.sync.SyncStep` runs every local rank's
forward/backward (`ssgd.loop.replica.Replica.step`) and compression in the world's compute phase, the
collective, the decode into one persistent flat buffer whose views are the parameters' .grad
(`ssgd.loop.decode.Decoder`: no d-sized allocation per step, and a sparse result costs O(k)), and the
residual updates; then one optimizer step applies the averaged gradient.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ssgd.config import TrainConfig
from ssgd.data.base import TensorData
from ssgd.data.loader import ShardedLoader
from ssgd.errors import Interrupted
from ssgd.loop.capture import Capture
from ssgd.loop.checkpoint import Resume, save_checkpoint
from ssgd.loop.replica import LocalStats, Replicas, loss_and_correct
from ssgd.loop.schedule import LRSchedule
from ssgd.loop.step_metrics import rank_metrics, step_metrics
from ssgd.loop.stop import StopRequest, exit_status, meaning
from ssgd.loop.sums import RunningSums
from ssgd.loop.sync import Observer, Synced, SyncStep
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.perf.target import TargetCompute
from ssgd.utils.metrics import MetricWriter
from ssgd.utils.progress import Progress
from ssgd.worlds.base import World


@dataclass(frozen=True)
class TrainerParts:
    """What a Trainer runs on: the world, the data and its per-rank batches, the local replicas, the sync
    step over their parameters, the optimizer over the same parameters with its LR schedule, the
    network of the target cluster (the modelled communication time of each step) and the target's compute
    (`ssgd.perf.target`; None: no profile describes this model, so the run has no target iteration time)."""

    world: World
    data: TensorData
    loader: ShardedLoader
    replicas: Replicas
    sync: SyncStep
    optimizer: torch.optim.Optimizer
    schedule: LRSchedule
    net: AlphaBeta
    target: TargetCompute | None = None


@dataclass(frozen=True)
class RunOutput:
    """Where a run goes: its metrics writer and directory, the labels of its summary, its identity (saved
    in checkpoints: `ssgd.loop.checkpoint.check_fits`) and the analysis capture (None: off)."""

    writer: MetricWriter
    run_dir: Path
    labels: dict
    run_identity: dict
    capture: Capture | None = None


def throughputs(means: dict[str, float], samples: int) -> dict[str, float]:
    """Samples per second on each clock over a window whose mean step times are `means` (a record's
    interval, or the run): `samples` (all ranks' samples of one step) / the mean step; a clock whose step
    time is absent or 0 gives no key."""
    clocks = (("throughput/here", "time/step_s"), ("throughput/target", "target/iter_s"))
    return {name: samples / means[key] for name, key in clocks if means.get(key)}


class Trainer:
    """Runs S-SGD for one scheme on one world; `fit()` returns the summary (also written)."""

    def __init__(self, cfg: TrainConfig, parts: TrainerParts, out: RunOutput, resume: Resume | None = None,
                 stop: StopRequest | None = None) -> None:
        self.cfg, self.out = cfg, out
        self.world, self.data, self.loader, self.net = parts.world, parts.data, parts.loader, parts.net
        self.target = parts.target
        self.simulated = getattr(parts.world, "platform", None) is not None   # ThreadWorld on SimGrid
        self.replicas, self.sync = parts.replicas, parts.sync
        self.optimizer, self.schedule = parts.optimizer, parts.schedule
        self.params, self.d, self.device = self.replicas.params, self.replicas.d, self.replicas.device
        self.grads = self.sync.grads                   # the parameters' .grad are views of its buffer
        self.writer, self.run_dir, self.capture = out.writer, Path(out.run_dir), out.capture
        self.P = self.world.size
        self.stop = stop or StopRequest()
        self.stop_seen = 0                             # the stop signal any rank had at the last step's gather
        self.epoch, self.step_count = 0, 0
        self.diverged_at: int | None = None     # step whose training loss (or, at a checkpoint, state) was not finite
        self.sums = RunningSums()                      # carried by checkpoints
        if resume is not None:
            self._restore(resume)

    # -- one step --------------------------------------------------------------------------------
    def step(self, it: int, density: float) -> dict[str, float]:
        """One S-SGD step on batch `it` of the current epoch: forward/backward -> sync -> apply; returns its
        metrics (all ranks). The sync step runs each local rank's forward/backward in the compute phase."""
        synced = self.sync(density, lambda r: self.replicas[r].step(*self.loader.batch(it, r)),
                           self._observer(density))
        start = time.perf_counter()
        self._apply()
        return self._step_metrics(synced, density, apply_s=time.perf_counter() - start)

    def _observer(self, density: float) -> Observer | None:
        """Capture (analysis, off by default) of this step, between the collective and the residual update
        (its seconds are kept out of the step's timings); None when it does not observe this step."""
        capture, step, epoch = self.capture, self.step_count + 1, self.epoch
        if capture is None or not capture.wants(step):
            return None
        return lambda us, payloads, results, aggregated: capture.observe(step, epoch, density, self.world, us,
                                                                         payloads, results, aggregated)

    def _apply(self) -> None:
        """One optimizer step on the parameters' .grad (set by the sync step)."""
        if self.cfg.grad_clip:
            norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip)
            if not torch.isfinite(norm):       # scaled by NaN: the zeros outside the support are gone
                self.grads.decoder.invalidate()
        self.optimizer.step()

    def _step_metrics(self, synced: Synced[LocalStats], density: float, apply_s: float) -> dict[str, float]:
        """Metrics of one step over all P ranks; every rank sees every rank's stop request (gathered with them)."""
        rows = self.world.allgather(rank_metrics(synced, self.stop.signum or 0))
        self.stop_seen = max(m.stop for m in rows)
        wall = (synced.compute_phase_s, synced.comm_s, synced.decode_settle_s + apply_s)
        return step_metrics(rows, density, self.d, synced.collective, self.net, wall, self.simulated, self.target)

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
        self.total_steps = total_steps
        start = time.perf_counter()
        show = cfg.progress and self.world.is_root
        bar = Progress(total_steps, self.step_count, f"{self.sync.scheme.name} P={self.P}", show, cfg.status_every_s)
        try:
            while self.step_count < total_steps and self.diverged_at is None:
                it = self.step_count - self.epoch * spe       # a checkpoint may sit inside an epoch
                self._train_step(it, spe)
                last = self.step_count >= total_steps or self.diverged_at is not None
                if self.step_count % cfg.log_every == 0 or last:
                    self._log_interval(self.epoch + (it + 1) / spe, bar)
                bar.update(1)
                finished_epoch = self.step_count % spe == 0
                if finished_epoch:
                    self.epoch += 1
                if self.world.is_root and (last or (finished_epoch and self.epoch % cfg.eval_every == 0)):
                    self._evaluate_and_log(bar)
                self._step_boundary(finished_epoch, last)
        finally:
            bar.close()
            if self.capture is not None:      # (also after a full disk or another error: its file is closed)
                self.capture.close()
        return self._summary(time.perf_counter() - start)

    def _train_step(self, it: int, spe: int) -> None:
        """Step `it` of the current epoch at the epoch's density and the schedule's LR, added to the sums."""
        self.loader.set_epoch(self.epoch)
        density = self.sync.scheme.density(self.epoch)
        lr = self.schedule(self.epoch + it / spe)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        metrics = self.step(it, density)
        metrics["lr"] = lr
        self.step_count += 1
        if not math.isfinite(metrics["train/loss"]):
            self.diverged_at = self.step_count   # stop: every later step would be NaN too
        self.sums.add(metrics)

    def _log_interval(self, epoch: float, bar: Progress) -> None:
        """One metrics.jsonl record: the interval's means since the last record, and rank 0's residual norm."""
        record = self.sums.take_interval()
        record |= throughputs(record, self.P * self.cfg.batch_size)
        self.writer.log({"step": self.step_count, "epoch": epoch, **record, "residual/norm": self.sync.residual_norm()})
        bar.set_postfix(loss=f"{record['train/loss']:.3f}", acc=f"{record['train/acc']:.3f}")

    def _evaluate_and_log(self, bar: Progress) -> None:
        self.sums.val = self.evaluate()
        self.writer.log({"step": self.step_count, "epoch": float(self.epoch), **self.sums.val})
        bar.write(self._where() + ": " + "  ".join(f"{k}={v:.4f}" for k, v in self.sums.val.items()))

    def _where(self) -> str:
        """"epoch 10/30 = step 310/930 (1 epoch = 31 steps of 4 x 32 samples)": how far the run is, in epochs
        (passes over the training split, fractional inside one) and steps, each out of the run's planned total."""
        spe = self.loader.steps_per_epoch

        def epochs(steps: int) -> str:
            return f"{steps // spe}" if steps % spe == 0 else f"{steps / spe:.2f}"
        return (f"epoch {epochs(self.step_count)}/{epochs(self.total_steps)} = step {self.step_count}/"
                f"{self.total_steps} (1 epoch = {spe} steps of {self.P} x {self.cfg.batch_size} samples)")

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

    def _summary(self, wall_s: float) -> dict[str, float]:
        """The run's summary (keys: `ssgd.utils.metric_names`): labels, the last evaluation, the run means of
        the step metrics, the configured density, the run's byte total and both clocks' throughputs."""
        means = self.sums.means()     # over every step since step 1 (checkpoints carry the sums)
        extra = {} if self.diverged_at is None else {"diverged_at_step": self.diverged_at}
        if self.target is not None:
            extra["target/profile"] = self.target.profile
            if self.target.file is not None:       # cluster.compute_profile: the user's file
                extra.update({"target/profile_file": self.target.file, "target/profile_sha256": self.target.sha256})
        summary = {**self.out.labels, **self.sums.val, **extra, "steps": self.step_count, "epochs": self.epoch,
                   "wall_s": wall_s, "world_size": self.P, "batch_size_per_worker": self.cfg.batch_size,
                   "params": self.d, "density/configured": self.sync.scheme.density.density, **means,
                   "comm/bytes_total": round(self.sums.totals.get("comm/bytes_all_ranks", 0.0)),
                   **throughputs(means, self.P * self.cfg.batch_size)}
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
        ranks = self.world.gather_root({r: {**rep.state_dict(), **self.sync.ranks[r].state_dict()}
                                        for r, rep in self.replicas.items()})
        run = {**self.sums.state_dict(), "records": self.writer.records, "wandb_id": self.writer.wandb_id}
        shared = {"params": [p.detach().clone() for p in self.params], "optimizer": self.optimizer.state_dict(),
                  "epoch": self.epoch, "step": self.step_count, "P": self.P, "d": self.d,
                  "identity": self.out.run_identity, "run": run}
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
            self.sync.ranks[r].load_state_dict(state)
        self.epoch, self.step_count = shared["epoch"], shared["step"]
        self.sums.load_state_dict(shared.get("run", {}))     # a checkpoint without `run` sums: 0 steps summed
