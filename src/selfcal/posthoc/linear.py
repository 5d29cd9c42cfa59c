"""Affine logit calibrators fitted by NLL: vector scaling, matrix scaling (Guo et al., 2017)
-- both structured as temperature scaling plus a ridge-penalised departure from it whose
strength scales with the data (Berta et al., 2026) -- and Platt scaling (Platt, 1999) for
binary problems."""

from __future__ import annotations

import math
from typing import ClassVar

import torch

from selfcal._validation import check_flag
from selfcal.estimator import Check
from selfcal.posthoc._base import Calibrator
from selfcal.posthoc._degenerate import Coverage
from selfcal.posthoc._modules import AffineModule, PlattModule, VectorScalingModule
from selfcal.posthoc._scores import scores_as_logits
from selfcal.posthoc._solvers import (
    MAX_ITER,
    Logistic,
    Solution,
    newton,
    platt_targets,
    warn_not_converged,
)
from selfcal.posthoc._structured_scaling import (
    RIDGE_L2,
    _StructuredScaling,
)
from selfcal.posthoc._tensors import as_tensor
from selfcal.posthoc.registry import register_calibrator
from selfcal.predictions import Predictions


@register_calibrator("vector")
class VectorScaling(_StructuredScaling):
    """Vector scaling: a scale and a bias per class on the logits, structured and regularised.

    ``p = softmax(w * z + b)`` with per-class ``w, b`` (``2C`` parameters), fitted in float64
    as temperature scaling followed by a penalised departure from it (methods §2.3): ``T``
    first, then on ``x = z / T`` the map ``softmax((1 + v) * x + b)`` minimising

    ``(1/N) sum_i -log p_{i,y_i} + diagonal_l2 C/N sum_k v_k^2 + bias_l2 C/N sum_k b_k^2``

    by Newton's method on the exact gradient and ``2C x 2C`` Hessian (beyond about 20 classes
    by L-BFGS: ``VECTOR_NEWTON_BUDGET``), from ``v = 0, b = 0``;
    ``w = (1 + v) / T``. The penalty (Berta et al. 2026's structured vector scaling, here on
    the logits) grows with the number of classes and fades with the validation size, so with
    a few hundred rows vector scaling stays near temperature scaling, and with many it is
    the classical unregularised fit (``diagonal_l2 = bias_l2 = 0``; that NLL has no minimum
    when the scaled logits separate the classes, and the fit then stops at ``max_iter``
    with a :class:`~selfcal.exceptions.CalibrationNotConverged` warning).

    **Can change the predicted class**: per-class scales and biases reorder the logits.
    Given ``probs=``, the scores are ``z = log(p)``.

    Parameters
    ----------
    diagonal_l2 : ``lambda >= 0`` of the scales' penalty (default 1; see ``RIDGE_L2``).
    bias_l2 : ``lambda >= 0`` of the biases' penalty (default 1).
    max_iter : Newton iterations at most (default 100; a typical fit takes 5 to 15); L-BFGS
        gets 50 times more.
    kind : ``"logits"``, ``"probs"`` or ``None`` (default): what a positional score array holds.

    Attributes
    ----------
    weight_ : (C,) float64 array
    bias_ : (C,) float64 array
    """

    _fitted_attributes = ("weight_", "bias_")
    _version_1_lacks = ("diagonal_l2", "bias_l2")

    def __init__(
        self,
        diagonal_l2: float = RIDGE_L2,
        bias_l2: float = RIDGE_L2,
        max_iter: int = MAX_ITER,
        kind: str | None = None,
    ) -> None:
        self.diagonal_l2 = diagonal_l2
        self.bias_l2 = bias_l2
        self.max_iter = max_iter
        self.kind = kind

    _vector_map = True

    def _fit(self, pred: Predictions) -> None:
        beta, identified = self._temperature(pred)
        x = self._features(pred, lambda s: beta * s)
        v, b = self._vector_step(x, pred.require_labels(), identified)
        self.weight_, self.bias_ = beta * (1.0 + v), b

    def _logits(self, s: torch.Tensor) -> torch.Tensor:
        return s * as_tensor(self.weight_, s) + as_tensor(self.bias_, s)

    def _module(self, from_probs: bool) -> torch.nn.Module:
        return VectorScalingModule(self.weight_, self.bias_, from_probs)


