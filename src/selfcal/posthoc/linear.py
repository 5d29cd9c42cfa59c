"""Affine logit calibrators fitted by NLL: vector scaling, matrix scaling (Guo et al., 2017;
with the ODIR regularisation of Kull et al., 2019) and Platt scaling (Platt, 1999) for binary
problems."""

from __future__ import annotations

import math

import torch

from selfcal._validation import check_int, check_nonnegative
from selfcal.posthoc._base import Calibrator, as_tensor, scores_as_logits
from selfcal.posthoc._modules import AffineModule, PlattModule, VectorScalingModule
from selfcal.posthoc._solvers import (
    ClassFeatures,
    Logistic,
    SharedFeatures,
    Solution,
    lbfgs,
    newton,
    warn_not_converged,
)
from selfcal.posthoc.registry import register_calibrator
from selfcal.predictions import Predictions

MAX_ITER = 100
"""Default iteration cap of the Newton solver (L-BFGS: ``LBFGS_ITER_FACTOR`` times more)."""

LBFGS_ITER_FACTOR = 50
"""L-BFGS iterations allowed per unit of ``max_iter`` (an L-BFGS iteration costs one
gradient, a Newton iteration one Hessian)."""

NEWTON_BUDGET = 2e9
"""The shared-features fits (matrix scaling, Dirichlet calibration) use Newton while one
Hessian, ``N (C (C + 1))^2`` multiply-adds, costs at most this (``C <= 20`` at ``N = 10^4``);
beyond it, L-BFGS on the exact gradient."""

ODIR_LAMBDA = 1.0
"""Default ODIR coefficient ``lambda`` of the mean squared off-diagonal weight. Kull et al.
(2019) select ``lambda`` and ``mu`` by cross-validation over ``10^-5 .. 10^6``; the values
their experiments pre-tuned for 10-class networks lie between 0.1 and 250. 1 is a middle of
that range and, on the bundled digits logits, gives a lower test NLL than temperature and
vector scaling (``benchmarks/bench_calibrators.py`` prints the held-out NLL over a grid)."""

ODIR_MU = 1.0
"""Default ODIR coefficient ``mu`` of the mean squared intercept (see :data:`ODIR_LAMBDA`)."""


def check_max_iter(max_iter: object) -> int:
    return check_int("max_iter", max_iter)


@register_calibrator("vector")
class VectorScaling(Calibrator):
    """Vector scaling: a scale and a bias per class on the logits, fitted by NLL.

    ``p = softmax(w * z + b)`` with per-class ``w, b`` (``2C`` parameters), fitted by the mean
    validation NLL in float64 with Newton's method on the exact gradient and ``2C x 2C``
    Hessian (backtracking line search), started from ``w = 1, b = 0``; the biases keep
    ``sum_k b_k = 0`` (adding a constant to every ``b_k`` changes nothing). Newton converges
    quadratically, to the float64 optimum (``tests/posthoc/test_scaling.py`` compares it
    with an independent scipy minimisation). Unregularised, the NLL has no minimum when the
    scaled validation logits separate the classes: the fit then stops at ``max_iter``
    iterations with a :class:`~selfcal.exceptions.CalibrationNotConverged` warning.

    **Can change the predicted class**: per-class scales and biases reorder the logits.
    Given ``probs=``, the scores are ``z = log(p)``.

    Parameters
    ----------
    max_iter : Newton iterations at most (default 100; a typical fit takes 5 to 15).
    kind : ``"logits"`` (default) or ``"probs"``: what a positional score array holds.

    Attributes
    ----------
    weight_ : (C,) float64 array
    bias_ : (C,) float64 array
    """

    _hyperparameters = ("max_iter",)
    _fitted_attributes = ("weight_", "bias_")

    def __init__(self, max_iter: int = MAX_ITER, kind: str = "logits") -> None:
        self.max_iter = max_iter
        self.kind = kind

    def _validate_hyperparameters(self) -> None:
        check_max_iter(self.max_iter)

    def _fit(self, pred: Predictions) -> None:
        z, y = scores_as_logits(pred), pred.require_labels()
        c = pred.n_classes
        start = torch.cat([torch.ones(c), torch.zeros(c)]).to(dtype=z.dtype, device=z.device)
        solution = newton(ClassFeatures(z, y), start, self.max_iter)
        warn_not_converged("VectorScaling", solution, "the scaled logits may separate the classes")
        theta = solution.theta.cpu().numpy()
        self.weight_, self.bias_ = theta[:c].copy(), theta[c:].copy()

    def _predict(self, pred: Predictions) -> torch.Tensor:
        z = scores_as_logits(pred)
        return torch.softmax(z * as_tensor(self.weight_, z) + as_tensor(self.bias_, z), dim=1)

    def _module(self, from_probs: bool) -> torch.nn.Module:
        return VectorScalingModule(self.weight_, self.bias_, from_probs)


