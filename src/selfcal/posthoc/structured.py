"""Structured vector and matrix scaling on TS-mix log-probabilities -- SVS and SMS (Berta et
al., "Structured matrix scaling for multi-class calibration", AISTATS 2026), as their library
``probmetrics`` 1.3 defines them (``SVSCalibrator``, ``SMSCalibrator``).

Both are :class:`~selfcal.posthoc._structured_scaling._StructuredScaling` fits whose second
step acts on ``x = log((1 - eps) softmax(z / T) + eps / C)``, the log of temperature scaling
mixed with the uniform distribution ("TS-mix", ``eps = 1 / (n + 1)``), instead of ``z / T``:
:class:`~selfcal.posthoc.linear.VectorScaling` and :class:`~selfcal.posthoc.linear.MatrixScaling`
are the same fits on the logits. The log-probabilities are bounded below by ``log(eps / C)``,
so no validation row dominates the fit through a huge negative feature, and the identity map
(``Delta = 0, b = 0``) is TS-mix itself."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import torch

from selfcal.estimator import Check, checked_value
from selfcal.estimator.loading import POSITIVE, UNIT, Fitted
from selfcal.posthoc._mixing import check_mix, resolve_mix
from selfcal.posthoc._modules import (
    AffineModule,
    MixtureModule,
    TemperatureModule,
    VectorScalingModule,
)
from selfcal.posthoc._solvers import MAX_ITER
from selfcal.posthoc._structured_scaling import RIDGE_L2, _StructuredScaling
from selfcal.posthoc._tensors import as_tensor
from selfcal.posthoc.registry import register_calibrator
from selfcal.predictions import Predictions


def ts_mix_log_probs(z: torch.Tensor, temperature: float, eps: float) -> torch.Tensor:
    """``log((1 - eps) softmax(z / T) + eps / C)``, computed as
    ``logaddexp(log_softmax(z / T) + log(1 - eps), log(eps / C))`` (no underflow; ``eps = 0``
    gives ``log_softmax(z / T)``)."""
    log_p = torch.log_softmax(z / temperature, dim=1)
    if eps == 0.0:
        return log_p
    floor = torch.full_like(log_p, math.log(eps / z.shape[1]))
    return torch.logaddexp(log_p + math.log1p(-eps), floor)


class _TSMixScaling(_StructuredScaling):
    """SVS and SMS: temperature scaling, TS-mix, then the structured step on its logs."""

    _parameters: ClassVar[dict[str, Check]] = {"ts_mix": checked_value(check_mix)}
    _fitted_attributes = ("temperature_", "ts_mix_", "weight_", "bias_")
    _fitted_schema: ClassVar[dict[str, Fitted]] = {
        "temperature_": Fitted(range=POSITIVE),
        "ts_mix_": Fitted(range=UNIT),
    }
    ts_mix: float | str

    def _ts_mix(self, z: torch.Tensor) -> torch.Tensor:
        """``x``: the log of the fitted TS-mix probabilities of logits ``z`` (float64)."""
        return ts_mix_log_probs(z, self.temperature_, self.ts_mix_)

    def _fit(self, pred: Predictions) -> None:
        beta, identified = self._temperature(pred)
        self.temperature_ = 1.0 / beta
        self.ts_mix_ = resolve_mix(self.ts_mix, pred.n_samples)
        x = self._features(pred, self._ts_mix)
        self.weight_, self.bias_ = self._step(x, pred.require_labels(), identified)

    def _step(
        self, x: torch.Tensor, y: torch.Tensor, identified: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _ts_mix_module(self, from_probs: bool) -> torch.nn.Module:
        """Scores -> ``x`` (:class:`MixtureModule` of :class:`TemperatureModule` gives
        ``log((1 - eps) softmax(z / T) + eps / C)``)."""
        return MixtureModule(TemperatureModule(self.temperature_, from_probs), self.ts_mix_)


@register_calibrator("svs")
class StructuredVectorScaling(_TSMixScaling):
    """Structured vector scaling (SVS): a scale and a bias per class on TS-mix log-probabilities.

    ``p = softmax(w * x + b)`` on ``x = log((1 - eps) softmax(z / T) + eps / C)``, fitted in
    float64 (Berta et al. 2026): ``T`` by temperature scaling (unregularised, on the NLL),
    ``eps = 1 / (n + 1)`` (``ts_mix``), then ``w = 1 + v`` and ``b`` minimising

    ``(1/N) sum_i -log p_{i,y_i} + diagonal_l2 C/N sum_k v_k^2 + bias_l2 C/N sum_k b_k^2``

    by Newton's method on the exact ``2C x 2C`` Hessian (beyond about 20 classes by L-BFGS,
    methods §2.3), from ``v = 0, b = 0`` (TS-mix). The
    penalty grows with the number of classes and fades with the validation size. When
    temperature scaling is not identified (every validation prediction correct, or its NLL
    falling to an end of ``[e^-10, e^10]``) the map is TS-mix at ``T = 1``, with a
    :class:`~selfcal.exceptions.DegenerateCalibration` warning.

    :class:`~selfcal.posthoc.linear.VectorScaling` is the same fit on the logits ``z / T``.
    **Can change the predicted class.** Given ``probs=``, the scores are ``z = log(p)``.

    Parameters
    ----------
    ts_mix : ``"auto"`` (default, ``eps = 1 / (n + 1)``) or ``eps`` in ``[0, 1)``.
    diagonal_l2 : ``lambda >= 0`` of the scales' penalty (default 1).
    bias_l2 : ``lambda >= 0`` of the biases' penalty (default 1).
    max_iter : Newton iterations at most (default 100); L-BFGS gets 50 times more.
    kind : ``"logits"``, ``"probs"`` or ``None`` (default): what a positional score array holds.

    Attributes
    ----------
    temperature_ : float
    ts_mix_ : float, ``eps``
    weight_ : (C,) float64 array, ``w`` (on ``x``)
    bias_ : (C,) float64 array
    """

    _vector_map = True

    def __init__(
        self,
        ts_mix: float | str = "auto",
        diagonal_l2: float = RIDGE_L2,
        bias_l2: float = RIDGE_L2,
        max_iter: int = MAX_ITER,
        kind: str | None = None,
    ) -> None:
        self.ts_mix = ts_mix
        self.diagonal_l2 = diagonal_l2
        self.bias_l2 = bias_l2
        self.max_iter = max_iter
        self.kind = kind

    def _step(
        self, x: torch.Tensor, y: torch.Tensor, identified: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        v, b = self._vector_step(x, y, identified)
        return 1.0 + v, b

    def _logits(self, s: torch.Tensor) -> torch.Tensor:
        x = self._ts_mix(s)
        return x * as_tensor(self.weight_, x) + as_tensor(self.bias_, x)

    def _module(self, from_probs: bool) -> torch.nn.Module:
        scale = VectorScalingModule(self.weight_, self.bias_, from_probs=False)
        return torch.nn.Sequential(self._ts_mix_module(from_probs), scale)


@register_calibrator("sms")
class StructuredMatrixScaling(_TSMixScaling):
    """Structured matrix scaling (SMS): a full affine map of TS-mix log-probabilities.

    ``p = softmax(W x + b)`` on ``x = log((1 - eps) softmax(z / T) + eps / C)``, fitted in
    float64 (Berta et al. 2026): ``T`` by temperature scaling, ``eps = 1 / (n + 1)``
    (``ts_mix``), then ``W = I + Delta`` and ``b`` minimising

    ``(1/N) sum_i -log p_{i,y_i} + diagonal_l2 C/N sum_k Delta_kk^2
    + off_diagonal_l2 C(C-1)/N sum_{j != k} Delta_jk^2 + bias_l2 C/N sum_k b_k^2``

    from ``Delta = 0, b = 0`` (TS-mix): Newton's method with the exact ``C(C+1)``-dimensional
    Hessian while it is affordable, L-BFGS on the exact gradient beyond -- in float32 for
    float32 scores (:func:`~selfcal.posthoc._structured_scaling.fit_affine`, methods §2.3).
    The off-diagonal weights are penalised ``C - 1`` times more than the diagonal: with few
    rows per parameter the map stays near TS-mix. Temperature scaling not identified: TS-mix at
    ``T = 1``, warned.

    :class:`~selfcal.posthoc.linear.MatrixScaling` is the same fit on the logits ``z / T``.
    **Can change the predicted class.** Given ``probs=``, the scores are ``z = log(p)``.

    Parameters
    ----------
    ts_mix : ``"auto"`` (default, ``eps = 1 / (n + 1)``) or ``eps`` in ``[0, 1)``.
    off_diagonal_l2 : ``lambda >= 0`` of the off-diagonal penalty (default 1).
    diagonal_l2 : ``lambda >= 0`` of the diagonal penalty (default 1).
    bias_l2 : ``lambda >= 0`` of the intercepts' penalty (default 1).
    max_iter : Newton iterations at most (default 100); L-BFGS gets 50 times more.
    kind : ``"logits"``, ``"probs"`` or ``None`` (default): what a positional score array holds.

    Attributes
    ----------
    temperature_ : float
    ts_mix_ : float, ``eps``
    weight_ : (C, C) float64 array, ``W`` (on ``x``; row ``k`` gives the new logit of class ``k``)
    bias_ : (C,) float64 array
    """

    def __init__(
        self,
        ts_mix: float | str = "auto",
        off_diagonal_l2: float = RIDGE_L2,
        diagonal_l2: float = RIDGE_L2,
        bias_l2: float = RIDGE_L2,
        max_iter: int = MAX_ITER,
        kind: str | None = None,
    ) -> None:
        self.ts_mix = ts_mix
        self.off_diagonal_l2 = off_diagonal_l2
        self.diagonal_l2 = diagonal_l2
        self.bias_l2 = bias_l2
        self.max_iter = max_iter
        self.kind = kind

    def _step(
        self, x: torch.Tensor, y: torch.Tensor, identified: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        return self._matrix_step(x, y, identified)

    def _logits(self, s: torch.Tensor) -> torch.Tensor:
        x = self._ts_mix(s)
        return x @ as_tensor(self.weight_, x).T + as_tensor(self.bias_, x)

    def _module(self, from_probs: bool) -> torch.nn.Module:
        affine = AffineModule(self.weight_, self.bias_, from_probs=False, on_log_probs=False)
        return torch.nn.Sequential(self._ts_mix_module(from_probs), affine)
