"""Affine logit calibrators fitted by NLL: vector scaling, matrix scaling (Guo et al., 2017)
and Platt scaling (Platt, 1999) for binary problems."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from selfcal._validation import check_nonnegative
from selfcal.posthoc._base import Calibrator, as_tensor, scores_as_logits
from selfcal.posthoc.registry import register_calibrator
from selfcal.predictions import Predictions


def _minimise(
    loss_fn: Callable[[torch.Tensor], torch.Tensor], theta0: np.ndarray, device: torch.device
) -> np.ndarray:
    """Minimise a smooth float64 torch loss of a flat parameter vector with scipy's L-BFGS-B
    (gradients by autograd), to tight tolerances."""
    from scipy.optimize import minimize

    def value_and_grad(theta: np.ndarray) -> tuple[float, np.ndarray]:
        t = torch.tensor(theta, dtype=torch.float64, device=device, requires_grad=True)
        loss = loss_fn(t)
        (grad,) = torch.autograd.grad(loss, t)
        return float(loss.detach()), grad.cpu().numpy()

    res = minimize(
        value_and_grad,
        theta0,
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 10_000, "gtol": 1e-10, "ftol": 1e-15},
    )
    return res.x


@register_calibrator("vector")
class VectorScaling(Calibrator):
    """Vector scaling: a scale and a bias per class on the logits, fitted by NLL.

    ``p = softmax(w * z + b)`` with per-class ``w, b`` (``2C`` parameters), fitted by the mean
    validation NLL in float64 (L-BFGS, started from ``w = 1, b = 0``).

    **Can change the predicted class**: per-class scales and biases reorder the logits.
    Given ``probs=``, the scores are ``z = log(p)``.

    Attributes
    ----------
    weight_ : (C,) float64 array
    bias_ : (C,) float64 array
    """

    _fitted_attributes = ("weight_", "bias_")

    def _fit(self, pred: Predictions) -> None:
        z, y = scores_as_logits(pred), pred.require_labels()
        c = pred.n_classes

        def loss(theta: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(z * theta[:c] + theta[c:], y)

        theta = _minimise(loss, np.r_[np.ones(c), np.zeros(c)], pred.device)
        self.weight_, self.bias_ = theta[:c].copy(), theta[c:].copy()

    def _predict(self, pred: Predictions) -> torch.Tensor:
        z = scores_as_logits(pred)
        return torch.softmax(z * as_tensor(self.weight_, z) + as_tensor(self.bias_, z), dim=1)


@register_calibrator("matrix")
class MatrixScaling(Calibrator):
    """Matrix scaling: a full affine map of the logits, fitted by (penalised) NLL.

    ``p = softmax(W z + b)`` with a full ``C x C`` matrix ``W`` and bias
    ``b``, fitted in float64 (L-BFGS, started from ``W = I, b = 0``) by

    ``(1/N) sum_i -log p_{i,y_i} + off_diagonal_l2 * sum_{j != k} W_jk^2 + bias_l2 * |b|^2``

    (both penalties default to 0, i.e. plain NLL; positive values give the ODIR-style
    regularisation of Kull et al., 2019, without their ``1/(C(C-1))``, ``1/C`` scaling).

    **Can change the predicted class.** Given ``probs=``, the scores are ``z = log(p)``.

    Attributes
    ----------
    weight_ : (C, C) float64 array (row ``k`` gives the new logit of class ``k``)
    bias_ : (C,) float64 array
    """

    _hyperparameters = ("off_diagonal_l2", "bias_l2")
    _fitted_attributes = ("weight_", "bias_")

    def __init__(self, off_diagonal_l2: float = 0.0, bias_l2: float = 0.0) -> None:
        self.off_diagonal_l2 = off_diagonal_l2
        self.bias_l2 = bias_l2

    def _validate_hyperparameters(self) -> None:
        check_nonnegative("off_diagonal_l2", self.off_diagonal_l2)
        check_nonnegative("bias_l2", self.bias_l2)

    def _fit(self, pred: Predictions) -> None:
        z, y = scores_as_logits(pred), pred.require_labels()
        c = pred.n_classes
        off = ~torch.eye(c, dtype=torch.bool, device=z.device)
        lam_w, lam_b = float(self.off_diagonal_l2), float(self.bias_l2)

        def loss(theta: torch.Tensor) -> torch.Tensor:
            w, b = theta[: c * c].reshape(c, c), theta[c * c :]
            nll = torch.nn.functional.cross_entropy(z @ w.T + b, y)
            return nll + lam_w * w[off].square().sum() + lam_b * b.square().sum()

        theta = _minimise(loss, np.r_[np.eye(c).ravel(), np.zeros(c)], pred.device)
        self.weight_ = theta[: c * c].reshape(c, c).copy()
        self.bias_ = theta[c * c :].copy()

    def _predict(self, pred: Predictions) -> torch.Tensor:
        z = scores_as_logits(pred)
        return torch.softmax(z @ as_tensor(self.weight_, z).T + as_tensor(self.bias_, z), dim=1)


def positive_score(pred: Predictions) -> torch.Tensor:
    """Binary log-odds score ``s = z_1 - z_0`` (float64). For one-column logits ``z`` this is
    ``z`` itself; for probabilities it is ``log p_1 - log p_0 = logit(p_1)``."""
    z = scores_as_logits(pred)
    return z[:, 1] - z[:, 0]


def _platt_newton(s: torch.Tensor, t: torch.Tensor, max_iter: int = 100) -> tuple[float, float]:
    """Minimise ``mean[softplus(x) - t x]``, ``x = a s + b``, by Newton's method with
    backtracking (the loss is convex in ``(a, b)``), from ``a = 1, b = 0``."""
    design = torch.stack([s, torch.ones_like(s)], 1)
    theta = torch.tensor([1.0, 0.0], dtype=torch.float64, device=s.device)

    def loss(th: torch.Tensor) -> float:
        x = design @ th
        return float((torch.nn.functional.softplus(x) - t * x).mean())

    current = loss(theta)
    for _ in range(max_iter):
        p = torch.sigmoid(design @ theta)
        grad = design.T @ (p - t) / s.shape[0]
        hess = (design.T * (p * (1 - p))) @ design / s.shape[0]
        hess += 1e-12 * torch.eye(2, dtype=torch.float64, device=s.device)
        step = torch.linalg.solve(hess, grad)
        decrement = float(grad @ step)
        if decrement <= 1e-24:
            break
        rate = 1.0
        while rate > 1e-10:
            trial = loss(theta - rate * step)
            if trial <= current - 0.25 * rate * decrement:
                break
            rate *= 0.5
        theta, current = theta - rate * step, trial
    return float(theta[0]), float(theta[1])


@register_calibrator("platt")
class PlattScaling(Calibrator):
    """Platt scaling for binary problems: a sigmoid of the positive-class log-odds.

    ``p_1 = sigmoid(a s + b)``, ``p_0 = 1 - p_1``, on the positive-class log-odds
    ``s = z_1 - z_0`` (``s = logit(p_1)`` given ``probs=``).

    ``(a, b)`` minimise the mean binary cross-entropy against targets ``t_i`` by Newton's
    method in float64. By default ``t_i = y_i`` (maximum likelihood). With
    ``smooth_targets=True`` Platt's (1999) out-of-sample targets are used instead,
    ``t = (N_+ + 1) / (N_+ + 2)`` for positives and ``1 / (N_- + 2)`` for negatives -- what
    scikit-learn's ``CalibratedClassifierCV(method="sigmoid")`` does.

    **Can change the predicted class**: ``sigmoid(a s + b) > 1/2`` iff ``a s + b > 0``, which
    differs from ``s > 0`` unless ``b = 0`` and ``a > 0``.

    Scikit-learn writes the same map as ``1 / (1 + exp(A f + B))``: ``A = -a``, ``B = -b``.
    Multi-class input (``C > 2``) raises ``ValueError``.

    Attributes
    ----------
    slope_, intercept_ : float (``a``, ``b``)
    """

    _hyperparameters = ("smooth_targets",)
    _fitted_attributes = ("slope_", "intercept_")

    def __init__(self, smooth_targets: bool = False) -> None:
        self.smooth_targets = smooth_targets

    def _validate_hyperparameters(self) -> None:
        if not isinstance(self.smooth_targets, bool):
            raise ValueError(f"smooth_targets must be True or False, got {self.smooth_targets!r}")

    def _check_classes(self, n_classes: int) -> None:
        if n_classes != 2:
            raise ValueError(
                f"PlattScaling is for binary problems; got C={n_classes} classes (use "
                "TemperatureScaling, VectorScaling or OneVsRestIsotonic for multi-class)"
            )

    def _fit(self, pred: Predictions) -> None:
        y = pred.require_labels().double()
        t = y
        if self.smooth_targets:
            n_pos = float(y.sum())
            n_neg = y.shape[0] - n_pos
            t = torch.where(y > 0, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
        a, b = _platt_newton(positive_score(pred), t)
        if not (math.isfinite(a) and math.isfinite(b)):  # pragma: no cover - defensive
            raise RuntimeError("Platt scaling failed to converge")
        self.slope_, self.intercept_ = a, b

    def _predict(self, pred: Predictions) -> torch.Tensor:
        p1 = torch.sigmoid(self.slope_ * positive_score(pred) + self.intercept_)
        return torch.stack([1 - p1, p1], 1)
