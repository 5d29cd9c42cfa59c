"""What vector and matrix scaling (and the calibrators built on them: Dirichlet calibration,
the structured and mixed variants) share: temperature scaling first, then a ridge-penalised
departure from it (methods §2.3), fitted by :mod:`selfcal.posthoc._solvers`; the calibrators
themselves are in :mod:`selfcal.posthoc.linear` and :mod:`selfcal.posthoc.structured`."""

from __future__ import annotations

import numpy as np
import torch

from selfcal.posthoc._base import Calibrator
from selfcal.posthoc._degenerate import Coverage
from selfcal.posthoc._scores import scores_as_logits
from selfcal.posthoc._solvers import (
    ClassFeatures,
    SharedFeatures,
    Solution,
    lbfgs,
    newton,
    warn_not_converged,
)
from selfcal.posthoc.temperature import TemperatureFit, report_fit, solve_temperature
from selfcal.predictions import Predictions

LBFGS_ITER_FACTOR = 50
"""L-BFGS iterations allowed per unit of ``max_iter`` (an L-BFGS iteration costs one
gradient, a Newton iteration one Hessian)."""

NEWTON_BUDGET = 2e9
"""The shared-features fits (matrix scaling, Dirichlet calibration) use Newton while one
Hessian, ``N (C (C + 1))^2`` multiply-adds, costs at most this (``C <= 20`` at ``N = 10^4``);
beyond it, L-BFGS on the exact gradient."""

RIDGE_L2 = 1.0
"""Default multiplier ``lambda`` of every ridge penalty of the structured fits: the squared
bias and the squared departure of each class's scale from the temperature's are penalised by
``lambda C / N``, an off-diagonal weight by ``lambda C (C - 1) / N`` -- the defaults of
Berta et al.'s structured vector and matrix scaling (probmetrics' ``SVSCalibrator`` /
``SMSCalibrator``, ``lambda = rho = tau = 1``): stronger with more classes, weaker with more
validation rows."""


def ridge_strength(lam: float, n: int, c: int, off_diagonal: bool = False) -> float:
    """The coefficient of one squared parameter: ``lambda C / N``, or ``lambda C (C - 1) / N``
    for an off-diagonal weight."""
    return lam * c * ((c - 1) if off_diagonal else 1) / n


