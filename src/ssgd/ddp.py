"""Our schemes inside your own DistributedDataParallel script: a DDP communication hook with error feedback.

    import ssgd.ddp
    model = torch.nn.parallel.DistributedDataParallel(net)          # after dist.init_process_group(...)
    hook = ssgd.ddp.register(model, compressor="gtopk", density=0.001)
    ... train as usual: loss.backward() runs the hook on every gradient bucket ...

For each gradient bucket DDP hands over, on every rank, the hook
  1. lays the bucket's gradients out in the model's parameter order (DDP orders a bucket by when the
     gradients became ready, and rebuilds its buckets after the first iteration);
  2. compensates: u = g + e, with this bucket's residual e (error feedback);
  3. compresses u with the scheme's compressor, built from conf/compressor/<name>.yaml exactly as the
     trainer builds it (`ssgd.run.build.scheme`);
  4. runs the scheme's collective (dense allreduce, sparse allgather, the gTop-k tree) on
     torch.distributed: the same program as the trainer, executed by `ssgd.comm.torch_dist`;
  5. keeps e = u - what counted as sent (for gTop-k: this rank's entries outside the global set);
  6. returns the averaged bucket, total / P, as a completed `torch.futures.Future`.

The collective runs synchronously inside the hook (the gradients of later buckets wait), as a
selection over the bucket needs the whole bucket. Residuals, compressors and their random streams
belong to a bucket's set of parameters; when DDP rebuilds its buckets, each parameter's residual moves
to its new bucket (the memory's state is indexed by coordinate), so nothing is lost. The bucket that
holds the model's first parameter uses the trainer's random stream for (seed, rank): with one bucket
covering the model (`bucket_cap_mb` above the model's size), a hook step equals the trainer's step
bitwise (tests/integration/test_ddp_hook.py). docs/gpu-clusters.md compares this hook with PyTorch's
PowerSGD hook.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from ssgd.comm.torch_dist import TorchExecutor, run_torch
from ssgd.config import check_density, compressor_config
from ssgd.loop.sync import RankSync, Scheme
from ssgd.utils.seeding import derive_seed


@dataclass
class HookStats:
    """What this rank's hook did since registration (all buckets)."""

    calls: int = 0
    entries: int = 0          # payload entries sent (d for dense): entries / elements = achieved density
    elements: int = 0         # gradient elements compressed
    messages: int = 0
    bytes_sent: int = 0


@dataclass
class _Bucket:
    """One set of parameters (positions in model order) with its compressor and residual."""

    key: tuple[int, ...]
    offsets: dict[int, int]   # parameter position -> offset in this bucket's flat vector
    sync: RankSync


