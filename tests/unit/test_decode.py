"""Decoding into one persistent buffer: the bits of `Reduced.average()`, whatever came before."""
from __future__ import annotations

import gc
import mmap

import pytest
import torch

from conftest import make_cfg
from ssgd.run import build
from ssgd.comm.base import Reduced
from ssgd.loop.decode import HUGE_PAGE, Decoder, ParamGrads, hugepage_zeros
from ssgd.payload import Dense, Sparse


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32)


def sparse(idx, val, d=10):
    return Sparse(torch.tensor(idx, dtype=torch.int64), torch.tensor(val, dtype=torch.float32), d)


class Opaque:
    """A sparse payload kind without `write_into` (decoded by its `to_dense`)."""

    def __init__(self, s: Sparse) -> None:
        self.s = s
        self.numel = s.numel

    def to_dense(self, scale=1.0, out=None):
        return self.s.to_dense(scale, out)

    def indices(self):
        return self.s.indices()


SEQUENCE = [
    Reduced(sparse([1, 4], [3.0, -1.0]), 3),
    Reduced(sparse([4, 7, 9], [2.0, 0.5, -0.0]), 3),          # overlaps the previous support
    Reduced(Dense(torch.arange(10, dtype=torch.float32) - 4.5), 3),
    Reduced(sparse([0], [7.0]), 3),                          # after a dense result: everything is cleared
    Reduced(Opaque(sparse([2, 3], [1.0, 2.0])), 3),
    Reduced(sparse([], []), 3),
    Reduced(sparse([5, 6], [float("nan"), float("inf")]), 3),
    Reduced(sparse([6], [1.0]), 2),
]


def test_every_result_decodes_to_the_bits_of_average():
    dec = Decoder(torch.zeros(10))
    for reduced in SEQUENCE:
        got = dec(reduced)
        assert got is dec.out
        assert torch.equal(bits(got), bits(reduced.average())), reduced


def test_a_sparse_result_touches_only_the_previous_and_its_own_positions():
    out = torch.zeros(10)
    dec = Decoder(out)
    dec(Reduced(sparse([1, 4], [3.0, -1.0]), 1))
    out[8] = 99.0                                            # breaks the contract without telling
    dec(Reduced(sparse([2], [1.0]), 1))
    assert out[8] == 99.0 and out[1] == 0.0 and out[4] == 0.0   # O(k): position 8 was not visited
    dec.invalidate()                                          # ... which `invalidate` is for
    assert torch.equal(dec(Reduced(sparse([2], [1.0]), 1)), sparse([2], [1.0]).to_dense())


def test_dense_with_one_rank_is_not_copied():
    dec = Decoder(torch.zeros(4))
    values = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert dec(Reduced(Dense(values), 1)) is values
    assert torch.equal(dec.out, torch.zeros(4))               # the buffer was left as it was
    assert torch.equal(dec(Reduced(sparse([3], [1.0], d=4), 1)), torch.tensor([0.0, 0.0, 0.0, 1.0]))


def test_a_dirty_buffer_is_cleared_on_the_first_sparse_result():
    dec = Decoder(torch.ones(5))
    assert torch.equal(dec(Reduced(sparse([0], [2.0], d=5), 2)), torch.tensor([1.0, 0, 0, 0, 0]))


def test_a_wrong_buffer_is_refused():
    with pytest.raises(ValueError, match="1-D float32"):
        Decoder(torch.zeros(3, dtype=torch.float64))


def test_param_grads_are_views_of_one_buffer():
    params = [torch.nn.Parameter(torch.zeros(2, 3)), torch.nn.Parameter(torch.zeros(4))]
    grads = ParamGrads(params)
    flat = grads.set(Reduced(sparse([0, 9], [1.0, 2.0]), 1))
    assert flat is grads.decoder.out
    assert params[0].grad.data_ptr() == flat.data_ptr() and params[1].grad[3] == 2.0
    dense = torch.arange(10, dtype=torch.float32)
    assert grads.set(Reduced(Dense(dense), 1)) is dense and params[1].grad.data_ptr() == dense[6:].data_ptr()


@pytest.mark.parametrize("compressor", ["gtopk", "dense"])
def test_the_trainer_reuses_its_gradient_buffer(compressor, tmp_path):
    cfg = make_cfg(f"compressor={compressor}", "cluster.world_size=2", "trainer.max_steps=3", "trainer.batch_size=8")
    trainer, writer, world = build.trainer(cfg, tmp_path)
    try:
        ptrs = set()
        trainer.loader.set_epoch(0)
        for it in range(3):
            trainer.step(it, 0.01)
            ptrs.add(trainer.params[0].grad.data_ptr())
    finally:
        world.close()
        writer.close()
    assert ptrs == {trainer.grads.decoder.out.data_ptr()}


def test_hugepage_zeros_are_zeros_that_keep_their_mapping_alive():
    n = 3 * HUGE_PAGE // 4 + 5                       # 6 MiB and 20 bytes: not a whole number of huge pages
    t = hugepage_zeros(n)
    assert t.dtype == torch.float32 and t.shape == (n,) and t.is_contiguous() and t.count_nonzero() == 0
    if hasattr(mmap, "MADV_HUGEPAGE"):
        assert t.data_ptr() % HUGE_PAGE == 0          # aligned: every whole 2 MiB of it can be one page
    gc.collect()
    t[-1] = 7.0                                       # the mapping is still there
    assert t.sum().item() == 7.0
    small = hugepage_zeros(10)
    assert small.tolist() == [0.0] * 10
