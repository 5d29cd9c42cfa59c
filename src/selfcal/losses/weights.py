"""Uncertainty weights ``u(p, y)`` for the uncertainty-weighted cross-entropy ([GRA] eq. 6).

A weight function is a small frozen object with ``__call__(probs, labels) -> u``: ``probs`` is
``(N, C)`` softmax output, ``labels`` ``(N,)`` int64 class indices, ``u`` is ``(N,)`` in the
dtype of ``probs``. They are differentiable; whether the loss differentiates them ("loss"
mode: FL, DFL, BSCE) or treats them as constants ("gradient" mode, GRA) is decided by
:func:`~selfcal.losses.uncertainty_weighted_ce`, not here.

Notation: ``p_y`` is the probability of the true class, ``p_j`` the largest probability strictly
smaller than ``p_y`` (methods §3).

Powers ``b ** gamma`` of a base ``b >= 0``: ``gamma = 0`` gives exactly 1 (so every weight
with a zero exponent is plain CE, even at ``b = 0``); for ``0 < gamma < 1`` (and for tensor
exponents, which may be anything) the base is clamped to the machine epsilon of its dtype
first, because the derivative ``gamma b ** (gamma - 1)`` is infinite at ``b = 0`` (a saturated
softmax). Clamping at the smallest normal float instead keeps it finite but near ``1e37`` in
float32, and the second-order products of a meta-gradient through the loss (γ-Net) overflow to
NaN. The clamp changes only samples with ``1 - p_y < eps`` (``1.2e-7`` in float32), whose
weight and loss are negligible either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from selfcal._validation import check_nonnegative
from selfcal.losses._checks import check_per_sample, gammas_are_checked

FLSD53_THRESHOLD = 0.2
"""FLSD-53 uses gamma = 5 below this true-class probability and gamma = 3 at or above it."""


class WeightFunction(Protocol):
    """``u = weight(probs, labels)``: one non-negative weight per sample."""

    def __call__(self, probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor: ...


def true_class_probability(probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``p_y``: ``probs[i, labels[i]]`` for every row, shape ``(N,)``."""
    return probs.gather(1, labels.unsqueeze(1)).squeeze(1)


def runner_up_probability(probs: torch.Tensor, p_y: torch.Tensor) -> torch.Tensor:
    """``p_j = max{p_k : p_k < p_y}``, or 0 when no class has a smaller probability.

    This is Dual Focal Loss's "second" probability as the reference code computes it (methods §3):
    for a misclassified sample it is the largest probability *below* the true class (not the
    second-largest overall), and classes tied with ``p_y`` do not count."""
    below = torch.where(probs < p_y.unsqueeze(1), probs, 0.0)
    return below.amax(dim=1)


