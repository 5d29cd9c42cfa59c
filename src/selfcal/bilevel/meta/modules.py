"""γ-Net: a per-sample focal-loss exponent from the backbone's features ([MetaReg] eqs. 3-4;
methods spec §6.1).

With penultimate features ``x`` (``b x d``), ``k`` learned prototypes (the columns of
``A in R^{d x k}``, "k-head attention", ``k`` = number of classes) and a linear read-out
``(W in R^{d x 1}, b)``::

    a = x A,   q = softmax_k(a),   x~ = q A^T,   gamma = |x~ W + b| / tau,   tau = 0.01

This is a soft assignment to prototypes, not ``torch.nn.MultiheadAttention``. The absolute
value keeps ``gamma >= 0`` (the paper found sigmoid / ReLU / softplus worse). The paper
"initialises gamma = 1.0" without saying how; we give the read-out a bias and start from
``W = 0``, ``b = tau``, so ``gamma == 1`` for every input at initialisation (spec §6.1 choice).
Size: ``d k + d + 1`` parameters (51.8k for ResNet-18 on CIFAR-100, the paper's 0.46%).

The caller must pass *detached* features (``gamma_net(features.detach())``): γ-Net is trained
only by the meta-objective, and the backbone must not be trained through γ-Net's input
(spec §6.6 item 5). γ-Net is used during training only and discarded at inference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from selfcal._validation import check_int, check_positive

DEFAULT_TAU = 0.01


class GammaNet(nn.Module):
    """``gamma(x) = |softmax(x A) A^T W + b| / tau`` (see module doc), one value per row.

    ``prototypes`` (``A``, ``d x k``) is initialised uniformly in ``[-1/sqrt(d), 1/sqrt(d)]``
    (the scale of ``nn.Linear``'s default; unspecified in the paper) from the global RNG;
    ``readout`` is ``nn.Linear(d, 1)`` with weight 0 and bias ``tau``.
    """

    def __init__(self, feature_dim: int, n_classes: int, tau: float = DEFAULT_TAU) -> None:
        super().__init__()
        check_int("feature_dim", feature_dim)
        check_int("n_classes", n_classes, minimum=2)
        check_positive("tau", tau)
        self.feature_dim, self.n_classes, self.tau = feature_dim, n_classes, float(tau)
        bound = 1.0 / math.sqrt(feature_dim)
        self.prototypes = nn.Parameter(torch.empty(feature_dim, n_classes).uniform_(-bound, bound))
        self.readout = nn.Linear(feature_dim, 1)
        with torch.no_grad():
            self.readout.weight.zero_()
            self.readout.bias.fill_(self.tau)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """``gamma`` of shape ``(b,)`` for detached features ``(b, feature_dim)``."""
        return self.gamma(features, dict(self.named_parameters()))

    def gamma(self, features: torch.Tensor, params: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``|softmax(x A) A^T W + b| / tau`` with the parameters ``params`` (names as in
        ``named_parameters()``: ``prototypes``, ``readout.weight``, ``readout.bias``) instead of
        the module's own: the functional form the meta step differentiates, without the
        per-call cost of ``torch.func.functional_call``."""
        if features.ndim != 2 or features.shape[1] != self.feature_dim:
            raise ValueError(
                f"features must have shape (b, {self.feature_dim}), got {tuple(features.shape)}"
            )
        prototypes = params["prototypes"]
        weights = torch.softmax(features @ prototypes, dim=1)  # q: (b, k)
        attended = weights @ prototypes.T  # x~: (b, d)
        readout = F.linear(attended, params["readout.weight"], params["readout.bias"])
        return readout.squeeze(1).abs() / self.tau
