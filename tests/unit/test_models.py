"""Models: parameter counts from the papers' code, shapes, spec checks, and generator-driven dropout."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from ssgd.data import DataSpec
from ssgd.errors import ConfigError
from ssgd.models import (
    FNN3,
    LSTMLM,
    GenDropout,
    SmallCNN,
    count_parameters,
    has_global_dropout,
    resnet20,
    resnet56,
    use_generator,
)
from ssgd.models.resnet import ShortcutA

MNIST = DataSpec("image", (1, 28, 28), 10, "mnist")
CIFAR = DataSpec("image", (3, 32, 32), 10, "cifar10")
PTB = DataSpec("tokens", (7,), 50, "ptb")


def test_parameter_counts_match_the_papers_models() -> None:
    assert count_parameters(FNN3(MNIST)) == 199_210  # 784-200-200-10
    assert count_parameters(SmallCNN(MNIST)) == 431_080  # mnistnet: 800 -> 500 -> 10 head
    assert count_parameters(resnet20(CIFAR)) == 269_722  # option A shortcut: no parameters
    assert count_parameters(resnet20(CIFAR, shortcut="B")) == 272_474  # + two 1x1 conv + BN projections
    assert count_parameters(resnet56(CIFAR)) == 853_018


def test_models_adapt_to_the_input_spec() -> None:
    spec = DataSpec("image", (3, 32, 32), 7)
    assert count_parameters(FNN3(spec)) == 3072 * 200 + 200 + 200 * 200 + 200 + 200 * 7 + 7
    assert count_parameters(FNN3(MNIST, hidden=(50,))) == 784 * 50 + 50 + 50 * 10 + 10
    assert resnet20(DataSpec("image", (1, 28, 28), 10)).conv.in_channels == 1


@pytest.mark.parametrize(
    "make, spec, shape",
    [
        (lambda s: FNN3(s, dropout=0.5), MNIST, (1, 28, 28)),
        (lambda s: SmallCNN(s, dropout=0.5), MNIST, (1, 28, 28)),
        (SmallCNN, DataSpec("image", (3, 16, 21), 7), (3, 16, 21)),
        (resnet20, CIFAR, (3, 32, 32)),
        (resnet20, DataSpec("image", (1, 15, 17), 4), (1, 15, 17)),
    ],
)
def test_image_models_output_logits(make, spec: DataSpec, shape: tuple[int, ...]) -> None:
    model = make(spec)
    out = model(torch.randn(3, *shape))
    assert out.shape == (3, spec.num_classes)
    assert out.dtype == torch.float32


def test_lstm_outputs_logits_per_position() -> None:
    model = LSTMLM(PTB, emb=8, hidden=12, layers=3, dropout=0.3)
    x = torch.randint(0, 50, (4, 7))
    out = model(x)
    assert out.shape == (4, 7, 50)
    out.sum().backward()
    assert model.embedding.weight.grad is not None


def test_lstm_carries_no_state_between_batches_or_samples() -> None:
    model = LSTMLM(PTB, emb=8, hidden=12, layers=2, dropout=0.3).eval()
    x = torch.randint(0, 50, (4, 7))
    first = model(x)
    model(torch.randint(0, 50, (4, 7)))  # a batch in between must not change the next result
    assert torch.equal(model(x), first)
    torch.testing.assert_close(model(x[1:2]), first[1:2])  # sample 1 alone == sample 1 in the batch


def test_lstm_uses_separate_layers_and_generator_dropout() -> None:
    model = LSTMLM(PTB, emb=8, hidden=12, layers=3, dropout=0.3)
    lstms = [m for m in model.modules() if isinstance(m, nn.LSTM)]
    assert len(lstms) == 3 and all(m.num_layers == 1 for m in lstms)
    assert sum(isinstance(m, GenDropout) for m in model.modules()) == 4  # input, after each layer


@pytest.mark.parametrize(
    "make, spec, needle",
    [
        (FNN3, PTB, "model=fnn3"),
        (SmallCNN, PTB, "model=cnn"),
        (SmallCNN, DataSpec("image", (1, 2, 2), 10), "model=cnn"),
        (SmallCNN, DataSpec("image", (1, 15, 28), 10), "model=cnn"),  # 15 leaves nothing after pooling
        (SmallCNN, DataSpec("image", (28, 28), 10), "model=cnn"),
        (resnet20, PTB, "model=resnet20"),
        (resnet20, DataSpec("image", (784,), 10), "model=resnet20"),
        (resnet56, PTB, "model=resnet56"),
        (LSTMLM, MNIST, "model=lstm"),
    ],
)
def test_mismatched_spec_is_a_config_error(make, spec: DataSpec, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        make(spec)


def test_smallest_cnn_input_works() -> None:
    assert SmallCNN(DataSpec("image", (1, 16, 16), 3))(torch.randn(2, 1, 16, 16)).shape == (2, 3)


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda: FNN3(MNIST, hidden=()), "^hidden="),
        (lambda: FNN3(MNIST, hidden=(200, 0)), "^hidden="),
        (lambda: FNN3(MNIST, dropout=1.0), "^dropout="),
        (lambda: LSTMLM(PTB, layers=0), "^layers="),
        (lambda: resnet20(CIFAR, shortcut="C"), "^shortcut="),
    ],
)
def test_bad_model_arguments_name_the_parameter(make, needle: str) -> None:
    """Models name their own parameter; the config layer (ssgd.run.build.built) prefixes `model.`."""
    with pytest.raises(ValueError, match=needle):
        make()


def test_option_a_shortcut_subsamples_and_zero_pads() -> None:
    x = torch.randn(2, 16, 7, 7)
    out = ShortcutA(16, 32, 2)(x)
    assert out.shape == (2, 32, 4, 4)
    assert torch.equal(out[:, :16], x[:, :, ::2, ::2])
    assert not out[:, 16:].any()


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_gen_dropout_is_bit_identical_to_nn_dropout(p: float) -> None:
    x = torch.randn(64, 33)
    torch.manual_seed(1234)
    expected = nn.Dropout(p).train()(x)
    drop = GenDropout(p).train()
    drop.gen = torch.Generator().manual_seed(1234)
    assert torch.equal(drop(x), expected)
    assert not torch.equal(drop(x), expected)  # the generator advanced: the next mask differs


def test_gen_dropout_leaves_the_global_rng_alone() -> None:
    drop = GenDropout(0.5)
    drop.gen = torch.Generator().manual_seed(0)
    x = torch.randn(100)
    state = torch.get_rng_state()
    drop(x)
    assert torch.equal(torch.get_rng_state(), state)


def test_gen_dropout_is_the_identity_in_eval_mode_and_at_zero() -> None:
    x = torch.randn(10, 10)
    assert GenDropout(0.5).eval()(x) is x
    assert GenDropout(0.0).train()(x) is x


def test_same_seeded_generators_give_identical_dropout_models() -> None:
    x = torch.randint(0, 50, (4, 7))
    torch.manual_seed(0)
    a = LSTMLM(PTB, emb=8, hidden=12, layers=2, dropout=0.5)
    b = LSTMLM(PTB, emb=8, hidden=12, layers=2, dropout=0.5)
    b.load_state_dict(a.state_dict())
    use_generator(a, torch.Generator().manual_seed(7))
    use_generator(b, torch.Generator().manual_seed(7))
    assert torch.equal(a(x), b(x))
    use_generator(b, torch.Generator().manual_seed(8))
    assert not torch.equal(a(x), b(x))  # a different stream gives different masks: dropout is active


def test_use_generator_reaches_every_gen_dropout() -> None:
    model = nn.Sequential(FNN3(MNIST, dropout=0.2), GenDropout(0.1))
    gen = torch.Generator()
    use_generator(model, gen)
    drops = [m for m in model.modules() if isinstance(m, GenDropout)]
    assert len(drops) == 3 and all(m.gen is gen for m in drops)


def test_has_global_dropout_detects_stock_dropout() -> None:
    assert has_global_dropout(nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.1)))
    assert has_global_dropout(nn.Sequential(FNN3(MNIST), nn.Sequential(nn.Dropout2d(0.1))))
    assert has_global_dropout(nn.LSTM(4, 4, num_layers=2, dropout=0.5))
    assert not has_global_dropout(nn.LSTM(4, 4, num_layers=2))
    for model in (FNN3(MNIST, dropout=0.5), SmallCNN(MNIST, dropout=0.5), resnet20(CIFAR), LSTMLM(PTB)):
        assert not has_global_dropout(model)
