"""Small convolutional classifiers for 1-D signals (MNIST-1D) and tiny images (8x8 digits).

* :class:`CNN1d` is the ``ConvBase`` of the MNIST-1D paper (Greydanus, "Scaling down deep
  learning", 2020; ``mnist1d/models.py``): three ``Conv1d`` layers of 25 channels -- kernel 5
  then 3 and 3, each with stride 2, padding 1 and a ReLU -- whose flattened output feeds one
  linear layer. On the 40-step MNIST-1D signals the lengths are 40 -> 19 -> 10 -> 5, so the
  head sees 25 * 5 = 125 features and the model has 5,210 parameters (10 classes). We follow
  ConvBase in *flattening* rather than pooling: the position of a pattern carries
  information in MNIST-1D.
* :class:`CNN2d` (our choice; no paper fixes one for the 8x8 digits) is LeNet-shaped: two
  ``3x3`` convolutions (padding 1) each followed by ReLU and ``2x2`` max-pooling
  (8 -> 4 -> 2), then a linear head on the flattened ``channels[1] * 2 * 2`` features.

Both accept flat inputs (``(N, length)`` / ``(N, size * size)``, the layout of the tabular
dataset registry) as well as channel-first ones (``(N, 1, length)`` / ``(N, 1, size, size)``).
Weights use PyTorch's default initialisation; seed them through ``build_model(..., seed=...)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from selfcal._validation import check_int
from selfcal.models._image import check_counts
from selfcal.models.registry import register_model


def conv_length(length: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """Output length of a convolution: ``floor((length + 2 padding - kernel) / stride) + 1``."""
    return (length + 2 * padding - kernel) // stride + 1


class CNN1d(nn.Module):
    """MNIST-1D ``ConvBase``: ``3 x (Conv1d -> ReLU)`` then a linear ``head`` (see module doc).

    ``features(x)`` is the flattened output of the third convolution (after its ReLU), the
    input of ``head``; ``forward(x) = head(features(x))`` are the logits.
    """

    def __init__(self, n_classes: int, length: int = 40, channels: int = 25) -> None:
        super().__init__()
        check_int("n_classes", n_classes, minimum=2)
        check_int("length", length, minimum=3)  # the first kernel (5, padding 1) must fit
        check_int("channels", channels)
        self.n_classes, self.length = n_classes, length
        self.conv1 = nn.Conv1d(1, channels, kernel_size=5, stride=2, padding=1)
        self.conv2 = nn.Conv1d(channels, channels, kernel_size=3, stride=2, padding=1)
        self.conv3 = nn.Conv1d(channels, channels, kernel_size=3, stride=2, padding=1)
        out = conv_length(conv_length(conv_length(length, 5, 2, 1), 3, 2, 1), 3, 2, 1)
        self.head = nn.Linear(channels * out, n_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Flattened conv features ``(N, channels * L3)`` of signals ``(N, L)`` or ``(N, 1, L)``."""
        h = self._as_signals(x)
        for conv in (self.conv1, self.conv2, self.conv3):
            h = torch.relu(conv(h))
        return h.flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, n_classes)``."""
        return self.head(self.features(x))

    def _as_signals(self, x: torch.Tensor) -> torch.Tensor:
        ok = isinstance(x, torch.Tensor) and x.shape[-1:] == (self.length,)
        if ok and x.ndim == 2:
            return x.unsqueeze(1)
        if ok and x.ndim == 3 and x.shape[1] == 1:
            return x
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(
            f"cnn1d expects signals of shape (N, {self.length}) or (N, 1, {self.length}), "
            f"got {shape}"
        )


class CNN2d(nn.Module):
    """Two ``Conv2d(3x3) -> ReLU -> MaxPool(2)`` stages then a linear ``head`` (see module doc).

    ``features(x)`` is the flattened output of the second pooling, the input of ``head``.
    """

    def __init__(self, n_classes: int, size: int = 8, channels: Sequence[int] = (16, 32)) -> None:
        super().__init__()
        check_int("n_classes", n_classes, minimum=2)
        check_int("size", size, minimum=4)  # two 2x2 poolings must leave at least 1x1
        first, second = check_counts(channels, "channels", length=2)
        self.n_classes, self.size = n_classes, size
        self.conv1 = nn.Conv2d(1, first, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(first, second, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(second * (size // 4) ** 2, n_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Flattened pooled features of images ``(N, size**2)`` or ``(N, 1, size, size)``."""
        h = self.pool(torch.relu(self.conv1(self._as_images(x))))
        h = self.pool(torch.relu(self.conv2(h)))
        return h.flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, n_classes)``."""
        return self.head(self.features(x))

    def _as_images(self, x: torch.Tensor) -> torch.Tensor:
        s = self.size
        if isinstance(x, torch.Tensor) and x.ndim == 2 and x.shape[1] == s * s:
            return x.reshape(-1, 1, s, s)
        if isinstance(x, torch.Tensor) and x.ndim == 4 and x.shape[1:] == (1, s, s):
            return x
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"cnn2d expects images (N, {s * s}) or (N, 1, {s}, {s}), got {shape}")


@register_model("cnn1d")
def cnn1d(n_classes: int, length: int = 40, channels: int = 25) -> CNN1d:
    """Registry entry for :class:`CNN1d` (MNIST-1D ``ConvBase``)."""
    return CNN1d(n_classes, length=length, channels=channels)


@register_model("cnn2d")
def cnn2d(n_classes: int, size: int = 8, channels: Sequence[int] = (16, 32)) -> CNN2d:
    """Registry entry for :class:`CNN2d` (8x8 digits)."""
    return CNN2d(n_classes, size=size, channels=tuple(channels))
