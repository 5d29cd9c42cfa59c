"""Convolutional models: the reference architectures' sizes, shapes, pooling, seeding, learning.

The big CIFAR networks are built once per module (seed 0, 10 classes) and run one forward
pass of two images each; expected parameter counts come from the closed-form counts below,
written from the architecture definitions (not from our modules), and from published numbers.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from selfcal.models import (
    CifarResNet,
    CNN1d,
    CNN2d,
    DenseNet,
    WideResNet,
    available_models,
    build_model,
    init_model,
)
from selfcal.models.densenet import DenseLayer
from selfcal.models.resnet import Bottleneck
from selfcal.training import TrainConfig, fit, predict_logits

# --- closed-form parameter counts -----------------------------------------------------------


def conv(c_in: int, c_out: int, k: int, bias: bool = False) -> int:
    return c_in * c_out * k * k + (c_out if bias else 0)


def conv1d(c_in: int, c_out: int, k: int) -> int:
    return c_in * c_out * k + c_out  # with bias


def bn(c: int) -> int:
    return 2 * c  # weight and bias; running statistics are buffers


def linear(d_in: int, d_out: int) -> int:
    return d_in * d_out + d_out


def resnet_count(kind: str, blocks: tuple[int, ...], n_classes: int) -> int:
    """Stem conv3x3(3->64)+BN; stages of 64/128/256/512 planes; 1x1+BN projection shortcut
    wherever stride != 1 or the width changes; linear head on 512 * expansion."""
    expansion = 1 if kind == "basic" else 4
    total, width = conv(3, 64, 3) + bn(64), 64
    for planes, stride, count in zip((64, 128, 256, 512), (1, 2, 2, 2), blocks):
        for i in range(count):
            out = planes * expansion
            if kind == "basic":
                total += conv(width, planes, 3) + conv(planes, planes, 3) + 2 * bn(planes)
            else:
                total += conv(width, planes, 1) + conv(planes, planes, 3) + conv(planes, out, 1)
                total += 2 * bn(planes) + bn(out)
            if (stride if i == 0 else 1) != 1 or width != out:
                total += conv(width, out, 1) + bn(out)
            width = out
    return total + linear(width, n_classes)


def wide_resnet_count(depth: int, k: int, n_classes: int) -> int:
    """(depth - 2) / 6 post-activation basic blocks per stage of 16k, 32k, 64k channels."""
    n = (depth - 2) // 6
    total, width = conv(3, 16, 3) + bn(16), 16
    for planes in (16 * k, 32 * k, 64 * k):
        for _ in range(n):
            total += conv(width, planes, 3) + conv(planes, planes, 3) + 2 * bn(planes)
            if width != planes:  # the first block of every stage changes width here
                total += conv(width, planes, 1) + bn(planes)
            width = planes
    return total + linear(width, n_classes)


def densenet_count(blocks: tuple[int, ...], g: int, n_classes: int) -> int:
    """Stem conv3x3(3 -> 2g); dense layer BN, 1x1 (4g), BN, 3x3 (g); transitions BN + 1x1 to
    floor(c / 2); final BN; head."""
    c = 2 * g
    total = conv(3, c, 3)
    for stage, count in enumerate(blocks):
        for _ in range(count):
            total += bn(c) + conv(c, 4 * g, 1) + bn(4 * g) + conv(4 * g, g, 3)
            c += g
        if stage < 3:
            total += bn(c) + conv(c, c // 2, 1)
            c //= 2
    return total + bn(c) + linear(c, n_classes)


BIG = {
    "resnet18": resnet_count("basic", (2, 2, 2, 2), 10),
    "resnet50": resnet_count("bottleneck", (3, 4, 6, 3), 10),
    "resnet110": resnet_count("bottleneck", (3, 4, 26, 3), 10),
    "wide_resnet26_10": wide_resnet_count(26, 10, 10),
    "densenet121": densenet_count((6, 12, 24, 16), 32, 10),
}


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def state(model: nn.Module) -> list[torch.Tensor]:
    return [t.detach().clone() for t in model.state_dict().values()]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def big_models() -> dict[str, nn.Module]:
    return {name: build_model(name, n_classes=10, seed=0).eval() for name in BIG}


# --- sizes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BIG))
def test_parameter_counts_match_the_architecture_formulas(big_models, name):
    assert n_params(big_models[name]) == BIG[name]


def cifar_from_imagenet(count: int, feature_dim: int) -> int:
    """A torchvision ImageNet ResNet's size with the CIFAR stem (3x3 instead of 7x7 conv;
    the max-pool has no parameters) and a 10-class head instead of the 1000-class one."""
    return (
        count
        - conv(3, 64, 7)
        + conv(3, 64, 3)
        - linear(feature_dim, 1000)
        + linear(feature_dim, 10)
    )


def test_parameter_counts_match_published_numbers():
    # torchvision's documented sizes: resnet18 11,689,512, resnet50 25,557,032, resnet101
    # 44,549,160 (1000 classes, 7x7 stem); DenseNet-121 for CIFAR-10 in kuangliu/pytorch-cifar
    # (the code [FLC]/[GRA] adapted) 6,956,298; Zagoruyko & Komodakis: WRN-28-10 (n = 4) 36.5M.
    assert BIG["resnet18"] == cifar_from_imagenet(11_689_512, 512) == 11_173_962
    assert BIG["resnet50"] == cifar_from_imagenet(25_557_032, 2048) == 23_520_842
    assert BIG["densenet121"] == 6_956_298
    assert abs(BIG["wide_resnet26_10"] - 36.5e6) / 36.5e6 < 0.002
    # the code base's ResNet-110 = ResNet-101 + 3 more bottlenecks of 256 planes in stage 3
    block = conv(1024, 256, 1) + conv(256, 256, 3) + conv(256, 1024, 1) + 2 * bn(256) + bn(1024)
    assert BIG["resnet110"] == cifar_from_imagenet(44_549_160, 2048) + 3 * block


@pytest.mark.parametrize("n_classes", [100, 200])
def test_head_width_follows_n_classes(n_classes):
    model = build_model("resnet50", n_classes=n_classes)
    assert model.head.out_features == n_classes
    assert n_params(model) == resnet_count("bottleneck", (3, 4, 6, 3), n_classes)


def test_resnet110_is_the_bottleneck_3_4_26_3_network(big_models):
    model = big_models["resnet110"]
    stages = [model.layer1, model.layer2, model.layer3, model.layer4]
    assert [len(stage) for stage in stages] == [3, 4, 26, 3]
    assert all(isinstance(block, Bottleneck) for stage in stages for block in stage)


# --- forward pass, features and the reference pooling ---------------------------------------

# the reference's fixed pooling of the last feature map of a 32x32 input
REFERENCE_POOL = {
    "resnet18": ("layer4", lambda m, h: F.avg_pool2d(h, 4)),
    "resnet50": ("layer4", lambda m, h: F.avg_pool2d(h, 4)),
    "resnet110": ("layer4", lambda m, h: F.avg_pool2d(h, 4)),
    "wide_resnet26_10": ("layer3", lambda m, h: nn.AvgPool2d(8, stride=1)(h)),
    "densenet121": ("dense4", lambda m, h: F.avg_pool2d(F.relu(m.bn(h)), 4)),
}


@pytest.mark.parametrize("name", sorted(BIG))
def test_cifar_forward_shapes_features_and_reference_pooling(big_models, name):
    model = big_models[name]
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    layer, reference_pool = REFERENCE_POOL[name]
    seen: list[torch.Tensor] = []
    handle = getattr(model, layer).register_forward_hook(lambda m, i, out: seen.append(out))
    with torch.no_grad():
        features = model.features(x)
        logits = model(x)
    handle.remove()
    assert isinstance(model.head, nn.Linear) and logits.shape == (2, 10)
    assert features.shape == (2, model.head.in_features)
    torch.testing.assert_close(model.head(features), logits, rtol=0, atol=0)
    torch.testing.assert_close(features, reference_pool(model, seen[0]).flatten(1))


@pytest.mark.parametrize("stem_max_pool, final_map", [(False, 8), (True, 4)])
def test_resnet_accepts_tiny_imagenet_inputs(stem_max_pool, final_map):
    model = build_model("resnet50", n_classes=200, stem_max_pool=stem_max_pool, seed=0).eval()
    seen: list[torch.Tensor] = []
    model.layer4.register_forward_hook(lambda m, i, out: seen.append(out))
    with torch.no_grad():
        logits = model(torch.randn(2, 3, 64, 64))
    assert logits.shape == (2, 200)
    assert seen[0].shape == (2, 2048, final_map, final_map)
    assert isinstance(model.stem_pool, nn.MaxPool2d) == stem_max_pool


def test_densenet_concatenates_new_maps_in_front():
    layer = DenseLayer(in_planes=8, growth=4).eval()
    x = torch.randn(3, 8, 5, 5)
    out = layer(x)
    assert out.shape == (3, 12, 5, 5)
    torch.testing.assert_close(out[:, 4:], x, rtol=0, atol=0)
    new = layer.conv2(F.relu(layer.bn2(layer.conv1(F.relu(layer.bn1(x))))))
    torch.testing.assert_close(out[:, :4], new)


def test_densenet121_channel_arithmetic(big_models):
    model = big_models["densenet121"]
    widths = [model.trans1.conv.out_channels, model.trans2.conv.out_channels]
    widths += [model.trans3.conv.out_channels, model.head.in_features]
    # 64 + 6*32 = 256 -> 128; +12*32 = 512 -> 256; +24*32 = 1024 -> 512; +16*32 = 1024
    assert widths == [128, 256, 512, 1024]


# --- initialisation and seeding -------------------------------------------------------------


def test_wide_resnet_convolutions_use_the_reference_fan_out_init(big_models):
    model = big_models["wide_resnet26_10"]
    weight = model.layer3[1].conv2.weight.detach()  # 640 x 640 x 3 x 3
    expected = math.sqrt(2.0 / (3 * 3 * 640))
    assert abs(float(weight.std()) / expected - 1) < 0.01
    assert abs(float(weight.mean())) < 0.01 * expected
    shortcut = model.layer2[0].shortcut[0].weight.detach()  # 1x1, 320 outputs
    assert abs(float(shortcut.std()) / math.sqrt(2.0 / 320) - 1) < 0.02
    assert torch.equal(model.bn1.weight, torch.ones(16))
    assert torch.equal(model.bn1.bias, torch.zeros(16))


SMALL = {
    "cnn1d": lambda: CNN1d(5),
    "cnn2d": lambda: CNN2d(4),
    "resnet": lambda: CifarResNet("bottleneck", (1, 1, 1, 1), 10),
    "basic_resnet": lambda: CifarResNet("basic", (1, 2, 1, 1), 10, stem_max_pool=True),
    "wide_resnet": lambda: WideResNet(10, depth=8, width=2, dropout=0.3),
    "densenet": lambda: DenseNet(10, blocks=(1, 2, 1, 1), growth=4),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_seeded_construction_is_deterministic(name):
    rng = torch.random.get_rng_state()
    first, second = init_model(SMALL[name], 3), init_model(SMALL[name], 3)
    other = init_model(SMALL[name], 4)
    assert torch.equal(torch.random.get_rng_state(), rng)
    assert same(state(first), state(second)) and not same(state(first), state(other))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_reinitialising_in_place_equals_seeded_construction(name):
    model = SMALL[name]()
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(0.5)
    init_model(model, seed=5)
    assert same(state(model), state(init_model(SMALL[name], 5)))


def test_registered_names_build_seeded():
    names = {"cnn1d", "cnn2d", "resnet18", "resnet50", "resnet110", "wide_resnet"}
    assert names | {"wide_resnet26_10", "densenet121"} <= set(available_models())
    a = build_model("wide_resnet", n_classes=3, depth=8, width=1, seed=1)
    b = build_model("wide_resnet", n_classes=3, depth=8, width=1, seed=1)
    assert same(state(a), state(b))


def test_wide_resnet_dropout_acts_in_training_mode_only():
    model = WideResNet(10, depth=8, width=1, dropout=0.5)
    assert all(block.dropout.p == 0.5 for block in model.layer1)
    x = torch.randn(4, 3, 16, 16)
    torch.manual_seed(0)
    assert not torch.equal(model(x), model(x))
    model.eval()
    assert torch.equal(model(x), model(x))
    no_dropout = WideResNet(10, depth=8, width=1)
    assert not any(isinstance(m, nn.Dropout) for m in no_dropout.modules())


# --- small CNNs -----------------------------------------------------------------------------


def test_cnn1d_is_mnist1d_convbase():
    model = CNN1d(10)
    # ConvBase: conv(1->25, k5) + 2 conv(25->25, k3) + linear(25 * 5 -> 10) = 5,210
    assert n_params(model) == conv1d(1, 25, 5) + 2 * conv1d(25, 25, 3) + linear(125, 10) == 5210
    x = torch.randn(6, 40)
    h = x[:, None]
    for layer in (model.conv1, model.conv2, model.conv3):
        h = torch.relu(F.conv1d(h, layer.weight, layer.bias, stride=2, padding=1))
    assert h.shape == (6, 25, 5)
    torch.testing.assert_close(model.features(x), h.flatten(1))
    torch.testing.assert_close(model(x[:, None]), model(x), rtol=0, atol=0)
    torch.testing.assert_close(model.head(model.features(x)), model(x), rtol=0, atol=0)


def test_cnn2d_shapes_and_flat_inputs():
    model = CNN2d(10)
    assert n_params(model) == conv(1, 16, 3, True) + conv(16, 32, 3, True) + linear(128, 10)
    x = torch.randn(5, 1, 8, 8)
    assert model.features(x).shape == (5, 128)
    torch.testing.assert_close(model(x.flatten(1)), model(x), rtol=0, atol=0)
    torch.testing.assert_close(model.head(model.features(x)), model(x), rtol=0, atol=0)


def shifted_templates(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """3 classes of length-40 signals: a step, a bump or a zigzag of width 8 at a jittered
    position, plus N(0, 0.3^2) noise."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.tensor(
        [[1.0] * 4 + [-1.0] * 4, [0, 0.5, 1, 1.5, 1.5, 1, 0.5, 0], [1, -1, 1, -1, 1, -1, 1, -1]]
    )
    y = torch.randint(0, 3, (n,), generator=g)
    start = 16 + torch.randint(-4, 5, (n,), generator=g)
    x = 0.3 * torch.randn(n, 40, generator=g)
    for i in range(n):
        x[i, start[i] : start[i] + 8] += templates[y[i]]
    return x, y


