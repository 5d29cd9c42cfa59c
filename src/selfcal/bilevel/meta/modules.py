"""The meta modules: the learned regularisers whose parameters ``phi`` the meta step trains.

Each is an ``nn.Module`` with its own training loss (what the network is trained on, given
``phi``), so the trainer never asks which kind it holds:

* :class:`GammaNet` ([MetaReg] eqs. 3-4, methods §6.1): a per-sample focal-loss exponent from
  the backbone's features. With penultimate features ``x`` (``b x d``), ``k`` learned
  prototypes (the columns of ``A in R^{d x k}``, "k-head attention", ``k`` = number of classes)
  and a linear read-out ``(W in R^{d x 1}, b)``::

      a = x A,   q = softmax_k(a),   x~ = q A^T,   gamma = |x~ W + b| / tau,   tau = 0.01

  This is a soft assignment to prototypes, not ``torch.nn.MultiheadAttention``. The absolute
  value keeps ``gamma >= 0`` (the paper found sigmoid / ReLU / softplus worse). The paper
  "initialises gamma = 1.0" without saying how; we give the read-out a bias and start from
  ``W = 0``, ``b = tau``, so ``gamma == 1`` for every input at initialisation (methods §6.1
  choice). Size: ``d k + d + 1`` parameters (51.8k for ResNet-18 on CIFAR-100, the paper's
  0.46%). The caller must pass *detached* features (``gamma_net(features.detach())``): γ-Net
  is trained only by the meta-objective, and the backbone must not be trained through γ-Net's
  input (methods §6.6 item 5). γ-Net is used during training only and discarded at inference.
  Training loss: the focal loss with the per-sample ``gamma_i`` (sum reduction).
* :class:`UnitL2` (Meta-Calibration's learnable unit-wise L2, [MC], methods §5.2): one L2
  coefficient per element of the head's weight and bias, initialised at 0 and not clamped.
  Training loss: ``sum_i CE_i + sum lambda * theta_head^2``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Literal, NamedTuple, cast

import torch
import torch.nn.functional as F
from torch import nn

from selfcal._inputs import Labels, label_values
from selfcal._validation import check_choice, check_int, check_positive
from selfcal.losses import focal_loss
from selfcal.optim import Params

Method = Literal["gamma-net", "unit-l2"]
METHODS: tuple[str, ...] = ("gamma-net", "unit-l2")
DEFAULT_TAU = 0.01


class LossInputs(NamedTuple):
    """What a meta module's training loss reads besides the logits and labels: the batch's
    detached penultimate ``features``, the ``head`` parameters the logits were computed with,
    the module's parameters ``phi``, and a per-sample exponent ``gamma`` the caller has already
    computed (γ-Net only; ``None`` otherwise)."""

    features: torch.Tensor
    head: Mapping[str, torch.Tensor]
    phi: Mapping[str, torch.Tensor]
    gamma: torch.Tensor | None


class MetaModule(nn.Module):
    """A learned regulariser of the training loss (module doc)."""

    def training_loss(
        self,
        logits: torch.Tensor,
        labels: torch.Tensor | Labels,
        *,
        features: torch.Tensor,
        head: Mapping[str, torch.Tensor],
        phi: Mapping[str, torch.Tensor] | None = None,
        gamma: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The regularised training loss (sum reduction) of ``logits`` with the module's
        parameters ``phi`` (its own, detached, when ``None``: the real step). ``features``: the
        detached penultimate features of the batch; ``head``: the head's parameters
        (``weight``, ``bias``) the logits were computed with; ``gamma``: a per-sample exponent
        already computed by the caller (γ-Net only)."""
        phi = self.detached() if phi is None else phi
        return self._loss(logits, labels, LossInputs(features, head, phi, gamma))

    def _loss(
        self, logits: torch.Tensor, labels: torch.Tensor | Labels, inputs: LossInputs
    ) -> torch.Tensor:
        raise NotImplementedError

    def gamma(self, features: torch.Tensor) -> torch.Tensor | None:
        """The per-sample focal exponent of detached ``features`` (``None`` for a module that
        has none)."""
        return None

    def detached(self) -> Params:
        """The module's own parameters, detached."""
        return {k: p.detach() for k, p in self.named_parameters()}


class GammaNet(MetaModule):
    """``gamma(x) = |softmax(x A) A^T W + b| / tau`` (module doc), one value per row.

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
        return self.gamma_with(features, dict(self.named_parameters()))

    def gamma_with(
        self, features: torch.Tensor, params: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
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

    def gamma(self, features: torch.Tensor) -> torch.Tensor:
        """γ-Net's output on detached ``features``, without gradient."""
        with torch.no_grad():
            return self(features)

    def _loss(
        self, logits: torch.Tensor, labels: torch.Tensor | Labels, inputs: LossInputs
    ) -> torch.Tensor:
        """``sum_i -(1 - p_iy)^gamma_i log p_iy`` with ``gamma = gammaNet(features; phi)``, or
        the given ``gamma`` (the real step passes the detached output it has just checked,
        rather than evaluating γ-Net twice)."""
        gamma = inputs.gamma
        if gamma is None:
            gamma = self.gamma_with(inputs.features, inputs.phi)
        return focal_loss(logits, labels, gamma, reduction="sum")


class UnitL2(MetaModule):
    """Meta-Calibration's learnable unit-wise L2: one coefficient per element of the head's
    weight and bias (parameters ``weight``, ``bias`` shaped like them), initialised at 0 and
    not clamped (as the reference L2 variant). Penalty: ``sum lambda * theta_head^2``."""

    def __init__(self, head: nn.Linear) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros_like(head.weight, requires_grad=False))
        bias = head.bias if head.bias is not None else torch.zeros(0)
        self.bias = nn.Parameter(torch.zeros_like(bias, requires_grad=False))

    def penalty(
        self, head: Mapping[str, torch.Tensor], lam: Mapping[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """``sum_k lam_k * head_k^2`` over ``weight`` and ``bias`` (``lam``: this module's own
        parameters unless given, e.g. the functional ``phi`` inside the engine)."""
        lam = dict(self.named_parameters()) if lam is None else lam
        total = (lam["weight"] * head["weight"].square()).sum()
        if lam["bias"].numel():
            total = total + (lam["bias"] * head["bias"].square()).sum()
        return total

    def _loss(
        self, logits: torch.Tensor, labels: torch.Tensor | Labels, inputs: LossInputs
    ) -> torch.Tensor:
        """``sum_i CE_i + sum lambda * head^2``."""
        ce = F.cross_entropy(logits, label_values(labels), reduction="sum")
        return ce + self.penalty(inputs.head, inputs.phi)


def model_head(model: nn.Module) -> nn.Linear:
    """The model's final ``nn.Linear`` named ``head`` (the model must also expose
    ``features(x)``, the penultimate features)."""
    head = getattr(model, "head", None)
    if not isinstance(head, nn.Linear) or not callable(getattr(model, "features", None)):
        raise ValueError("the model must expose features(x) and a final nn.Linear named 'head'")
    return head


def model_features(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``model.features(x)``: the penultimate features (the model's ``features`` method)."""
    features = cast(Callable[[torch.Tensor], torch.Tensor], model.features)
    return features(x)


def make_meta_module(model: nn.Module, method: str, *, tau: float = DEFAULT_TAU) -> MetaModule:
    """γ-Net sized to ``model.head`` (``d = in_features``, ``k = out_features``) or
    :class:`UnitL2` for it."""
    check_choice("method", method, METHODS)
    head = model_head(model)
    if method == "gamma-net":
        return GammaNet(head.in_features, head.out_features, tau)
    return UnitL2(head)
