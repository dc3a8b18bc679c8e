"""Our schemes inside your own DistributedDataParallel script: an asynchronous DDP communication hook
with error feedback.

    import ssgd.ddp
    model = torch.nn.parallel.DistributedDataParallel(net)          # after dist.init_process_group(...)
    hook = ssgd.ddp.register(model, compressor="gtopk", density=0.001)
    ... train as usual: loss.backward() runs the hook on every gradient bucket ...

or, as PyTorch's own hooks are registered (a `(state, hook)` pair, e.g. PowerSGD's):

    state = ssgd.ddp.hook_state(model, compressor="gtopk", density=0.001)
    model.register_comm_hook(state, ssgd.ddp.sparse_hook)

For each gradient bucket DDP hands over, on every rank, the hook
  1. lays the bucket's gradients out in the model's parameter order (DDP orders a bucket by when the
     gradients became ready, and rebuilds its buckets after the first iteration);
  2. compensates: u = g + e, with this bucket's residual e (error feedback);
  3. compresses u with the scheme's compressor, built from conf/compressor/<name>.yaml exactly as the
     trainer builds it (`ssgd.scheme_config.build_scheme`);
  4. runs the scheme's collective (dense allreduce, sparse allgather, the gTop-k tree) on
     torch.distributed: the same program as the trainer, executed by `ssgd.comm.executors.torch_dist`;
  5. keeps e = u - what counted as sent (for gTop-k: this rank's entries outside the global set);
  6. writes the averaged bucket, total / P, and completes the `torch.futures.Future` it returned.

**Asynchronous.** Steps 1-6 run on one communication thread per process (`overlap=True`, the default):
the hook only queues the bucket and returns a pending future, so backward goes on computing the next
buckets' gradients while this bucket is compressed and communicated. DDP launches its buckets in bucket
order on every rank (its reducer marks bucket i ready only after buckets 0..i-1), and the thread works
its queue first in, first out, so every rank runs the same collectives in the same order; DDP waits for
every future at the end of backward. The collective programs are not split into asynchronous
torch.distributed operations, because the gTop-k tree's next message depends on the merge of the last
one: the thread runs each program as the trainer does, with blocking sends and receives that release
the interpreter lock. The thread has a process group of its own (the same ranks), because DDP runs
collectives of its own on the model's group meanwhile (with `find_unused_parameters`, an allreduce of the
used-parameter map at the end of backward), and two threads posting on one group could post them in a
different order on different ranks. `overlap=False` runs them inside the hook, on the model's group, and
returns a completed future.
Either way the bits are the same (tests/integration/test_ddp_hook.py). `close()` stops the thread; a
script that never calls it is covered by an atexit handler, which stops it before the interpreter
tears torch down.

**Narrow indices.** With a sparse AllGather scheme (topk, gaussiank, randomk, dgcsampling) a bucket of
at most 2^16 elements sends uint16 indices, 2 bytes instead of 4 per entry (`narrow_indices=True`, the
default; `ssgd.comm.wire`); the averaged bucket has the same bits, only the bytes (`stats.bytes_sent`)
differ. The gTop-k tree keeps int32 indices (its merge takes int32), as does the trainer.

Residuals, compressors and their random streams belong to a bucket's set of parameters; when DDP
rebuilds its buckets, each parameter's residual moves to its new bucket (the memory's state is indexed
by coordinate), so nothing is lost. The bucket that holds the model's first parameter uses the trainer's
random stream for (seed, rank): with one bucket covering the model (`bucket_cap_mb` above the model's
size), a hook step equals the trainer's step bitwise (tests/integration/test_ddp_hook.py).
docs/gpu-clusters.md compares this hook with PyTorch's PowerSGD hook (Vogels et al., NeurIPS 2019);
the schemes are those of Shi et al., "A Distributed Synchronous SGD Algorithm with Global Top-k
Sparsification for Low Bandwidth Networks" (ICDCS 2019, arXiv:1901.04359, Algorithms 2-3) and Shi, Chu,
Cheung, See, "Understanding Top-k Sparsification in Distributed Deep Learning" (arXiv:1911.08772, Gaussian-k).
"""
from __future__ import annotations

