"""The CIFAR DenseNet of the [FLC] / [GRA] code bases (``Net/densenet.py``), DenseNet-121.

Architecture (Huang et al. 2017, "DenseNet-BC", CIFAR stem as written in that code):

* stem: one ``3x3`` convolution to ``2 g`` channels (``g`` = growth rate), no BatchNorm, no
  pooling;
* four dense blocks; a dense layer is ``BN -> ReLU -> conv1x1 (4 g) -> BN -> ReLU -> conv3x3
  (g)`` and its ``g`` new maps are concatenated *in front of* its input (``cat([new, x])``, the
  reference's order);
* between blocks a transition ``BN -> ReLU -> conv1x1 -> avg_pool(2)`` that keeps
  ``floor(reduction * channels)`` channels (32 -> 16 -> 8 -> 4);
* a final ``BN -> ReLU``, global average pooling (the reference's ``avg_pool2d(4)`` over the
  final 4x4 map of a 32x32 input; identical there and it also accepts larger inputs), then the
  linear ``head``.

DenseNet-121 is ``blocks = (6, 12, 24, 16)``, ``growth = 32``, ``reduction = 0.5``:
6,956,298 parameters for 10 classes (the head sees 1024 features). Weights use PyTorch's
default initialisation, as the reference does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from selfcal._validation import check_fraction, check_int
from selfcal.models._image import check_counts, check_images
from selfcal.models.registry import register_model


class DenseLayer(nn.Module):
    """Bottleneck dense layer; returns ``cat([new maps (growth), x], dim=1)``."""

    def __init__(self, in_planes: int, growth: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, 4 * growth, kernel_size=1, bias=False)
        self.bn2 = nn.BatchNorm2d(4 * growth)
        self.conv2 = nn.Conv2d(4 * growth, growth, kernel_size=3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(F.relu(self.bn1(x)))
        out = self.conv2(F.relu(self.bn2(out)))
        return torch.cat([out, x], dim=1)


class Transition(nn.Module):
    """``BN -> ReLU -> conv1x1 -> avg_pool(2)``: compresses the channels and halves H and W."""

    def __init__(self, in_planes: int, out_planes: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(in_planes)
        self.conv = nn.Conv2d(in_planes, out_planes, kernel_size=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(self.conv(F.relu(self.bn(x))), 2)


class DenseNet(nn.Module):
    """CIFAR DenseNet-BC with four dense blocks (see module doc).

    ``features(x)`` is the globally average-pooled ``relu(bn(...))`` of the last dense block,
    the input of ``head``. ``forward(x) = head(features(x))``.
    """

    def __init__(
        self,
        n_classes: int,
        blocks: Sequence[int] = (6, 12, 24, 16),
        growth: int = 32,
        reduction: float = 0.5,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        blocks = check_counts(blocks, "blocks", length=4)
        check_int("n_classes", n_classes, minimum=2)
        check_int("growth", growth)
        check_int("in_channels", in_channels)
        check_fraction("reduction", reduction)
        self.n_classes, self.in_channels = n_classes, in_channels
        planes = 2 * growth
        self.conv1 = nn.Conv2d(in_channels, planes, kernel_size=3, padding=1, bias=False)
        self.dense1, planes = _dense_block(planes, growth, blocks[0])
        self.trans1, planes = _transition(planes, reduction)
        self.dense2, planes = _dense_block(planes, growth, blocks[1])
        self.trans2, planes = _transition(planes, reduction)
        self.dense3, planes = _dense_block(planes, growth, blocks[2])
        self.trans3, planes = _transition(planes, reduction)
        self.dense4, planes = _dense_block(planes, growth, blocks[3])
        self.bn = nn.BatchNorm2d(planes)
        self.head = nn.Linear(planes, n_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled penultimate features ``(N, channels)`` of images ``(N, C, H, W)``."""
        check_images(x, self.in_channels, type(self).__name__)
        out = self.trans1(self.dense1(self.conv1(x)))
        out = self.trans2(self.dense2(out))
        out = self.trans3(self.dense3(out))
        out = F.relu(self.bn(self.dense4(out)))
        return F.adaptive_avg_pool2d(out, 1).flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, n_classes)``."""
        return self.head(self.features(x))


def _dense_block(planes: int, growth: int, count: int) -> tuple[nn.Sequential, int]:
    """``count`` dense layers and the channel count after them (``planes + count growth``)."""
    layers = [DenseLayer(planes + i * growth, growth) for i in range(count)]
    return nn.Sequential(*layers), planes + count * growth


def _transition(planes: int, reduction: float) -> tuple[Transition, int]:
    out_planes = math.floor(planes * reduction)
    if out_planes < 1:
        raise ValueError(f"reduction {reduction!r} leaves no channels after a transition")
    return Transition(planes, out_planes), out_planes


@register_model("densenet121")
def densenet121(n_classes: int, in_channels: int = 3) -> DenseNet:
    """DenseNet-121 (growth 32, blocks ``[6, 12, 24, 16]``, CIFAR stem) of [FLC] / [GRA]."""
    return DenseNet(n_classes, (6, 12, 24, 16), growth=32, reduction=0.5, in_channels=in_channels)