@register_calibrator("matrix")
class MatrixScaling(_StructuredScaling):
    """Matrix scaling: a full affine map of the logits, structured and regularised.

    ``p = softmax(W z + b)`` with a full ``C x C`` matrix ``W`` and bias ``b``, fitted in
    float64 as temperature scaling followed by a penalised departure from it (methods §2.3):
    ``T`` first, then on ``x = z / T`` the map ``softmax((I + Delta) x + b)`` minimising

    ``(1/N) sum_i -log p_{i,y_i} + diagonal_l2 C/N sum_k Delta_kk^2
    + off_diagonal_l2 C(C-1)/N sum_{j != k} Delta_jk^2 + bias_l2 C/N sum_k b_k^2``

    from ``Delta = 0, b = 0``; ``W = (I + Delta) / T``. This is Berta et al. (2026)'s
    structured matrix scaling with their default strengths, applied to the logits: the
    penalty grows with the number of classes and fades with the validation size, so with few
    rows the map stays near temperature scaling. It replaces the fixed ODIR penalty of Kull
    et al. (2019) that selfcal used before, which left the diagonal free (no minimum on
    separable scores) and did not scale with ``N`` or ``C``. The objective is strictly convex
    when every strength is positive; Newton's method with the exact ``C(C+1)``-dimensional
    Hessian finds it (L-BFGS on the exact gradient when that Hessian is too large, see
    ``NEWTON_BUDGET``: in float32 for float32 scores, methods §2.3), and a fit that reaches
    ``max_iter`` stops with a :class:`~selfcal.exceptions.CalibrationNotConverged` warning.
    All strengths 0 give the classical unregularised matrix scaling.

    **Can change the predicted class.** Given ``probs=``, the scores are ``z = log(p)``.

    Parameters
    ----------
    off_diagonal_l2 : ``lambda >= 0`` of the off-diagonal penalty (default 1; ``RIDGE_L2``).
    diagonal_l2 : ``lambda >= 0`` of the diagonal penalty (default 1).
    bias_l2 : ``lambda >= 0`` of the intercepts' penalty (default 1).
    max_iter : Newton iterations at most (default 100); L-BFGS gets 50 times more.
    kind : ``"logits"``, ``"probs"`` or ``None`` (default): what a positional score array holds.

    Attributes
    ----------
    weight_ : (C, C) float64 array (row ``k`` gives the new logit of class ``k``)
    bias_ : (C,) float64 array
    """

    _fitted_attributes = ("weight_", "bias_")
    _version_1_lacks = ("diagonal_l2",)

    def __init__(
        self,
        off_diagonal_l2: float = RIDGE_L2,
        diagonal_l2: float = RIDGE_L2,
        bias_l2: float = RIDGE_L2,
        max_iter: int = MAX_ITER,
        kind: str | None = None,
    ) -> None:
        self.off_diagonal_l2 = off_diagonal_l2
        self.diagonal_l2 = diagonal_l2
        self.bias_l2 = bias_l2
        self.max_iter = max_iter
        self.kind = kind

    def _fit(self, pred: Predictions) -> None:
        beta, identified = self._temperature(pred)
        x = self._features(pred, lambda s: beta * s)
        w, b = self._matrix_step(x, pred.require_labels(), identified)
        self.weight_, self.bias_ = beta * w, b

    def _logits(self, s: torch.Tensor) -> torch.Tensor:
        return s @ as_tensor(self.weight_, s).T + as_tensor(self.bias_, s)

    def _module(self, from_probs: bool) -> torch.nn.Module:
        return AffineModule(self.weight_, self.bias_, from_probs, on_log_probs=False)


def positive_score(pred: Predictions) -> torch.Tensor:
    """Binary log-odds score ``s = z_1 - z_0`` (float64). For one-column logits ``z`` this is
    ``z`` itself; for probabilities it is ``log p_1 - log p_0 = logit(p_1)``."""
    z = scores_as_logits(pred)
    return z[:, 1] - z[:, 0]


def _platt_newton(
    s: torch.Tensor, t: torch.Tensor, quadratic: bool = False, max_iter: int = MAX_ITER
) -> Solution:
    """Minimise ``mean[softplus(x) - t x]``, ``x = a s + b`` (``+ q s^2`` when ``quadratic``),
    by Newton's method with backtracking (the loss is convex in the coefficients), from
    ``a = 1`` and the others 0: the solver of :mod:`selfcal.posthoc._solvers` on the exact
    Hessian, which stops at the float64 optimum."""
    columns = [s, torch.ones_like(s)] + ([s * s] if quadratic else [])
    theta = torch.zeros(len(columns), dtype=torch.float64, device=s.device)
    theta[0] = 1.0
    return newton(Logistic(torch.stack(columns, 1), t), theta, max_iter)