class _StructuredScaling(Calibrator):
    """What vector and matrix scaling (and Dirichlet calibration) share: temperature scaling
    first, then a ridge-penalised departure from it (methods §2.3).

    1. ``beta = 1/T`` by temperature scaling of the scores ``s`` (logits, or ``log p``),
       with its degenerate cases (:func:`~selfcal.posthoc.temperature.solve_temperature`).
    2. On ``x = beta s``: ``softmax(x + Delta x + b)`` minimising the mean NLL plus the ridge
       penalty of :data:`RIDGE_L2` on ``Delta`` and ``b`` (``Delta`` diagonal for vector
       scaling, full for matrix scaling), by Newton's method from ``Delta = 0, b = 0``.

    The map is ``softmax(W s + b)`` with ``W = beta (I + Delta)``, the family of the
    unstructured calibrator (and its optimum, when every ``*_l2`` is 0). With the penalty on,
    the objective is strictly convex, so a minimum exists even when the scores separate the
    classes. When step 1 is not identified (every validation prediction correct, or the
    NLL's minimum at a bound of the temperature's search interval), neither is step 2: the
    map is the identity, with a :class:`~selfcal.exceptions.DegenerateCalibration`
    warning."""

    _per_class = True
    _likelihood_fit = True
    diagonal_l2: float
    off_diagonal_l2: float  # matrix-type maps only
    bias_l2: float
    max_iter: int

    def _scores(self, pred: Predictions) -> torch.Tensor:
        """``s``: what the map acts on (float64)."""
        return scores_as_logits(pred)

    def _temperature(self, pred: Predictions, s: torch.Tensor) -> tuple[float, bool]:
        """Step 1: ``beta``, and whether step 2 can be fitted: not when temperature scaling
        itself is not identified (every prediction correct, or the NLL's minimum at a bound;
        the map is then the identity, and the warning says why)."""
        all_correct = bool(pred.correct.all())
        fit: TemperatureFit = solve_temperature(s, pred.require_labels(), all_correct)
        report_fit(self, fit)
        return 1.0 / fit.temperature, not (all_correct or fit.problem)

    def _vector_step(
        self, x: torch.Tensor, y: torch.Tensor, identified: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """Step 2 of vector scaling: ``(v, b)`` minimising the mean NLL of
        ``softmax((1 + v) * x + b)`` plus ``diagonal_l2 C/N |v|^2 + bias_l2 C/N |b|^2``, by
        Newton's method from 0 (zeros when step 1 is not identified)."""
        n, c = x.shape
        theta = torch.zeros(2 * c, dtype=x.dtype, device=x.device)
        if identified:
            strengths = (float(self.diagonal_l2), float(self.bias_l2))
            penalty = torch.tensor(
                [ridge_strength(lam, n, c) for lam in strengths for _ in range(c)],
                dtype=x.dtype,
                device=x.device,
            )
            solution = newton(ClassFeatures(x, y, penalty), theta, self.max_iter)
            warn_not_converged(
                type(self).__name__,
                solution,
                "raise diagonal_l2 / bias_l2 (the scaled scores may separate the classes)",
            )
            theta = solution.theta
        return theta[:c].cpu().numpy(), theta[c:].cpu().numpy().copy()

    def _matrix_step(
        self, x: torch.Tensor, y: torch.Tensor, identified: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """Step 2 of matrix scaling: ``(I + Delta, b)`` minimising the mean NLL of
        ``softmax((I + Delta) x + b)`` plus the penalty of :func:`structured_penalty`
        (:func:`fit_affine`; ``Delta = 0, b = 0`` when step 1 is not identified)."""
        n, c = x.shape
        delta = torch.zeros(c, c + 1, dtype=x.dtype, device=x.device)
        if identified:
            lams = float(self.bias_l2), float(self.diagonal_l2), float(self.off_diagonal_l2)
            penalty = structured_penalty(n, c, *lams, like=x)
            solution = fit_affine(x, y, penalty, self.max_iter)
            warn_not_converged(
                type(self).__name__,
                solution,
                "raise the *_l2 strengths or max_iter (the scores may separate the classes)",
            )
            delta = solution.theta.reshape(c, c + 1)
        eye = torch.eye(c, dtype=x.dtype, device=x.device)
        return (eye + delta[:, :c]).cpu().numpy(), delta[:, c].cpu().numpy().copy()

    def _all_correct_outcome(self, coverage: Coverage) -> str:
        return (
            "the NLL falls without limit as the map sharpens (every confidence 1); returned "
            "the identity map (the scores unchanged)"
        )

    def _missing_outcome(self, coverage: Coverage) -> str:
        return (
            "those classes' parameters rest on the ridge penalty alone, which holds them at "
            "temperature scaling"
        )


def structured_penalty(
    n: int, c: int, bias_l2: float, diagonal_l2: float, off_diagonal_l2: float, like: torch.Tensor
) -> torch.Tensor:
    """Coefficients of the squared entries of ``[Delta, b]`` (``C x (C + 1)``): on the
    diagonal of ``Delta`` and on ``b`` ``lambda C / N``, off the diagonal
    ``lambda C (C - 1) / N`` (:func:`ridge_strength`)."""
    off = ridge_strength(off_diagonal_l2, n, c, off_diagonal=True)
    penalty = torch.full((c, c + 1), off, dtype=like.dtype, device=like.device)
    penalty[:, :c].fill_diagonal_(ridge_strength(diagonal_l2, n, c))
    penalty[:, c] = ridge_strength(bias_l2, n, c)
    return penalty


def fit_affine(
    x: torch.Tensor, labels: torch.Tensor, penalty: torch.Tensor, max_iter: int
) -> Solution:
    """``argmin`` over ``Delta`` ``(C, C)``, ``b`` ``(C,)`` of the mean NLL of
    ``softmax(x + x Delta^T + b)`` plus ``sum penalty * [Delta, b]^2``, from ``Delta = 0,
    b = 0``; ``theta`` is ``[Delta, b]`` ``(C, C + 1)`` flattened by rows. Newton while a
    Hessian fits :data:`NEWTON_BUDGET`, else L-BFGS."""
    n, c = x.shape
    features = torch.cat([x, torch.ones(n, 1, dtype=x.dtype, device=x.device)], 1)
    objective = SharedFeatures(features, labels, penalty, offset=x)
    start = torch.zeros(c * (c + 1), dtype=x.dtype, device=x.device)
    if n * (c * (c + 1)) ** 2 <= NEWTON_BUDGET:
        return newton(objective, start, max_iter)
    return lbfgs(objective, start, max_iter * LBFGS_ITER_FACTOR)
