"""The papers' full-size models: exact parameter counts, their config files, shapes, spec checks, no stock dropout.

The big models (AlexNet 61M, LSTM-PTB 66M, ResNet-50 25M, VGG-16 15M parameters) are built once per
module from their conf/model files and only run forward on batches of 1-2.
"""
from __future__ import annotations

import pytest
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from torch import nn

from conftest import make_cfg
from ssgd.data import DataSpec
from ssgd.errors import ConfigError
from ssgd.models import (
    LSTMLM,
    GenDropout,
    alexnet,
    alexnet_r,
    count_parameters,
    has_global_dropout,
    resnet50,
    swap_dropout,
    use_generator,
    vgg16,
)

CIFAR = DataSpec("image", (3, 32, 32), 10, "cifar10")
IMAGENET = DataSpec("image", (3, 224, 224), 1000, "imagenet")
PTB = DataSpec("tokens", (35,), 10_000, "ptb")
MNIST = DataSpec("image", (1, 28, 28), 10, "mnist")

# exact counts of this package's models (compute once, pinned); the published or derived number in the comment
COUNTS = {
    ("vgg16", CIFAR): 14_728_266,       # gTop-k code's CIFAR VGG-16 (models/vgg.py): ~14.73M
    ("alexnet", IMAGENET): 61_100_840,  # torchvision AlexNet
    ("resnet50", IMAGENET): 25_557_032,  # torchvision ResNet-50
    ("lstm_ptb", PTB): 66_034_000,      # gTop-k code's LSTM-PTB (models/lstm.py, 1500 units): ~66.0M
    ("resnet56", CIFAR): 853_018,       # DLBench (arXiv:1608.07249): "0.85M params"
    ("alexnet_r", CIFAR): 85_098,       # DLBench Torch7 AlexNet-R (floor pooling)
}
_BUILT: dict[tuple[str, DataSpec], nn.Module] = {}


def build(name: str, spec: DataSpec) -> nn.Module:
    """The model of conf/model/<name>.yaml for `spec`, as build.model makes it; cached per module."""
    if (name, spec) not in _BUILT:
        torch.manual_seed(0)
        _BUILT[(name, spec)] = instantiate(make_cfg(f"model={name}").model, spec=spec)
    return _BUILT[(name, spec)]


@pytest.fixture(scope="module", autouse=True)
def _drop_built_models():
    yield
    _BUILT.clear()  # free ~0.7 GB of weights for the rest of the session


@pytest.mark.parametrize("name, spec", sorted(COUNTS, key=lambda k: k[0]))
def test_config_files_build_the_papers_models_with_exact_counts(name: str, spec: DataSpec) -> None:
    model = build(name, spec)
    assert count_parameters(model) == COUNTS[(name, spec)]
    assert not has_global_dropout(model)  # the trainer would refuse it


def test_lstm_ptb_count_is_the_gtopk_lstm_term_by_term() -> None:
    model = build("lstm_ptb", PTB)
    assert isinstance(model, LSTMLM)
    v, h = 10_000, 1500
    embedding, lstm_layer, decoder = v * h, 4 * h * (h + h) + 2 * 4 * h, h * v + v  # untied; b_ih and b_hh
    assert (embedding, lstm_layer, decoder) == (15_000_000, 18_012_000, 15_010_000)
    assert count_parameters(model) == embedding + 2 * lstm_layer + decoder
    assert [m.p for m in model.modules() if isinstance(m, GenDropout)] == [0.65] * 3  # keep 0.35


def test_vgg16_is_configuration_d_with_one_linear_layer() -> None:
    model = build("vgg16", CIFAR)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512]
    assert all(c.bias is not None and c.kernel_size == (3, 3) for c in convs)  # the gTop-k code keeps conv biases
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 13
    assert sum(isinstance(m, nn.MaxPool2d) for m in model.modules()) == 5
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(512, 10)]


def test_alexnet_dropouts_are_generator_driven() -> None:
    model = build("alexnet", IMAGENET)
    drops = [m for m in model.modules() if isinstance(m, GenDropout)]
    assert [d.p for d in drops] == [0.5, 0.5]
    assert not any(isinstance(m, nn.Dropout) for m in model.modules())


@pytest.mark.parametrize(
    "name, spec, batch",
    [
        ("vgg16", CIFAR, 2),
        ("alexnet", IMAGENET, 1),
        ("resnet50", IMAGENET, 2),
        ("resnet56", CIFAR, 2),
        ("alexnet_r", CIFAR, 2),
    ],
)
def test_image_models_output_logits(name: str, spec: DataSpec, batch: int) -> None:
    model = build(name, spec).eval()
    with torch.no_grad():
        out = model(torch.randn(batch, *spec.input_shape))
    assert out.shape == (batch, spec.num_classes) and out.dtype == torch.float32


