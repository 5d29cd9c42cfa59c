"""A configurable multilayer perceptron (the "feed-forward network" of [BO4SC])."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from selfcal._validation import check_choice, check_int, check_real, is_int
from selfcal.models.registry import register_model

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU}


@register_model("mlp")
class MLP(nn.Module):
    """``Linear -> activation -> Dropout`` per hidden width, then a linear ``head``.

    ``features(x)`` is the penultimate representation -- the input of ``head`` (after the last
    hidden layer's activation and dropout) -- so ``head(features(x)) == forward(x)``. With
    ``hidden=()`` the model is multinomial logistic regression and ``features`` is the identity.
    Weights use PyTorch's default ``nn.Linear`` initialisation; seed it with
    :func:`~selfcal.models.init_model` or ``build_model("mlp", seed=...)`` (the class itself is
    the registry entry ``"mlp"``).
    """

    def __init__(
        self,
        n_features: int,
        n_classes: int,
        hidden: Sequence[int] = (64, 64),
        activation: str = "relu",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        widths = _check_arguments(n_features, n_classes, hidden, activation, dropout)
        self.n_features = n_features
        self.n_classes = n_classes
        layers: list[nn.Module] = []
        width = n_features
        for out in widths:
            layers += [nn.Linear(width, out), ACTIVATIONS[activation]()]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            width = out
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, n_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Penultimate activations ``(N, hidden[-1])`` (``x`` itself when ``hidden=()``)."""
        if x.shape[-1] != self.n_features:
            raise ValueError(
                f"expected inputs with {self.n_features} features, got shape {tuple(x.shape)}"
            )
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, n_classes)``."""
        return self.head(self.features(x))


def _check_arguments(
    n_features: int, n_classes: int, hidden: Sequence[int], activation: str, dropout: float
) -> tuple[int, ...]:
    """Validate the constructor's arguments; returns the hidden widths as a tuple."""
    check_int("n_features", n_features)
    check_int("n_classes", n_classes, minimum=2)
    widths = () if isinstance(hidden, (str, bytes)) else tuple(hidden)
    if isinstance(hidden, (str, bytes)) or not all(is_int(h) and h >= 1 for h in widths):
        raise ValueError(f"hidden must be a sequence of positive integers, got {hidden!r}")
    check_choice("activation", activation, sorted(ACTIVATIONS))
    check_real("dropout", dropout, 0.0, 1.0, high_open=True)
    return widths


mlp = MLP
"""The former name of the ``"mlp"`` registry entry (now :class:`MLP` itself)."""
