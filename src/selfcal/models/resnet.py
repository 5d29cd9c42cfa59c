"""CIFAR-style ResNets as in the [FLC] / [GRA] code bases (``Net/resnet.py``).

The architecture (He et al. 2016, adapted to 32x32 inputs by those code bases):

* stem: ``3x3`` convolution, 64 channels, stride 1, BatchNorm, ReLU -- no ``7x7`` convolution
  and no max-pool, so a 32x32 image keeps its resolution;
* four stages of residual blocks with 64, 128, 256, 512 "planes" and strides 1, 2, 2, 2
  (32 -> 32 -> 16 -> 8 -> 4); the stride sits in the first block of a stage (on the ``3x3``
  convolution of a bottleneck); a ``1x1`` convolution + BatchNorm shortcut is used wherever
  the stride or the channel count changes, the identity elsewhere;
* global average pooling, then the linear ``head`` (``512 * expansion -> n_classes``).

Registered configurations (``expansion`` 1 for the basic block, 4 for the bottleneck):

==============  ==========  ==============  =============================
name            block       blocks/stage    parameters (10 classes)
==============  ==========  ==============  =============================
``resnet18``    basic       2, 2, 2, 2      11,173,962 ([MC] / [MetaReg])
``resnet50``    bottleneck  3, 4, 6, 3      23,520,842
``resnet110``   bottleneck  3, 4, 26, 3     45,864,522 (see below)
==============  ==========  ==============  =============================

**"ResNet-110" is the code bases' definition** (methods §7.2): a *bottleneck* ResNet with blocks
``[3, 4, 26, 3]`` (the ``resnet101`` layout with three more blocks in stage 3), not the classic
3-stage CIFAR ResNet-110 of He et al. (``6n + 2``, 1.7M parameters). [GRA]'s ResNet-110
numbers were produced with this network, so we reproduce it.

Pooling choice: the reference pools with ``avg_pool2d(out, 4)``, i.e. over the whole final
4x4 map of a 32x32 input. We use *global* (adaptive) average pooling, which is the same
operation on 32x32 inputs and also accepts Tiny-ImageNet's 64x64 images (8x8 final map).
For [GRA]'s own Tiny-ImageNet network pass ``stem_max_pool=True``: their ``resnet50`` with 200
classes (``ResNetImagenet``) is this network plus a ``3x3``/stride-2 max-pool after the stem
(64 -> 32, so the final map is 4x4 again) and global average pooling. ([FLC]'s separate
Tiny-ImageNet ResNet -- 2x2 adaptive pooling and a 4x wider head -- is not provided.)

Weights use PyTorch's default initialisation, as the reference does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from selfcal._validation import check_choice, check_int
from selfcal.models._image import check_counts, check_images
from selfcal.models.registry import register_model

BlockKind = Literal["basic", "bottleneck"]


def shortcut(in_planes: int, out_planes: int, stride: int) -> nn.Module:
    """Identity, or ``1x1`` convolution + BatchNorm where the stride or the width changes."""
    if stride == 1 and in_planes == out_planes:
        return nn.Identity()
    return nn.Sequential(
        nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False),
        nn.BatchNorm2d(out_planes),
    )


class BasicBlock(nn.Module):
    """``relu(bn(conv3x3(relu(bn(conv3x3(x))))) + shortcut(x))`` with ``expansion = 1``."""

    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = shortcut(in_planes, planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class Bottleneck(nn.Module):
    """``1x1`` (planes) -> ``3x3`` (planes, stride) -> ``1x1`` (4 planes), each with BatchNorm.

    ReLU after the first two, and after adding the shortcut; ``expansion = 4``."""

    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        out_planes = self.expansion * planes
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out_planes, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_planes)
        self.shortcut = shortcut(in_planes, out_planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + self.shortcut(x))


BLOCKS: dict[str, type[BasicBlock] | type[Bottleneck]] = {
    "basic": BasicBlock,
    "bottleneck": Bottleneck,
}
STAGE_PLANES = (64, 128, 256, 512)
STAGE_STRIDES = (1, 2, 2, 2)


class CifarResNet(nn.Module):
    """Four-stage CIFAR ResNet (see module doc); ``blocks`` = residual blocks per stage.

    ``features(x)`` is the globally average-pooled output of the last stage,
    ``(N, 512 * expansion)``: the input of ``head``. ``forward(x) = head(features(x))``.
    """

    def __init__(
        self,
        block: BlockKind,
        blocks: Sequence[int],
        n_classes: int,
        in_channels: int = 3,
        stem_max_pool: bool = False,
    ) -> None:
        super().__init__()
        check_choice("block", block, sorted(BLOCKS))
        blocks = check_counts(blocks, "blocks", length=4)
        check_int("n_classes", n_classes, minimum=2)
        check_int("in_channels", in_channels)
        self.n_classes, self.in_channels = n_classes, in_channels
        self.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.stem_pool = nn.MaxPool2d(3, stride=2, padding=1) if stem_max_pool else nn.Identity()
        kind = BLOCKS[block]
        width = 64
        stages = []
        for planes, stride, count in zip(STAGE_PLANES, STAGE_STRIDES, blocks):
            stages.append(_stage(kind, width, planes, count, stride))
            width = planes * kind.expansion
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.head = nn.Linear(width, n_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled penultimate features ``(N, 512 * expansion)`` of images ``(N, C, H, W)``."""
        check_images(x, self.in_channels, type(self).__name__)
        out = self.stem_pool(F.relu(self.bn1(self.conv1(x))))
        for stage in (self.layer1, self.layer2, self.layer3, self.layer4):
            out = stage(out)
        return F.adaptive_avg_pool2d(out, 1).flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, n_classes)``."""
        return self.head(self.features(x))


def _stage(
    kind: type[BasicBlock] | type[Bottleneck], in_planes: int, planes: int, count: int, stride: int
) -> nn.Sequential:
    """``count`` blocks; the first has ``stride`` and maps ``in_planes`` to the stage width."""
    layers = [kind(in_planes, planes, stride)]
    layers += [kind(planes * kind.expansion, planes) for _ in range(count - 1)]
    return nn.Sequential(*layers)


@register_model("resnet18")
def resnet18(n_classes: int, in_channels: int = 3, stem_max_pool: bool = False) -> CifarResNet:
    """CIFAR ResNet-18: basic blocks ``[2, 2, 2, 2]`` (the backbone of [MC] / [MetaReg])."""
    return CifarResNet("basic", (2, 2, 2, 2), n_classes, in_channels, stem_max_pool)


@register_model("resnet50")
def resnet50(n_classes: int, in_channels: int = 3, stem_max_pool: bool = False) -> CifarResNet:
    """CIFAR ResNet-50: bottleneck blocks ``[3, 4, 6, 3]`` ([FLC] / [GRA])."""
    return CifarResNet("bottleneck", (3, 4, 6, 3), n_classes, in_channels, stem_max_pool)


@register_model("resnet110")
def resnet110(n_classes: int, in_channels: int = 3, stem_max_pool: bool = False) -> CifarResNet:
    """The code bases' "ResNet-110": bottleneck blocks ``[3, 4, 26, 3]`` (see module doc)."""
    return CifarResNet("bottleneck", (3, 4, 26, 3), n_classes, in_channels, stem_max_pool)
