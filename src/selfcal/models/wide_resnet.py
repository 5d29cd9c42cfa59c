"""The Wide-ResNet of the [FLC] / [GRA] code bases (``Net/wide_resnet.py``), WRN-26-10 by default.

Architecture (Zagoruyko & Komodakis 2016, as written in that code):

* stem: ``3x3`` convolution to 16 channels, BatchNorm, ReLU;
* three stages of ``n = (depth - 2) / 6`` *post-activation* basic blocks
  (``relu(bn(conv3x3(relu(bn(conv3x3(x))))) + shortcut(x))``) with ``16 k``, ``32 k``, ``64 k``
  channels (``k`` = ``width``) and strides 1, 2, 2; a ``1x1`` convolution + BatchNorm
  shortcut wherever the stride or the width changes (including the first block, 16 -> 16 k);
* global average pooling (the reference's ``AvgPool2d(8)`` over the final 8x8 map of a
  32x32 input -- identical there, and it also accepts larger inputs), then the linear ``head``.

Depth convention: the code counts ``depth = 6 n + 2``, so its "WRN-26-10" has ``n = 4`` blocks
per stage -- the block count of the paper's WRN-28-10 (``6 n + 4``), and about the same size
(36.5M parameters for 10 classes).

Dropout: the reference uses none, so ``dropout=0`` by default. A positive ``dropout`` inserts
``nn.Dropout`` between the two convolutions of every block, where Zagoruyko & Komodakis put it.

Initialisation as the reference: every convolution ``N(0, 2 / (k_h k_w out_channels))``
(He's fan-out rule), BatchNorm weight 1 and bias 0, the linear head PyTorch's default. The
convolution rule is the ``reset_parameters`` of :class:`FanOutConv2d`, so re-initialising a
built model with :func:`~selfcal.models.init_model` gives the same distribution.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from selfcal._validation import check_int
from selfcal.models._image import check_dropout, check_images
from selfcal.models.registry import register_model


class FanOutConv2d(nn.Conv2d):
    """``nn.Conv2d`` initialised ``N(0, 2 / (k_h k_w out_channels))`` (bias, if any, zero)."""

    def reset_parameters(self) -> None:
        fan_out = self.kernel_size[0] * self.kernel_size[1] * self.out_channels
        nn.init.normal_(self.weight, 0.0, math.sqrt(2.0 / fan_out))
        if self.bias is not None:
            nn.init.zeros_(self.bias)


def conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> FanOutConv2d:
    return FanOutConv2d(in_planes, out_planes, 3, stride=stride, padding=1, bias=False)


class WideBasicBlock(nn.Module):
    """Post-activation basic block with optional dropout between its two convolutions."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1, dropout: float = 0.0) -> None:
        super().__init__()
        self.conv1 = conv3x3(in_planes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                FanOutConv2d(in_planes, planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.dropout(F.relu(self.bn1(self.conv1(x))))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class WideResNet(nn.Module):
    """WRN-``depth``-``width`` of the [FLC]/[GRA] code (see module doc).

    ``features(x)`` is the globally average-pooled output of the last stage, ``(N, 64 width)``:
    the input of ``head``. ``forward(x) = head(features(x))``.
    """

    def __init__(
        self,
        n_classes: int,
        depth: int = 26,
        width: int = 10,
        dropout: float = 0.0,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        check_int("n_classes", n_classes, minimum=2)
        check_int("depth", depth, minimum=8)
        if (depth - 2) % 6 != 0:
            raise ValueError(f"depth must be 6 n + 2 (8, 14, 20, 26, ...), got {depth!r}")
        check_int("width", width)
        check_dropout(dropout)
        check_int("in_channels", in_channels)
        self.n_classes, self.in_channels = n_classes, in_channels
        n = (depth - 2) // 6
        self.conv1 = conv3x3(in_channels, 16)
        self.bn1 = nn.BatchNorm2d(16)
        self.layer1 = _stage(16, 16 * width, n, 1, dropout)
        self.layer2 = _stage(16 * width, 32 * width, n, 2, dropout)
        self.layer3 = _stage(32 * width, 64 * width, n, 2, dropout)
        self.head = nn.Linear(64 * width, n_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled penultimate features ``(N, 64 width)`` of images ``(N, C, H, W)``."""
        check_images(x, self.in_channels, type(self).__name__)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        return F.adaptive_avg_pool2d(out, 1).flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, n_classes)``."""
        return self.head(self.features(x))


def _stage(in_planes: int, planes: int, count: int, stride: int, dropout: float) -> nn.Sequential:
    layers = [WideBasicBlock(in_planes, planes, stride, dropout)]
    layers += [WideBasicBlock(planes, planes, 1, dropout) for _ in range(count - 1)]
    return nn.Sequential(*layers)


@register_model("wide_resnet")
def wide_resnet(
    n_classes: int, depth: int = 26, width: int = 10, dropout: float = 0.0, in_channels: int = 3
) -> WideResNet:
    """Registry entry for :class:`WideResNet` of any ``depth = 6 n + 2`` and ``width``."""
    return WideResNet(n_classes, depth=depth, width=width, dropout=dropout, in_channels=in_channels)


@register_model("wide_resnet26_10")
def wide_resnet26_10(n_classes: int, dropout: float = 0.0, in_channels: int = 3) -> WideResNet:
    """WRN-26-10 as trained by [FLC] / [GRA] (no dropout by default, as the reference)."""
    return WideResNet(n_classes, depth=26, width=10, dropout=dropout, in_channels=in_channels)