def oriented_bars(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """4 classes of 8x8 images: a horizontal, vertical, diagonal or anti-diagonal bar of
    length 4 at a random position, plus N(0, 0.3^2) noise."""
    g = torch.Generator().manual_seed(seed)
    steps = [(0, 1), (1, 0), (1, 1), (1, -1)]
    y = torch.randint(0, 4, (n,), generator=g)
    corner = torch.randint(0, 5, (n, 2), generator=g)
    x = 0.3 * torch.randn(n, 1, 8, 8, generator=g)
    for i in range(n):
        dr, dc = steps[int(y[i])]
        r, c = int(corner[i, 0]), int(corner[i, 1]) + (3 if dc < 0 else 0)
        for t in range(4):
            x[i, 0, r + t * dr, c + t * dc] += 1.5
    return x, y


@pytest.mark.parametrize("name, data", [("cnn1d", shifted_templates), ("cnn2d", oriented_bars)])
def test_small_cnns_learn_a_separable_problem(name, data):
    n_classes = 3 if name == "cnn1d" else 4
    model = build_model(name, n_classes=n_classes, seed=0)
    train, test = data(300, seed=1), data(300, seed=2)
    fit(model, train, config=TrainConfig(epochs=60, lr=1e-2, batch_size=100))
    accuracy = (predict_logits(model, test[0]).argmax(1) == test[1]).double().mean()
    assert accuracy > 0.9


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, x",
    [
        (lambda: CNN1d(3), torch.randn(2, 41)),
        (lambda: CNN1d(3), torch.randn(2, 2, 40)),
        (lambda: CNN2d(3), torch.randn(2, 65)),
        (lambda: CNN2d(3), torch.randn(2, 3, 8, 8)),
        (lambda: CifarResNet("basic", (1, 1, 1, 1), 3), torch.randn(2, 1, 8, 8)),
        (lambda: CifarResNet("basic", (1, 1, 1, 1), 3), torch.randn(2, 3 * 8 * 8)),
        (lambda: WideResNet(3, depth=8, width=1), torch.randn(2, 3, 8)),
        (lambda: DenseNet(3, blocks=(1, 1, 1, 1), growth=2), torch.randn(2, 4, 8, 8)),
    ],
)
def test_wrong_input_shapes_raise(make, x):
    with pytest.raises(ValueError, match="expects"):
        make()(x)


@pytest.mark.parametrize(
    "make",
    [
        lambda: CNN1d(1),
        lambda: CNN1d(3, length=2),
        lambda: CNN2d(3, channels=(4,)),
        lambda: CifarResNet("wide", (1, 1, 1, 1), 3),
        lambda: CifarResNet("basic", (1, 1, 1), 3),
        lambda: CifarResNet("basic", (1, 0, 1, 1), 3),
        lambda: WideResNet(3, depth=27),
        lambda: WideResNet(3, depth=8, dropout=1.0),
        lambda: DenseNet(3, blocks=(1, 1, 1, 1), reduction=0.0),
        lambda: build_model("resnet50", n_classes=True),
    ],
)
def test_bad_arguments_raise(make):
    with pytest.raises(ValueError):
        make()