def one_hot_residual(probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``p - onehot(y)``, shape ``(N, C)``: the true column is replaced by ``p_y - 1`` (no
    one-hot matrix is built)."""
    index = labels.unsqueeze(1)
    return probs.scatter(1, index, probs.gather(1, index) - 1)


def power(base: torch.Tensor, exponent: float | torch.Tensor) -> torch.Tensor:
    """``base ** exponent`` for ``base >= 0``, with the conventions of the module docstring."""
    if isinstance(exponent, float):
        if exponent == 0.0:
            return torch.ones_like(base)
        if exponent >= 1.0:
            return base.pow(exponent)
    return base.clamp_min(torch.finfo(base.dtype).eps).pow(exponent)


def _check_gamma(gamma: object) -> float | torch.Tensor:
    """A float >= 0, or a tensor of them (0-D or one per sample; may carry autograd history)."""
    if not isinstance(gamma, torch.Tensor):
        return check_nonnegative("gamma", gamma)
    if not gamma.is_floating_point() or gamma.ndim > 1:
        raise ValueError(
            f"a gamma tensor must be floating point with shape () or (N,), got dtype "
            f"{gamma.dtype} and shape {tuple(gamma.shape)}"
        )
    if gammas_are_checked():
        return gamma
    detached = gamma.detach()
    if not bool(torch.isfinite(detached).all()) or bool((detached < 0).any()):
        raise ValueError("every gamma must be finite and >= 0")
    return gamma


@dataclass(frozen=True)
class FocalWeight:
    """Focal loss weight ``u = (1 - p_y) ** gamma`` ([FLC]; [GRA] eq. 7).

    ``gamma`` is a float, or a tensor with one exponent per sample -- the hook for a γ-Net that
    predicts a sample-wise gamma ([MetaReg]); such a tensor keeps its autograd history, so a
    loss in "loss" mode is differentiable with respect to the network that produced it. (With
    a tensor ``gamma`` the dataclass equality compares tensors and is not meaningful.)
    """

    gamma: float | torch.Tensor

    def __post_init__(self) -> None:
        object.__setattr__(self, "gamma", _check_gamma(self.gamma))

    def __call__(self, probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        gamma = self.gamma
        if isinstance(gamma, torch.Tensor):
            check_per_sample(gamma, probs.shape[0], "gamma")
            gamma = gamma.to(probs.dtype)
        return power(1 - true_class_probability(probs, labels), gamma)


@dataclass(frozen=True)
class FLSD53Weight:
    """FLSD-53 ([FLC] sample-dependent focal): ``u = (1 - p_y) ** gamma_i`` with
    ``gamma_i = 5`` if ``p_y < 0.2`` else ``3``.

    The schedule reads the *true-class* probability ``p_y`` as the reference code does, not the
    predicted confidence [GRA] writes (methods §3). The reference table gives 5 below 0.2 and 3 on
    ``[0.2, 0.5)``; at ``p_y >= 0.5`` the command-line gamma applies, which is 3 for "53" -- so
    3 from 0.2 on. ``gamma_i`` is a per-sample constant (a step function of ``p_y``); ``u`` is
    differentiated through ``p_y`` only.
    """

    def gammas(self, p_y: torch.Tensor) -> torch.Tensor:
        """The per-sample exponents ``gamma_i`` (5.0 or 3.0) for true-class probabilities."""
        low = p_y.detach() < FLSD53_THRESHOLD
        return torch.where(low, 5.0, 3.0).to(p_y.dtype)

    def __call__(self, probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        p_y = true_class_probability(probs, labels)
        return (1 - p_y).pow(self.gammas(p_y))


@dataclass(frozen=True)
class DualFocalWeight:
    """Dual focal loss weight ``u = (1 - p_y + p_j) ** gamma`` ([GRA] eq. 8), with ``p_j`` the
    largest probability strictly below ``p_y`` (0 if none; :func:`runner_up_probability`).

    ``detach_runner_up=True`` reproduces a quirk reported for the reference "DFL-GRA" (methods
    §7.1): only ``p_j`` is detached, so ``u`` still carries gradient through ``p_y`` -- use it
    in "loss" mode (``DualFocalLoss(gra=False, detach_runner_up=True)``, registry name
    ``"dfl-gra-partial"``). The faithful DFL-GRA detaches the whole weight (``gra=True``, the
    default meaning of "-gra"); the version of the reference file we could read does that too.
    """

    gamma: float = 5.0
    detach_runner_up: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "gamma", check_nonnegative("gamma", self.gamma))
        if not isinstance(self.detach_runner_up, bool):
            raise ValueError(f"detach_runner_up must be a bool, got {self.detach_runner_up!r}")

    def __call__(self, probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        p_y = true_class_probability(probs, labels)
        p_j = runner_up_probability(probs, p_y)
        if self.detach_runner_up:
            p_j = p_j.detach()
        return power(1 - p_y + p_j, self.gamma)


@dataclass(frozen=True)
class BrierWeight:
    """Generalised Brier weight in the reference code's form: ``u = ||y - p||_norm ** gamma``
    (the ``norm``-norm over classes of the one-hot residual, raised to ``gamma``; methods §7.1).

    The paper's eq. 3 writes ``sum_k |p_k - y_k| ** gamma`` (a per-class power); the two agree
    only when ``gamma == norm`` -- e.g. ``gamma = 4, norm = 2`` here is the *squared* Brier
    score ``(sum_k (p_k - y_k)**2)**2``. The code form is the one that produced the published
    numbers. With ``norm = 1``, ``||y - p||_1 = 2 (1 - p_y)``, so the weight is ``2**gamma``
    times the focal weight and uses no class but the true one; ``norm >= 2`` uses all classes.
    Defaults ``gamma = 4, norm = 2`` are the repository's only concrete BSCE-GRA settings.
    ``norm`` must be >= 1 (a norm) or ``float("inf")`` (the largest absolute residual).
    """

    gamma: float = 4.0
    norm: float = 2.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "gamma", check_nonnegative("gamma", self.gamma))
        norm = self.norm
        if isinstance(norm, bool) or not isinstance(norm, (int, float)) or not norm >= 1:
            raise ValueError(f"norm must be a real number >= 1 (or inf), got {norm!r}")
        object.__setattr__(self, "norm", float(norm))

    def __call__(self, probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        residual = one_hot_residual(probs, labels)
        distance = torch.linalg.vector_norm(residual, ord=self.norm, dim=1)
        return power(distance, self.gamma)


def focal_gradient_factor(p: torch.Tensor | float, gamma: float) -> torch.Tensor:
    """``g(p, gamma) = (1 - p)**gamma - gamma * p * (1 - p)**(gamma - 1) * log p`` ([GRA] §4.1).

    Focal loss's gradient is ``g(p_y, gamma)`` times cross-entropy's (both depend on the
    parameters only through ``p_y``): ``d FL / d theta = g * d CE / d theta``. ``g`` first rises
    and then falls in ``p`` ([GRA] Fig. 1), the motivation for weighting the gradient instead.

    ``p`` in ``[0, 1]`` (tensor, array or float; non-tensors become float64 tensors). Evaluated
    as ``(1 - p)**gamma * (1 - gamma * p log p / (1 - p))`` with the limits ``p log p / (1 - p)
    -> -1`` at ``p = 1`` and ``0 log 0 = 0``, so ``g(0) = 1`` and ``g(1) = 0`` (``1`` if
    ``gamma = 0``) without NaN.
    """
    gamma = check_nonnegative("gamma", gamma)
    p = p if isinstance(p, torch.Tensor) else torch.as_tensor(p, dtype=torch.float64)
    if not p.is_floating_point():
        p = p.double()
    if bool(torch.isnan(p).any()) or bool(((p < 0) | (p > 1)).any()):
        raise ValueError("p must lie in [0, 1]")
    q = 1 - p
    ratio = torch.where(q > 0, torch.xlogy(p, p) / torch.where(q > 0, q, 1), -1.0)
    return q.pow(gamma) * (1 - gamma * ratio)