def odir_penalty(c: int, d: int, lam: float, mu: float, like: torch.Tensor) -> torch.Tensor:
    """Coefficients of the squared entries of ``[W, b]`` (``C x (C + 1)``, ``d = C + 1``) in
    the ODIR penalty ``lam * mean_{j != k} W_jk^2 + mu * mean_k b_k^2``: ``lam / (C (C - 1))``
    off the diagonal of ``W``, 0 on it, ``mu / C`` on ``b``."""
    penalty = torch.full((c, d), lam / (c * (c - 1)), dtype=like.dtype, device=like.device)
    penalty[:, :c].fill_diagonal_(0.0)
    penalty[:, c] = mu / c
    return penalty


def fit_affine(
    features: torch.Tensor,
    labels: torch.Tensor,
    lam: float,
    mu: float,
    max_iter: int,
) -> Solution:
    """``argmin`` over ``W`` ``(C, C)``, ``b`` ``(C,)`` of the mean NLL of
    ``softmax(x W^T + b)`` plus the ODIR penalty of :func:`odir_penalty`, from ``W = I,
    b = 0``; ``theta`` is ``[W, b]`` ``(C, C + 1)`` flattened by rows. Newton while a Hessian
    fits :data:`NEWTON_BUDGET`, else L-BFGS."""
    n, c = features.shape
    x = torch.cat([features, torch.ones(n, 1, dtype=features.dtype, device=features.device)], 1)
    objective = SharedFeatures(x, labels, odir_penalty(c, c + 1, lam, mu, x))
    start = torch.cat([torch.eye(c), torch.zeros(c, 1)], 1).to(x).reshape(-1)
    if n * (c * (c + 1)) ** 2 <= NEWTON_BUDGET:
        return newton(objective, start, max_iter)
    return lbfgs(objective, start, max_iter * LBFGS_ITER_FACTOR)


@register_calibrator("matrix")
class MatrixScaling(Calibrator):
    """Matrix scaling with ODIR regularisation: a full affine map of the logits.

    ``p = softmax(W z + b)`` with a full ``C x C`` matrix ``W`` and bias ``b``, fitted in
    float64 from ``W = I, b = 0`` by the penalised mean NLL of Kull et al. (2019)'s ODIR
    (off-diagonal and intercept regularisation):

    ``(1/N) sum_i -log p_{i,y_i} + lambda / (C (C - 1)) sum_{j != k} W_jk^2
    + mu / C sum_k b_k^2``

    with ``lambda = off_diagonal_l2`` and ``mu = bias_l2`` -- the mean squared off-diagonal
    entry and the mean squared intercept, as in their paper (their code's ``reg_norm=True``).
    The diagonal of ``W`` is free, so temperature and vector scaling are special cases.
    Differences from their ``dirichletcal`` package: it penalises the plain sums unless
    ``reg_norm=True``, and by default (``ref_row=True``) subtracts the last row from ``W``
    and ``b`` before the penalty, which makes the fit depend on the class order; here ``W``
    is penalised as fitted, the same for every class order. See methods §2.3.

    Unregularised (``off_diagonal_l2 = bias_l2 = 0``, the default before ODIR), the NLL has
    no minimum when the validation logits are separable -- on the bundled digits validation
    logits a fit ran for minutes. With the penalty on by default it has one; Newton's method
    with the exact ``C(C+1)``-dimensional Hessian finds it (L-BFGS on the exact gradient when
    that Hessian is too large, see ``NEWTON_BUDGET``), and a fit that reaches ``max_iter``
    stops with a :class:`~selfcal.exceptions.CalibrationNotConverged` warning.

    **Can change the predicted class.** Given ``probs=``, the scores are ``z = log(p)``.

    Parameters
    ----------
    off_diagonal_l2 : ``lambda >= 0`` (default 1; see ``ODIR_LAMBDA``).
    bias_l2 : ``mu >= 0`` (default 1; see ``ODIR_MU``).
    max_iter : Newton iterations at most (default 100); L-BFGS gets 50 times more.
    kind : ``"logits"`` (default) or ``"probs"``: what a positional score array holds.

    Attributes
    ----------
    weight_ : (C, C) float64 array (row ``k`` gives the new logit of class ``k``)
    bias_ : (C,) float64 array
    """

    _hyperparameters = ("off_diagonal_l2", "bias_l2", "max_iter")
    _fitted_attributes = ("weight_", "bias_")

    def __init__(
        self,
        off_diagonal_l2: float = ODIR_LAMBDA,
        bias_l2: float = ODIR_MU,
        max_iter: int = MAX_ITER,
        kind: str = "logits",
    ) -> None:
        self.off_diagonal_l2 = off_diagonal_l2
        self.bias_l2 = bias_l2
        self.max_iter = max_iter
        self.kind = kind

    def _validate_hyperparameters(self) -> None:
        check_nonnegative("off_diagonal_l2", self.off_diagonal_l2)
        check_nonnegative("bias_l2", self.bias_l2)
        check_max_iter(self.max_iter)

    def _features(self, pred: Predictions) -> torch.Tensor:
        """What the affine map acts on: the logits (``log p`` given probabilities)."""
        return scores_as_logits(pred)

    def _fit(self, pred: Predictions) -> None:
        c = pred.n_classes
        solution = fit_affine(
            self._features(pred),
            pred.require_labels(),
            float(self.off_diagonal_l2),
            float(self.bias_l2),
            self.max_iter,
        )
        warn_not_converged(
            type(self).__name__,
            solution,
            "raise off_diagonal_l2 / bias_l2 or max_iter (the scores may separate the classes)",
        )
        theta = solution.theta.reshape(c, c + 1).cpu().numpy()
        self.weight_ = theta[:, :c].copy()
        self.bias_ = theta[:, c].copy()

    def _predict(self, pred: Predictions) -> torch.Tensor:
        z = self._features(pred)
        return torch.softmax(z @ as_tensor(self.weight_, z).T + as_tensor(self.bias_, z), dim=1)

    def _module(self, from_probs: bool) -> torch.nn.Module:
        return AffineModule(self.weight_, self.bias_, from_probs, on_log_probs=False)