@register_calibrator("platt")
class PlattScaling(Calibrator):
    """Platt scaling for binary problems: a sigmoid of the positive-class log-odds.

    ``p_1 = sigmoid(a s + b)``, ``p_0 = 1 - p_1``, on the positive-class log-odds
    ``s = z_1 - z_0`` (``s = logit(p_1)`` given ``probs=``).

    ``(a, b)`` minimise the mean binary cross-entropy against targets ``t_i`` by Newton's
    method in float64 (to the float64 optimum, in a few milliseconds). By default
    (``smooth_targets=True``) these are Platt's (1999) out-of-sample targets,
    ``t = (N_+ + 1) / (N_+ + 2)`` for positives and ``1 / (N_- + 2)`` for negatives -- what
    scikit-learn's ``CalibratedClassifierCV(method="sigmoid")`` does: a minimum then exists
    even when the log-odds separate the classes (every validation prediction correct), and
    no confidence reaches 1. ``smooth_targets=False`` is maximum likelihood, ``t_i = y_i``:
    on separable log-odds it has no minimum, and the fit stops after 100 steps with a
    :class:`~selfcal.exceptions.CalibrationNotConverged` warning.

    **Can change the predicted class**: ``sigmoid(a s + b) > 1/2`` iff ``a s + b > 0``, which
    differs from ``s > 0`` unless ``b = 0`` and ``a > 0``.

    Scikit-learn writes the same map as ``1 / (1 + exp(A f + B))``: ``A = -a``, ``B = -b``.
    Multi-class input (``C > 2``) raises ``ValueError``. ``kind`` (``"logits"``, ``"probs"``
    or ``None``, the default): what a positional score array holds (one column: the positive
    class's).

    Attributes
    ----------
    slope_, intercept_ : float (``a``, ``b``)
    """

    _parameters: ClassVar[dict[str, Check]] = {"smooth_targets": check_flag}
    _likelihood_fit = True
    _rests_on_each_class = True
    _fitted_attributes: ClassVar[tuple[str, ...]] = ("slope_", "intercept_")

    def __init__(self, smooth_targets: bool = True, kind: str | None = None) -> None:
        self.smooth_targets = smooth_targets
        self.kind = kind

    def _check_classes(self, n_classes: int) -> None:
        if n_classes != 2:
            raise ValueError(
                f"{type(self).__name__} is for binary problems; got C={n_classes} classes (use "
                "TemperatureScaling, VectorScaling or OneVsRestIsotonic for multi-class)"
            )

    def _fit(self, pred: Predictions) -> None:
        self.slope_, self.intercept_ = self._coefficients(pred, quadratic=False)

    def _coefficients(self, pred: Predictions, quadratic: bool) -> list[float]:
        y = pred.require_labels().double()
        t = platt_targets(y) if self.smooth_targets else y
        solution = _platt_newton(positive_score(pred), t, quadratic)
        warn_not_converged(
            type(self).__name__, solution, "the log-odds may separate the classes (no minimum)"
        )
        coefficients: list[float] = solution.theta.tolist()
        if not all(map(math.isfinite, coefficients)):  # pragma: no cover - defensive
            raise RuntimeError(f"{type(self).__name__} failed to converge")
        return coefficients

    def _all_correct_outcome(self, coverage: Coverage) -> str:
        if self.smooth_targets:
            return (
                "returned the fit to Platt's smoothed targets (n+ + 1)/(n+ + 2) and "
                "1/(n- + 2), whose minimum exists and keeps every confidence below 1"
            )
        return "with smooth_targets=False the likelihood has no minimum (see the warning)"

    def _predict(self, pred: Predictions) -> torch.Tensor:
        p1 = torch.sigmoid(self.slope_ * positive_score(pred) + self.intercept_)
        return torch.stack([1 - p1, p1], 1)

    def _module(self, from_probs: bool) -> torch.nn.Module:
        """``[0, a s + b]``: its softmax is ``[1 - p_1, p_1]``."""
        return PlattModule(self.slope_, self.intercept_, from_probs)


@register_calibrator("quadratic")
class QuadraticScaling(PlattScaling):
    """Quadratic scaling for binary problems: a sigmoid of a quadratic in the log-odds.

    ``p_1 = sigmoid(a s + b + q s^2)`` on the positive-class log-odds ``s = z_1 - z_0``
    (``logit(p_1)`` given ``probs=``): Platt scaling with one more feature, which lets the
    calibration map bend differently for confident positives and negatives (Berta et al.
    2026 rank it among the best binary calibrators; probmetrics' ``quadratic-scaling``). Fitted
    as :class:`PlattScaling` -- Newton's method on the exact 3 x 3 Hessian, to Platt's smoothed
    targets by default (``smooth_targets=True``; a minimum then exists on separable log-odds),
    or maximum likelihood (``smooth_targets=False``, probmetrics' unpenalised fit).

    **Can change the predicted class** (a quadratic can cross 0 twice). Multi-class input
    raises ``ValueError``.

    Attributes
    ----------
    slope_, intercept_, quadratic_ : float (``a``, ``b``, ``q``)
    """

    _fitted_attributes = ("slope_", "intercept_", "quadratic_")

    def _fit(self, pred: Predictions) -> None:
        self.slope_, self.intercept_, self.quadratic_ = self._coefficients(pred, quadratic=True)

    def _predict(self, pred: Predictions) -> torch.Tensor:
        s = positive_score(pred)
        p1 = torch.sigmoid(self.slope_ * s + self.intercept_ + self.quadratic_ * s * s)
        return torch.stack([1 - p1, p1], 1)

    def _module(self, from_probs: bool) -> torch.nn.Module:
        """``[0, a s + b + q s^2]``: its softmax is ``[1 - p_1, p_1]``."""
        return PlattModule(self.slope_, self.intercept_, from_probs, self.quadratic_)