def test_lstm_ptb_outputs_logits_per_position() -> None:
    model = build("lstm_ptb", PTB).eval()
    with torch.no_grad():
        out = model(torch.randint(0, 10_000, (1, 35)))
    assert out.shape == (1, 35, 10_000) and out.dtype == torch.float32


@pytest.mark.parametrize(
    "make, spec, shape",
    [
        (vgg16, DataSpec("image", (1, 64, 40), 7), (1, 64, 40)),  # the linear layer reads 512 * 2 * 1
        (alexnet, DataSpec("image", (3, 63, 63), 5), (3, 63, 63)),  # smallest AlexNet input
        (resnet50, DataSpec("image", (3, 32, 32), 4), (3, 32, 32)),
        (alexnet_r, DataSpec("image", (1, 15, 20), 3), (1, 15, 20)),
        (lambda s: alexnet_r(s, ceil_mode=True), DataSpec("image", (3, 17, 17), 3), (3, 17, 17)),
    ],
)
def test_models_adapt_to_other_valid_specs(make, spec: DataSpec, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    model = make(spec)
    if count_parameters(model) < 1_000_000:
        out = model(torch.randn(2, *shape))  # training mode: batch norm needs > 1 value per channel
        out.sum().backward()
        assert all(p.grad is not None for p in model.parameters())
    else:  # forward only: the backward of the big ones costs seconds
        with torch.no_grad():
            out = model(torch.randn(2, *shape))
    assert out.shape == (2, spec.num_classes)


def test_alexnet_r_counts_follow_the_pooling_rounding() -> None:
    assert count_parameters(alexnet_r(CIFAR)) == 85_098  # 32 -> 15 -> 7 -> 3: linear 576 -> 10
    assert count_parameters(alexnet_r(CIFAR, ceil_mode=True)) == 89_578  # Caffe: 32 -> 16 -> 8 -> 4: 1024 -> 10
    assert count_parameters(vgg16(DataSpec("image", (3, 64, 64), 10))) == 14_728_266 + 3 * 512 * 10


@pytest.mark.parametrize(
    "make, spec, needle",
    [
        (vgg16, PTB, "model=vgg16"),
        (vgg16, MNIST, "model=vgg16"),  # 28 < 32
        (vgg16, DataSpec("image", (3072,), 10), "model=vgg16"),
        (alexnet, CIFAR, "model=alexnet"),  # 32 < 63
        (alexnet, DataSpec("image", (1, 224, 224), 1000), "model=alexnet"),  # torchvision's are RGB
        (alexnet, PTB, "model=alexnet"),
        (resnet50, PTB, "model=resnet50"),
        (resnet50, DataSpec("image", (3, 16, 16), 10), "model=resnet50"),
        (resnet50, MNIST, "model=resnet50"),
        (alexnet_r, PTB, "model=alexnet_r"),
        (alexnet_r, DataSpec("image", (3, 14, 32), 10), "model=alexnet_r"),
    ],
)
def test_mismatched_spec_is_a_config_error(make, spec: DataSpec, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        make(spec)


def test_alexnet_r_names_a_bad_ceil_mode() -> None:
    with pytest.raises(ValueError, match="^ceil_mode='yes'"):
        alexnet_r(CIFAR, ceil_mode="yes")


def test_lstm_ptb_config_rejects_images() -> None:
    with pytest.raises(InstantiationException) as info:
        instantiate(make_cfg("model=lstm_ptb").model, spec=CIFAR)
    assert isinstance(info.value.__cause__, ConfigError) and "model=lstm" in str(info.value.__cause__)


def test_swap_dropout_replaces_nested_stock_dropout_without_changing_values() -> None:
    def make() -> nn.Module:
        torch.manual_seed(3)
        return nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.3), nn.Sequential(nn.Dropout(0.6, inplace=True)))

    stock = make().train()
    swapped = swap_dropout(make().train())
    assert not has_global_dropout(swapped)
    assert [m.p for m in swapped.modules() if isinstance(m, GenDropout)] == [0.3, 0.6]
    x = torch.randn(16, 8)
    torch.manual_seed(11)
    expected = stock(x)
    torch.manual_seed(11)  # gen None: GenDropout draws from the global RNG, with nn.Dropout's formula
    assert torch.equal(swapped(x), expected)
    assert has_global_dropout(swap_dropout(nn.Sequential(nn.Dropout2d(0.1))))  # channel dropout is left


def test_alexnet_dropout_follows_the_rank_generator() -> None:
    spec = DataSpec("image", (3, 63, 63), 4)
    torch.manual_seed(0)
    model = alexnet(spec).train()
    x = torch.randn(2, 3, 63, 63)
    use_generator(model, torch.Generator().manual_seed(5))
    first = model(x)
    use_generator(model, torch.Generator().manual_seed(5))
    state = torch.get_rng_state()
    assert torch.equal(model(x), first)
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is untouched