def positive_score(pred: Predictions) -> torch.Tensor:
    """Binary log-odds score ``s = z_1 - z_0`` (float64). For one-column logits ``z`` this is
    ``z`` itself; for probabilities it is ``log p_1 - log p_0 = logit(p_1)``."""
    z = scores_as_logits(pred)
    return z[:, 1] - z[:, 0]


def _platt_newton(s: torch.Tensor, t: torch.Tensor, max_iter: int = MAX_ITER) -> Solution:
    """Minimise ``mean[softplus(x) - t x]``, ``x = a s + b``, by Newton's method with
    backtracking (the loss is convex in ``(a, b)``), from ``a = 1, b = 0``: the solver of
    :mod:`selfcal.posthoc._solvers` on the exact 2 x 2 Hessian, which stops at the float64
    optimum (the loop used before stopped only at a decrement of ``1e-24``, below the
    rounding floor of most data, and so ran all its 100 iterations of 34 halvings each)."""
    design = torch.stack([s, torch.ones_like(s)], 1)
    theta = torch.tensor([1.0, 0.0], dtype=torch.float64, device=s.device)
    return newton(Logistic(design, t), theta, max_iter)


@register_calibrator("platt")
class PlattScaling(Calibrator):
    """Platt scaling for binary problems: a sigmoid of the positive-class log-odds.

    ``p_1 = sigmoid(a s + b)``, ``p_0 = 1 - p_1``, on the positive-class log-odds
    ``s = z_1 - z_0`` (``s = logit(p_1)`` given ``probs=``).

    ``(a, b)`` minimise the mean binary cross-entropy against targets ``t_i`` by Newton's
    method in float64 (to the float64 optimum, in a few milliseconds; when the log-odds
    separate the classes there is no minimum and the fit stops after 100 steps with a
    :class:`~selfcal.exceptions.CalibrationNotConverged` warning). By default ``t_i = y_i``
    (maximum likelihood). With
    ``smooth_targets=True`` Platt's (1999) out-of-sample targets are used instead,
    ``t = (N_+ + 1) / (N_+ + 2)`` for positives and ``1 / (N_- + 2)`` for negatives -- what
    scikit-learn's ``CalibratedClassifierCV(method="sigmoid")`` does.

    **Can change the predicted class**: ``sigmoid(a s + b) > 1/2`` iff ``a s + b > 0``, which
    differs from ``s > 0`` unless ``b = 0`` and ``a > 0``.

    Scikit-learn writes the same map as ``1 / (1 + exp(A f + B))``: ``A = -a``, ``B = -b``.
    Multi-class input (``C > 2``) raises ``ValueError``. ``kind`` (``"logits"`` default, or
    ``"probs"``): what a positional score array holds (one column: the positive class's).

    Attributes
    ----------
    slope_, intercept_ : float (``a``, ``b``)
    """

    _hyperparameters = ("smooth_targets",)
    _fitted_attributes = ("slope_", "intercept_")

    def __init__(self, smooth_targets: bool = False, kind: str = "logits") -> None:
        self.smooth_targets = smooth_targets
        self.kind = kind

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
            # float64 targets (a where() of two Python floats would be float32)
            t = torch.full_like(y, 1 / (n_neg + 2)).masked_fill(y > 0, (n_pos + 1) / (n_pos + 2))
        solution = _platt_newton(positive_score(pred), t)
        warn_not_converged(
            "PlattScaling", solution, "the log-odds may separate the classes (no minimum)"
        )
        a, b = solution.theta.tolist()
        if not (math.isfinite(a) and math.isfinite(b)):  # pragma: no cover - defensive
            raise RuntimeError("Platt scaling failed to converge")
        self.slope_, self.intercept_ = a, b

    def _predict(self, pred: Predictions) -> torch.Tensor:
        p1 = torch.sigmoid(self.slope_ * positive_score(pred) + self.intercept_)
        return torch.stack([1 - p1, p1], 1)

    def _module(self, from_probs: bool) -> torch.nn.Module:
        """``[0, a s + b]``: its softmax is ``[1 - p_1, p_1]``."""
        return PlattModule(self.slope_, self.intercept_, from_probs)
