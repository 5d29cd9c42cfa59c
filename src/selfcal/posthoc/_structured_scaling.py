"""What vector and matrix scaling (and the calibrators built on them: Dirichlet calibration,
the structured and mixed variants) share: temperature scaling first, then a ridge-penalised
departure from it (methods §2.3), fitted by :mod:`selfcal.posthoc._solvers`; the calibrators
themselves are in :mod:`selfcal.posthoc.linear` and :mod:`selfcal.posthoc.structured`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar

import numpy as np
import torch

from selfcal._validation import check_int, check_nonnegative
from selfcal.estimator import Check
from selfcal.estimator.loading import FLOATS, Fitted
from selfcal.posthoc._base import Calibrator
from selfcal.posthoc._degenerate import Coverage
from selfcal.posthoc._lbfgs import FLOAT32_GTOL, LBFGS_GTOL, lbfgs
from selfcal.posthoc._likelihoods import AffineLikelihood, VectorLikelihood, chunks
from selfcal.posthoc._scores import rows_as_logits, scores_as_logits
from selfcal.posthoc._solvers import (
    ClassFeatures,
    SharedFeatures,
    Solution,
    newton,
    warn_not_converged,
)
from selfcal.posthoc._temperature_fits import TemperatureFit, report_fit, solve_temperature
from selfcal.predictions import Predictions

LBFGS_ITER_FACTOR = 50
"""L-BFGS iterations allowed per unit of ``max_iter`` (an L-BFGS iteration costs one
gradient, a Newton iteration one Hessian)."""

NEWTON_BUDGET = 2e9
"""Matrix-type maps (``P = C (C + 1)`` parameters) use Newton's method while one Hessian --
``N P^2`` multiply-adds to form, ``P^3`` (a third of it) to factor -- costs at most this
(``C <= 20`` at ``N = 10^4``); beyond it, L-BFGS (:func:`fit_large`), whose gradient costs
``2 N P``. The ``P^3`` term keeps a few rows of many classes off Newton (3 rows x 138
classes: a 2.9 GB Hessian, however few the rows). L-BFGS is already faster from about 10
classes (SMS on 5,000 rows: 53 against 71 ms at 10 classes, 30 against 341 ms at 20); the
budget is kept where every study's fits stay on Newton, whose committed numbers it made."""

VECTOR_NEWTON_BUDGET = 2e7
"""The same for vector-type maps (``P = 2 C``), whose L-BFGS gradient is one elementwise pass
over the rows (no matrix product): Newton up to about 20 classes at ``N = 10^4``, where the
two take the same time (SVS on 5,000 rows: 40 against 33 ms at 20 classes; 235 against
104 ms at 100)."""

RIDGE_L2 = 1.0
"""Default multiplier ``lambda`` of every ridge penalty of the structured fits: the squared
bias and the squared departure of each class's scale from the temperature's are penalised by
``lambda C / N``, an off-diagonal weight by ``lambda C (C - 1) / N`` -- the defaults of
Berta et al.'s structured vector and matrix scaling (probmetrics' ``SVSCalibrator`` /
``SMSCalibrator``, ``lambda = rho = tau = 1``): stronger with more classes, weaker with more
validation rows."""


def use_newton(n: int, c: int, vector: bool) -> bool:
    """Whether the fit of a vector-type (``vector``) or matrix-type map of ``c`` classes on
    ``n`` rows uses Newton's method (:data:`VECTOR_NEWTON_BUDGET`, :data:`NEWTON_BUDGET`)."""
    p = 2 * c if vector else c * (c + 1)
    return n * p**2 + p**3 <= (VECTOR_NEWTON_BUDGET if vector else NEWTON_BUDGET)


def products_dtype(pred: Predictions, vector: bool) -> torch.dtype:
    """The dtype of a structured fit's features and matrix products: float64 for Newton's
    method and for float64 scores; for a large fit (L-BFGS) of lower-precision scores, float32
    (:mod:`selfcal.posthoc._likelihoods`: its optimum is within about ``1e-6`` of the float64
    one in every probability)."""
    if pred.scores.dtype == torch.float64 or use_newton(pred.n_samples, pred.n_classes, vector):
        return torch.float64
    return torch.float32