import atexit
import functools
import queue
import threading
import weakref
from dataclasses import dataclass, field, replace

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

import ssgd.native as native
from ssgd.comm.executors.torch_dist import TorchExecutor, run_torch
from ssgd.config import check_density, compressor_config
from ssgd.loop.sync import RankCompression, Scheme
from ssgd.payload import Sparse
from ssgd.scheme_config import build_scheme, collective_takes, compressor_factory
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
    compression: RankCompression
    layout: tuple | None = None                 # DDP's layout of this bucket when last seen, and its map
    shifts: tuple[Tensor, Tensor] | None = None

    def shifts_for(self, positions: list[int], grads: list[Tensor], buf: Tensor) -> tuple[Tensor, Tensor] | None:
        """(int64 model-order start of each parameter, increasing; int64 shift from there to its offset in DDP's
        bucket buffer `buf`), where `grads` (of the parameters at model `positions`, in DDP's order) are views of
        `buf`; None when one of them is not a contiguous view inside it. Kept while DDP's layout stays the same
        (from step to step, until DDP rebuilds its buckets)."""
        base, size = buf.data_ptr(), buf.element_size()
        layout = (buf.numel(), tuple((pos, (grad.data_ptr() - base) // size, grad.numel(), grad.is_contiguous())
                                     for pos, grad in zip(positions, grads)))
        if layout != self.layout:
            self.layout, self.shifts = layout, self._shifts(layout, buf.device)
        return self.shifts

    def _shifts(self, layout: tuple, device: torch.device) -> tuple[Tensor, Tensor] | None:
        numel, parts = layout
        starts, shifts = [], []
        for pos, offset, n, contiguous in sorted(parts):
            if not contiguous or not 0 <= offset <= numel - n:
                return None
            starts.append(self.offsets[pos])
            shifts.append(offset - self.offsets[pos])
        return (torch.tensor(starts, dtype=torch.int64, device=device),
                torch.tensor(shifts, dtype=torch.int64, device=device))

    def in_buffer(self, idx: Tensor, positions: list[int], grads: list[Tensor], buf: Tensor) -> Tensor | None:
        """Where the entries at int64 `idx` (positions in this bucket's flat vector, in model order) lie in DDP's
        bucket buffer `buf` (`shifts_for`); None when a gradient is not a view of it (then the caller copies
        part by part)."""
        found = self.shifts_for(positions, grads, buf)
        return None if found is None else _moved(idx, *found)

    def decode_into(self, total: Sparse, P: int, positions: list[int], grads: list[Tensor], buf: Tensor) -> bool:
        """float32 `buf` = total / P in DDP's layout (each entry moved as `in_buffer` moves it), by the C kernel
        (`ssgd.native.scatter_segments`) or else torch operations: the same bits. False, with `buf` untouched,
        when a gradient is not a view of `buf` (then the caller copies part by part)."""
        found = self.shifts_for(positions, grads, buf)
        if found is None:
            return False
        if not native.scatter_segments(buf, total.idx, total.val, P, *found):
            Sparse(_moved(total.idx, *found), total.val, total.numel).to_dense(scale=P, out=buf)
        return True


def _moved(idx: Tensor, starts: Tensor, shifts: Tensor) -> Tensor:
    """`idx` (int64 model-order positions) moved by the shift of the parameter each lies in (`_Bucket.shifts_for`)."""
    return idx + shifts.index_select(0, torch.searchsorted(starts, idx, right=True).sub_(1))


@dataclass
class _Job:
    """One bucket call, as the hook queued it: what DDP handed over, and the future to complete."""

    positions: list[int]      # model position of each of the bucket's parameters, in DDP's order
    grads: list[Tensor]
    buf: Tensor
    density: float            # `SparseHook.density` when DDP called the hook
    future: torch.futures.Future
    ready: object = None      # CUDA: an event recorded on the caller's stream after the bucket was written


@dataclass
class SparseHook:
    """The hook's state (`hook_state` and `register` build it): scheme, density, one `_Bucket` per parameter
    set, and (overlap=True) this process's communication thread, started at the first bucket."""

    scheme: Scheme
    density: float            # change it between steps to follow a schedule (e.g. scheme.density(epoch))
    params: list[nn.Parameter]
    seed: int
    config: DictConfig                 # the scheme's conf/compressor/<name>.yaml
    group: dist.ProcessGroup | None = None
    stats: HookStats = field(default_factory=HookStats)
    buckets: dict[tuple[int, ...], _Bucket] = field(default_factory=dict)
    overlap: bool = True      # compress and communicate on the communication thread (module docstring)

    def __post_init__(self) -> None:
        self.position = {id(p): i for i, p in enumerate(self.params)}
        self.owner: dict[int, tuple[int, ...]] = {}     # parameter position -> key of its current bucket
        self.rank = dist.get_rank(self.group) if dist.is_initialized() else 0
        self.executor: TorchExecutor | None = None
        self.buffers: dict = {}
        self.threads = torch.get_num_threads()          # the thread's intra-op threads: the caller's (same bits)
        self._queue: queue.SimpleQueue | None = None
        self._thread: threading.Thread | None = None
        self._at_exit: functools.partial | None = None    # registered with atexit while the thread runs

    # -- one bucket ------------------------------------------------------------------------------
    def __call__(self, bucket: dist.GradBucket) -> torch.futures.Future:
        """Queue `bucket` (overlap=True) or reduce it now; the future completes with its averaged buffer."""
        buf = bucket.buffer()
        job = _Job([self.position[id(p)] for p in bucket.parameters()], list(bucket.gradients()), buf,
                   float(self.density), torch.futures.Future())
        if not self.overlap:
            self._run(job)
            return job.future
        if buf.is_cuda:
            job.ready = torch.cuda.Event()
            job.ready.record(torch.cuda.current_stream(buf.device))
        self._worker().put(job)
        return job.future

    def _worker(self) -> queue.SimpleQueue:
        if self._thread is None or not self._thread.is_alive():
            self._queue = queue.SimpleQueue()
            self._thread = threading.Thread(target=self._serve, args=(self._queue,), name="ssgd-ddp-comm",
                                            daemon=True)
            self._thread.start()
            # Closed before the interpreter finalizes, also in a script that never calls close(): a daemon
            # thread must not be waiting on its queue while torch's process groups are torn down (that aborts
            # the process: "terminate called without an active exception", status 134; docs/faults.md).
            self._at_exit = functools.partial(_close_live, weakref.ref(self))
            atexit.register(self._at_exit)
        return self._queue

    def _serve(self, jobs: queue.SimpleQueue) -> None:
        """The communication thread: the queued buckets in order, until `close` queues None."""
        torch.set_num_threads(self.threads)
        stream = None
        while (job := jobs.get()) is not None:
            try:
                if job.buf.is_cuda:
                    torch.cuda.set_device(job.buf.device)
                    stream = stream or torch.cuda.Stream(job.buf.device)
                    with torch.cuda.stream(stream):
                        stream.wait_event(job.ready)
                        self._reduce(job)
                        stream.synchronize()     # the bucket is written before DDP reads it on its own stream
                else:
                    self._reduce(job)
            except BaseException as exc:  # noqa: BLE001 -- DDP re-raises it in the caller's backward
                job.future.set_exception(exc)
            else:
                job.future.set_result(job.buf)

    def _run(self, job: _Job) -> None:
        try:
            self._reduce(job)
        except BaseException as exc:  # noqa: BLE001
            job.future.set_exception(exc)
            raise
        job.future.set_result(job.buf)

    def _reduce(self, job: _Job) -> None:
        """Steps 1-6 of the module docstring for one bucket; writes the average into the bucket."""
        positions, grads, buf = job.positions, job.grads, job.buf
        order = sorted(range(len(positions)), key=positions.__getitem__)
        in_order = order == list(range(len(order)))
        key = tuple(positions[i] for i in order)
        state = self.buckets.get(key) or self._new_bucket(key, buf.device)
        # u = g + e: from the buffer itself when DDP's order is the model's, else part by part into the
        # residual's views (the same float additions, without first gathering the parts in model order)
        parts = buf if in_order else [grads[i].reshape(-1) for i in order]
        d = state.compression.d
        collective = self.scheme.collective_for(d, job.density)      # min-compression rule: asked once
        u, payload = state.compression.compress(parts, job.density, collective)
        if self.executor is None:
            self.executor = TorchExecutor(self.group, self.buffers)
        reduced, log = run_torch(collective, payload, executor=self.executor)
        total = reduced.total
        state.compression.settle(payload, reduced)
        if in_order and buf.dtype == torch.float32:
            reduced.average(out=buf)        # written in place: no d-sized temporary (the same bits as a copy)
        elif in_order:
            buf.copy_(reduced.average())
        elif not (buf.dtype == torch.float32 and isinstance(total, Sparse)      # straight to DDP's layout
                  and state.decode_into(total, reduced.P, positions, grads, buf)):
            average = reduced.average()
            for i in order:
                start = state.offsets[positions[i]]
                grads[i].copy_(average[start:start + grads[i].numel()].view_as(grads[i]))
        self._count(payload.count, d, log)

    def close(self) -> None:
        """Stop the communication thread after the buckets already queued (a later bucket starts a new one)."""
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._thread = None
        if self._at_exit is not None:
            atexit.unregister(self._at_exit)
            self._at_exit = None

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
        compression = RankCompression(self._bucket_scheme(key[0]), self.rank, d, device,
                                      parts=[torch.Size([self.params[pos].numel()]) for pos in key])
        old_keys = {self.owner[pos] for pos in key if pos in self.owner}
        if old_keys:
            self._move_state(compression, key, offsets, old_keys)
        self.owner.update({pos: key for pos in key})
        for k in old_keys:                        # a bucket none of whose parameters it still owns
            if all(self.owner[pos] != k for pos in k):
                del self.buckets[k]
        bucket = _Bucket(key, offsets, compression)
        self.buckets[key] = bucket
        return bucket

    def _move_state(self, compression: RankCompression, key: tuple[int, ...], offsets: dict[int, int],
                    old_keys: set[tuple[int, ...]]) -> None:
        """Into the new bucket `key`: each of its parameters' entries of the per-coordinate memory state from
        the bucket that owned the parameter, and the compressor's state of the old bucket with the same first
        parameter."""
        state = compression.memory.state_dict()
        old_states = {k: self.buckets[k].compression.memory.state_dict() for k in old_keys}
        for name, tensor in state.items():
            if isinstance(tensor, Tensor) and tensor.shape == (compression.d,):
                for pos in key:
                    if pos in self.owner:
                        old, n = self.buckets[self.owner[pos]], self.params[pos].numel()
                        src = old_states[old.key][name][old.offsets[pos]:old.offsets[pos] + n]
                        tensor[offsets[pos]:offsets[pos] + n] = src
        compression.memory.load_state_dict(state)
        for k in old_keys:
            if k[0] == key[0]:
                compression.compressor.load_state_dict(self.buckets[k].compression.compressor.state_dict())

    def _bucket_scheme(self, first: int) -> Scheme:
        """The scheme with the random stream of the bucket that starts at parameter `first`: the trainer's
        (seed, rank) stream for the bucket holding parameter 0, a stream derived from (seed, first) else
        (the same memory, a compressor factory of that stream, and the collective's `fresh` instance: Ok-Topk's
        thresholds are per bucket)."""
        if first == 0:
            return self.scheme
        seed = derive_seed(self.seed, first, "ddp-bucket")
        return replace(self.scheme, make_compressor=compressor_factory(self.config, seed),
                       collective=self.scheme.collective.fresh())


HALF_VALUES = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def _close_live(ref: weakref.ReferenceType) -> None:
    """atexit: close the hook's communication thread if the hook is still alive."""
    hook = ref()
    if hook is not None:
        hook.close()


def hook_state(model: nn.Module, compressor: str = "gtopk", density: float | None = None, *, seed: int = 0,
               process_group: dist.ProcessGroup | None = None, overlap: bool = True,
               values: str | None = None, narrow_indices: bool = True) -> SparseHook:
    """The state of the hook for `model` (a DistributedDataParallel model or the module it wraps), to pass
    with `sparse_hook` to `model.register_comm_hook(state, sparse_hook)`, as PyTorch's hooks take theirs.

    `compressor`: a scheme, conf/compressor/<name>.yaml (dense, dense16, topk, gtopk, gaussiank, randomk,
    dgcsampling, or your own). `density`: k / d per bucket (None: the file's `density`; the file's per-epoch
    warm-up is not applied, set `state.density` yourself to follow one). `seed`: the compressors' random
    streams (Random-k, DGC sampling), as the trainer's `seed`. `process_group`: the group of `model` (None:
    the default). `overlap`: compress and communicate on the communication thread (module docstring), over
    a new group of the same ranks (`dist.new_group`: call this on every rank of the default group, as
    `new_group` requires); False: inside the hook, on `process_group`. `values`: the wire format of the
    values (fp32, fp16, bf16; docs/compressors.md#wire-formats); None: the file's `wire.values`, or, when the
    file sets none, the model's own precision for a model whose trainable parameters are all bf16 (or all
    fp16), so a bf16 model sends bf16 values, else fp32. `narrow_indices`: a bucket of at most 2^16
    elements sends uint16 indices when the scheme's collective takes `narrow_indices` (the sparse
    AllGather; module docstring). ValueError for an unknown scheme or a density outside (0, 1]."""
    config = compressor_config(compressor)
    params = [p for p in model.parameters() if p.requires_grad]
    dtypes = {p.dtype for p in params}
    if values is None and OmegaConf.select(config, "wire.values") is None and len(dtypes) == 1:
        values = HALF_VALUES.get(dtypes.pop())
    if values is not None:
        OmegaConf.update(config, "wire.values", values, force_add=True)
    if narrow_indices and collective_takes(config, "narrow_indices"):
        OmegaConf.update(config, "collective.narrow_indices", True, force_add=True)
    scheme = build_scheme(config, seed)
    rho = check_density(scheme.density.density if density is None else density)
    if overlap:       # the thread's own group: its collectives never interleave with DDP's own on `process_group`
        process_group = dist.new_group(dist.get_process_group_ranks(process_group or dist.group.WORLD))
    return SparseHook(scheme, float(rho), params, seed, config, process_group, overlap=overlap)


def sparse_hook(state, bucket):     # annotated below: DDP compares the annotations, and this module's are strings
    """The DDP communication hook: reduce `bucket` with `state` (a `hook_state`); returns a future of the
    averaged bucket, pending while the communication thread works on it (state.overlap)."""
    return state(bucket)


sparse_hook.__annotations__ = {"state": SparseHook, "bucket": dist.GradBucket,
                               "return": torch.futures.Future[torch.Tensor]}


def register(model: nn.parallel.DistributedDataParallel, compressor: str = "gtopk", density: float | None = None,
             *, seed: int = 0, process_group: dist.ProcessGroup | None = None, overlap: bool = True,
             values: str | None = None, narrow_indices: bool = True) -> SparseHook:
    """Run scheme `compressor` on every gradient bucket of `model` (module docstring): builds
    `hook_state(model, ...)` (same arguments), registers it with `sparse_hook`, and returns the state.
    TypeError naming the model's class when `model` is not a DistributedDataParallel (only DDP runs hooks)."""
    if not isinstance(model, nn.parallel.DistributedDataParallel):
        raise TypeError(f"ssgd.ddp.register: model is a {type(model).__module__}.{type(model).__qualname__}, not a "
                        "torch.nn.parallel.DistributedDataParallel; wrap it first: model = "
                        "DistributedDataParallel(net) after torch.distributed.init_process_group(...)")
    state = hook_state(model, compressor, density, seed=seed, process_group=process_group, overlap=overlap,
                       values=values, narrow_indices=narrow_indices)
    model.register_comm_hook(state, sparse_hook)
    return state