@dataclass
class SparseHook:
    """The hook's state (`register` builds it): scheme, density, and one `_Bucket` per parameter set."""

    scheme: Scheme
    density: float            # change it between steps to follow a schedule (e.g. scheme.density(epoch))
    params: list[nn.Parameter]
    seed: int
    config: DictConfig                 # the scheme's conf/compressor/<name>.yaml
    group: dist.ProcessGroup | None = None
    stats: HookStats = field(default_factory=HookStats)
    buckets: dict[tuple[int, ...], _Bucket] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.position = {id(p): i for i, p in enumerate(self.params)}
        self.owner: dict[int, tuple[int, ...]] = {}     # parameter position -> key of its current bucket
        self.rank = dist.get_rank(self.group) if dist.is_initialized() else 0
        self.executor: TorchExecutor | None = None
        self.buffers: dict = {}

    # -- one bucket ------------------------------------------------------------------------------
    def __call__(self, bucket: dist.GradBucket) -> torch.futures.Future:
        params, grads, buf = bucket.parameters(), bucket.gradients(), bucket.buffer()
        positions = [self.position[id(p)] for p in params]
        order = sorted(range(len(positions)), key=positions.__getitem__)
        in_order = order == list(range(len(order)))
        key = tuple(positions[i] for i in order)
        state = self.buckets.get(key) or self._new_bucket(key, buf.device)
        flat = buf if in_order else torch.cat([grads[i].reshape(-1) for i in order])
        _, payload = state.sync.compress(flat, self.density)
        if self.executor is None:
            self.executor = TorchExecutor(self.group, self.buffers)
        collective = self.scheme.collective_for(flat.numel(), self.density)   # min-compression rule
        reduced, log = run_torch(collective, payload, executor=self.executor)
        state.sync.settle(payload, reduced)
        average = reduced.average()
        if in_order:
            buf.copy_(average)
        else:
            for i in order:
                start = state.offsets[positions[i]]
                grads[i].copy_(average[start:start + grads[i].numel()].view_as(grads[i]))
        self._count(payload.count, flat.numel(), log)
        done: torch.futures.Future = torch.futures.Future()
        done.set_result(buf)
        return done

    def _count(self, entries: int, elements: int, log) -> None:
        s = self.stats
        s.calls, s.entries, s.elements = s.calls + 1, s.entries + entries, s.elements + elements
        s.messages, s.bytes_sent = s.messages + log.stats.messages, s.bytes_sent + log.stats.bytes

    # -- bucket state ----------------------------------------------------------------------------
    def _new_bucket(self, key: tuple[int, ...], device: torch.device) -> _Bucket:
        """State for a new set of parameters. When DDP rebuilds its buckets, the residual entries of each
        parameter move from its old bucket to its new one (per-coordinate memory state, such as the
        residual e), and the random stream of the old bucket with the same first parameter continues."""
        offsets, d = {}, 0
        for pos in key:
            offsets[pos] = d
            d += self.params[pos].numel()
        self.scheme.collective.check_numel(d)
        sync = RankSync(self._bucket_scheme(key[0]), self.rank, d, device)
        old_keys = {self.owner[pos] for pos in key if pos in self.owner}
        if old_keys:
            state, old_states = sync.memory.state_dict(), {k: self.buckets[k].sync.memory.state_dict() for k in old_keys}
            for name, tensor in state.items():
                if isinstance(tensor, Tensor) and tensor.shape == (d,):
                    for pos in key:
                        if pos in self.owner:
                            old, n = self.buckets[self.owner[pos]], self.params[pos].numel()
                            src = old_states[old.key][name][old.offsets[pos]:old.offsets[pos] + n]
                            tensor[offsets[pos]:offsets[pos] + n] = src
            sync.memory.load_state_dict(state)
            for k in old_keys:
                if k[0] == key[0]:
                    sync.compressor.load_state_dict(self.buckets[k].sync.compressor.state_dict())
        self.owner.update({pos: key for pos in key})
        for k in old_keys:                        # a bucket none of whose parameters it still owns
            if all(self.owner[pos] != k for pos in k):
                del self.buckets[k]
        bucket = _Bucket(key, offsets, sync)
        self.buckets[key] = bucket
        return bucket

    def _bucket_scheme(self, first: int) -> Scheme:
        """The scheme with the random stream of the bucket that starts at parameter `first`: the trainer's
        (seed, rank) stream for the bucket holding parameter 0, a stream derived from (seed, first) else."""
        if first == 0:
            return self.scheme
        return Scheme.from_config(self.config, derive_seed(self.seed, first, "ddp-bucket"))


HALF_VALUES = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def register(model: nn.parallel.DistributedDataParallel, compressor: str = "gtopk", density: float | None = None,
             *, seed: int = 0, process_group: dist.ProcessGroup | None = None,
             values: str | None = None) -> SparseHook:
    """Run scheme `compressor` (conf/compressor/<name>.yaml: dense, dense16, topk, gtopk, gaussiank, randomk,
    dgcsampling, or your own) on every gradient bucket of `model` (module docstring); returns the hook's
    state. `density`: k / d per bucket (None: the file's `density`; the file's per-epoch warm-up is not
    applied, set `hook.density` yourself to follow one). `seed`: the compressors' random streams (Random-k,
    DGC sampling), as the trainer's `seed`. `process_group`: the group of `model` (None: the default).
    `values`: the wire format of the values (fp32, fp16, bf16; docs/compressors.md#wire-formats); None: the
    file's `wire.values`, or, when the file sets none, the model's own precision for a model whose
    trainable parameters are all bf16 (or all fp16), so a bf16 model sends bf16 values, else fp32.
    ValueError for an unknown scheme or a density outside (0, 1]."""
    config = compressor_config(compressor)
    params = [p for p in model.module.parameters() if p.requires_grad]
    dtypes = {p.dtype for p in params}
    if values is None and OmegaConf.select(config, "wire.values") is None and len(dtypes) == 1:
        values = HALF_VALUES.get(dtypes.pop())
    if values is not None:
        OmegaConf.update(config, "wire.values", values, force_add=True)
    scheme = Scheme.from_config(config, seed)
    rho = check_density(scheme.density.density if density is None else density)
    hook = SparseHook(scheme, float(rho), params, seed, config, process_group)
    model.register_comm_hook(hook, _hook)
    return hook


def _hook(state, bucket):      # no annotations: DDP checks them, and this module's are strings
    return state(bucket)