def ridge_strength(lam: float, n: int, c: int, off_diagonal: bool = False) -> float:
    """The coefficient of one squared parameter: ``lambda C / N``, or ``lambda C (C - 1) / N``
    for an off-diagonal weight."""
    return lam * c * ((c - 1) if off_diagonal else 1) / n


class _StructuredScaling(Calibrator):
    """What vector and matrix scaling (and Dirichlet calibration) share: temperature scaling
    first, then a ridge-penalised departure from it (methods §2.3).

    1. ``beta = 1/T`` by temperature scaling of the scores ``s`` (logits, or ``log p``),
       with its degenerate cases (:func:`~selfcal.posthoc._temperature_fits.solve_temperature`).
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

    _parameters: ClassVar[dict[str, Check]] = {
        "off_diagonal_l2": check_nonnegative,
        "diagonal_l2": check_nonnegative,
        "bias_l2": check_nonnegative,
        "max_iter": check_int,
    }
    _fitted_schema: ClassVar[dict[str, Fitted]] = {
        "weight_": Fitted(FLOATS),
        "bias_": Fitted(FLOATS),
    }
    _per_class = True
    _likelihood_fit = True
    _vector_map: ClassVar[bool] = False
    """Whether the map is vector-type (``2 C`` parameters) rather than matrix-type
    (``C (C + 1)``)."""
    diagonal_l2: float
    off_diagonal_l2: float  # matrix-type maps only
    bias_l2: float
    max_iter: int

    def _scores(self, pred: Predictions) -> torch.Tensor:
        """``s``: what the map acts on (float64)."""
        return scores_as_logits(pred)

    def _score_rows(self, pred: Predictions, rows: slice) -> torch.Tensor:
        """Those rows of :meth:`_scores`, bit for bit."""
        return rows_as_logits(pred, rows)

    def _large(self, pred: Predictions) -> bool:
        """Whether the fit is too large for Newton's method (:func:`use_newton`)."""
        return not use_newton(pred.n_samples, pred.n_classes, self._vector_map)

    def _features(
        self, pred: Predictions, transform: Callable[[torch.Tensor], torch.Tensor]
    ) -> torch.Tensor:
        """``transform(s)``: the features step 2 fits on, whole in float64 for Newton-sized
        fits; for large ones in :func:`products_dtype`, chunk by chunk of rows
        (:func:`~selfcal.posthoc._likelihoods.chunks`; row-wise transforms: the same values,
        without an ``(N, C)`` float64 temporary)."""
        dtype = products_dtype(pred, self._vector_map)
        if dtype == torch.float64:
            return transform(self._scores(pred))
        out = torch.empty(pred.scores.shape, dtype=dtype, device=pred.device)
        for rows in chunks(*pred.scores.shape):
            out[rows] = transform(self._score_rows(pred, rows))
        return out

    def _logits(self, s: torch.Tensor) -> torch.Tensor:
        """The map: calibrated logits of score rows ``s`` (rows of :meth:`_scores`)."""
        raise NotImplementedError

    def _predict(self, pred: Predictions) -> torch.Tensor:
        """``softmax`` of :meth:`_logits`, chunk by chunk of rows
        (:func:`~selfcal.posthoc._likelihoods.chunks`) into one ``(N, C)`` float64 array: the
        float64 scores, features and logits take a chunk each, not three ``(N, C)`` float64
        arrays (below ``2^21`` scores, one chunk: the whole array)."""
        out = torch.empty(pred.scores.shape, dtype=torch.float64, device=pred.device)
        for rows in chunks(*pred.scores.shape):
            out[rows] = torch.softmax(self._logits(self._score_rows(pred, rows)), dim=1)
        return out

    def _temperature(self, pred: Predictions) -> tuple[float, bool]:
        """Step 1: ``beta``, and whether step 2 can be fitted: not when temperature scaling
        itself is not identified (every prediction correct, or the NLL's minimum at a bound;
        the map is then the identity, and the warning says why). Solved on :meth:`_scores`
        for Newton-sized fits; on the scores in their own dtype (the logits, ``log p``) for
        large ones -- the same ``T`` (``log_softmax`` only shifts rows), no float64 copy, and
        the same scores as :class:`~selfcal.posthoc.TemperatureScaling`, so
        :class:`~selfcal.posthoc._temperature_fits.TemperatureFits` solves them once."""
        all_correct = bool(pred.correct.all())
        if self._large(pred):
            s = pred.scores if pred.kind == "logits" else pred.log_probs
        else:
            s = self._scores(pred)
        labels = pred.require_labels()
        fit: TemperatureFit = solve_temperature(s, labels, all_correct, self._shared_fits)
        report_fit(self, fit)
        return 1.0 / fit.temperature, not (all_correct or fit.problem)

    def _vector_step(
        self, x: torch.Tensor, y: torch.Tensor, identified: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """Step 2 of vector scaling: ``(v, b)`` minimising the mean NLL of
        ``softmax((1 + v) * x + b)`` plus ``diagonal_l2 C/N |v|^2 + bias_l2 C/N |b|^2``, from
        0 (zeros when step 1 is not identified): by Newton's method while
        :func:`use_newton`, else by L-BFGS (:func:`fit_large`)."""
        n, c = x.shape
        theta = torch.zeros(2 * c, dtype=torch.float64, device=x.device)
        if identified:
            strengths = (float(self.diagonal_l2), float(self.bias_l2))
            penalty = torch.tensor(
                [ridge_strength(lam, n, c) for lam in strengths for _ in range(c)],
                dtype=torch.float64,
                device=x.device,
            )
            if use_newton(n, c, vector=True):
                solution = newton(ClassFeatures(x, y, penalty), theta, self.max_iter)
            else:
                solution = fit_large(VectorLikelihood(x, y, penalty), theta, self.max_iter)
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
        delta = torch.zeros(c, c + 1, dtype=torch.float64, device=x.device)
        if identified:
            lams = float(self.bias_l2), float(self.diagonal_l2), float(self.off_diagonal_l2)
            penalty = structured_penalty(n, c, *lams, like=delta)
            solution = fit_affine(x, y, penalty, self.max_iter)
            warn_not_converged(
                type(self).__name__,
                solution,
                "raise the *_l2 strengths or max_iter (the scores may separate the classes)",
            )
            delta = solution.theta.reshape(c, c + 1)
        eye = torch.eye(c, dtype=delta.dtype, device=x.device)
        return (eye + delta[:, :c]).cpu().numpy(), delta[:, c].cpu().numpy().copy()

    def _fit_warns_tied_errors(self) -> bool:
        return True  # its temperature-scaling step reports the NLL's minimiser at T's bound

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
    b = 0``; ``theta`` is ``[Delta, b]`` ``(C, C + 1)`` flattened by rows. Newton while
    :func:`use_newton`, else L-BFGS (:func:`fit_large`)."""
    n, c = x.shape
    start = torch.zeros(c * (c + 1), dtype=torch.float64, device=x.device)
    if not use_newton(n, c, vector=False):
        return fit_large(AffineLikelihood(x, labels, penalty), start, max_iter)
    features = torch.cat([x, torch.ones(n, 1, dtype=x.dtype, device=x.device)], 1)
    return newton(SharedFeatures(features, labels, penalty, offset=x), start, max_iter)


def fit_large(
    objective: AffineLikelihood | VectorLikelihood, start: torch.Tensor, max_iter: int
) -> Solution:
    """L-BFGS (:func:`~selfcal.posthoc._lbfgs.lbfgs`) from ``start`` in the variables of the
    objective's preconditioner there, to :data:`~selfcal.posthoc._lbfgs.LBFGS_GTOL` with
    float64 products or :data:`~selfcal.posthoc._lbfgs.FLOAT32_GTOL` with float32 ones --
    and, should the float32 rounding stop it short of that, on from where it stopped with
    float64 products (on the float32 features: no fit seen so far needed this);
    ``LBFGS_ITER_FACTOR`` iterations per unit of ``max_iter``."""
    iterations = max_iter * LBFGS_ITER_FACTOR
    preconditioner = objective.preconditioner(start)
    if objective.x.dtype == torch.float64:
        return lbfgs(objective, start, iterations, preconditioner, LBFGS_GTOL)
    solution = lbfgs(objective, start, iterations, preconditioner, FLOAT32_GTOL)
    if solution.converged or solution.iterations >= iterations:
        return solution
    precise = dataclasses.replace(objective, x=objective.x.double())
    return lbfgs(precise, solution.theta, iterations, preconditioner, LBFGS_GTOL)
