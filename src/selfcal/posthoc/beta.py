"""Beta calibration (Kull, Silva Filho & Flach, 2017): a logistic regression on ``log s`` and
``-log(1 - s)``, binary or one-vs-rest."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

from selfcal._validation import check_flag, check_int
from selfcal.estimator import Check
from selfcal.estimator.loading import FLOATS, NON_NEGATIVE, Fitted
from selfcal.posthoc._base import Calibrator
from selfcal.posthoc._degenerate import Coverage
from selfcal.posthoc._modules import log_one_minus, score_log_probs
from selfcal.posthoc._solvers import (
    MAX_ITER,
    Logistic,
    Solution,
    newton,
    platt_targets,
    warn_not_converged,
)
from selfcal.posthoc._tensors import as_tensor
from selfcal.posthoc.registry import register_calibrator
from selfcal.predictions import Predictions

FACES = ((True, True), (False, True), (True, False), (False, False))
"""Which of ``(a, b)`` are free on each face of ``{a >= 0, b >= 0}`` (the intercept always is)."""


def fit_beta_map(
    log_s: torch.Tensor, log_1ms: torch.Tensor, target: torch.Tensor, max_iter: int
) -> tuple[tuple[float, float, float], Solution]:
    """``(a, b, c)`` minimising the mean binary cross-entropy of
    ``sigmoid(a log s - b log(1 - s) + c)`` against ``target`` subject to ``a, b >= 0``.

    The loss is convex, so the constrained minimum is the unconstrained minimum over one face
    of the constraint set -- all of it, ``a = 0``, ``b = 0`` or ``a = b = 0`` -- that lies
    inside the set: every face is solved by Newton's method (from ``a = b = 1``, ``c = 0``,
    the identity map) and the feasible solution with the lowest loss is kept."""
    ones = torch.ones_like(log_s)
    columns = (log_s, -log_1ms)
    best: tuple[tuple[float, float, float], Solution] | None = None
    for free_a, free_b in FACES:
        picked = [col for col, free in zip(columns, (free_a, free_b)) if free]
        x = torch.stack([*picked, ones], 1)
        start = torch.tensor([1.0] * len(picked) + [0.0], dtype=x.dtype, device=x.device)
        solution = newton(Logistic(x, target), start, max_iter)
        values = iter(solution.theta.tolist())
        a = next(values) if free_a else 0.0
        b = next(values) if free_b else 0.0
        c = next(values)
        if a < 0 or b < 0:
            continue
        if best is None or solution.loss < best[1].loss:
            best = ((a, b, c), solution)
        if free_a and free_b:  # the unconstrained minimum is feasible: it is the answer
            break
    assert best is not None  # the intercept-only face is always feasible
    return best


def beta_logits(
    log_p: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor
) -> torch.Tensor:
    """Calibrated logits from ``log p`` ``(N, C)`` and the maps' ``a, b, c`` ``(R,)``:
    ``u_j = a_j log p_j - b_j log(1 - p_j) + c_j``. One map (``R = 1``, binary): ``[0, u_1]``,
    whose softmax is ``[1 - sigmoid(u_1), sigmoid(u_1)]``. One map per class:
    ``log sigmoid(u_j)``, whose softmax is the renormalised ``sigmoid(u_j) / sum_l
    sigmoid(u_l)``."""
    log_1mp = log_one_minus(log_p)
    if a.shape[0] == 1:
        u = a * log_p[:, 1] - b * log_1mp[:, 1] + c
        return torch.stack([torch.zeros_like(u), u], 1)
    return torch.nn.functional.logsigmoid(a * log_p - b * log_1mp + c)


class BetaModule(torch.nn.Module):
    """:func:`beta_logits` of ``log p`` (``log_softmax(z)``, or ``log(max(p, tiny))``)."""

    if TYPE_CHECKING:  # buffers (TorchScript cannot read string annotations)
        a: torch.Tensor
        b: torch.Tensor
        c: torch.Tensor
    __constants__ = ("from_probs",)

    def __init__(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, from_probs: bool) -> None:
        super().__init__()
        for name, value in (("a", a), ("b", b), ("c", c)):
            self.register_buffer(name, torch.as_tensor(np.asarray(value, dtype=np.float64)))
        self.from_probs = from_probs

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        log_p = score_log_probs(scores.to(self.a.dtype), self.from_probs)
        return beta_logits(log_p, self.a, self.b, self.c)


@register_calibrator("beta")
class BetaCalibration(Calibrator):
    """Beta calibration: ``sigmoid(a log s - b log(1 - s) + c)``, ``a, b >= 0``; one-vs-rest.

    Kull, Silva Filho & Flach (2017) derive the map from two beta-distributed class-conditional
    score densities: ``p' = 1 / (1 + 1 / (e^c s^a / (1 - s)^b))``, a logistic regression on
    the features ``log s`` and ``-log(1 - s)`` fitted by the mean log-loss. Their "abm"
    parametrisation writes ``c = b log(1 - m) - a log m`` with ``m`` the score mapped to 1/2;
    ``a, b >= 0`` keeps the map monotone. The ``betacal`` package enforces that by refitting
    without the feature whose coefficient came out negative (``a`` is checked first, and a
    negative ``b`` after that refit is kept); here the constrained problem is solved exactly
    (every face of ``{a, b >= 0}``, Newton on each, the best feasible one kept -- methods
    §2.4), which agrees with ``betacal`` whenever its refit lands inside the constraints.
    ``betacal`` also clips ``s`` to ``[eps, 1 - eps]`` and fits through scikit-learn's
    ``LogisticRegression(C=99999999999)``; here ``log s`` and ``log(1 - s)`` are exact
    (``log_softmax`` of the logits, and ``log sum_{k != j} p_k``), in float64.

    * Two classes: one map of ``s = p_1``; ``p'_1 = sigmoid(u)``, ``p'_0 = 1 - p'_1``.
    * ``C > 2``: one map per class, of ``s = p_j`` against ``1[y = j]`` (one-vs-rest), then
      renormalised: ``p'_j = sigmoid(u_j) / sum_l sigmoid(u_l)``.

    Each map is fitted to Platt's (1999) smoothed targets by default (``smooth_targets=True``,
    as :class:`~selfcal.posthoc.PlattScaling`): ``(N_+ + 1) / (N_+ + 2)`` for the ``N_+``
    positives of that map, ``1 / (N_- + 2)`` for its ``N_-`` negatives. The log-loss then has
    a minimum even when a class is separable by its features or absent from the labels, and
    no calibrated probability is 0 or 1. ``smooth_targets=False`` fits the 0/1 labels, as
    ``betacal``; on separable scores that has no minimum, and the fit stops after
    ``max_iter`` Newton steps with a :class:`~selfcal.exceptions.CalibrationNotConverged`
    warning.

    **Can change the predicted class** for ``C > 2`` (independent per-class maps) and for two
    classes (``p'_1 > 1/2`` need not coincide with ``s > 1/2``).

    Parameters
    ----------
    smooth_targets : Platt's smoothed targets (default ``True``) or the 0/1 labels.
    max_iter : Newton iterations at most per face (default 100).
    kind : ``"logits"``, ``"probs"`` or ``None`` (default): what a positional score array holds.

    Attributes
    ----------
    a_, b_, c_ : (1,) (binary) or (C,) float64 arrays
    """

    _parameters: ClassVar[dict[str, Check]] = {"smooth_targets": check_flag, "max_iter": check_int}
    _likelihood_fit = True
    _fitted_attributes = ("a_", "b_", "c_")
    _version_1_lacks = ("smooth_targets",)
    _fitted_schema: ClassVar[dict[str, Fitted]] = {
        "a_": Fitted(FLOATS, NON_NEGATIVE),
        "b_": Fitted(FLOATS, NON_NEGATIVE),
        "c_": Fitted(FLOATS),
    }
    _per_class = True
    _rests_on_each_class = True

    def __init__(
        self, smooth_targets: bool = True, max_iter: int = MAX_ITER, kind: str | None = None
    ) -> None:
        self.smooth_targets = smooth_targets
        self.max_iter = max_iter
        self.kind = kind

    def _all_correct_outcome(self, coverage: Coverage) -> str:
        if self.smooth_targets:
            return (
                "returned the fit to Platt's smoothed targets, which keeps every probability "
                "in (0, 1)"
            )
        return "with smooth_targets=False the log-loss has no minimum (see the warning)"

    def _missing_outcome(self, coverage: Coverage) -> str:
        if self.smooth_targets:
            return "those classes' maps are fitted to the smoothed target 1/(n + 2) of no positives"
        return "those classes' maps have no minimum with smooth_targets=False (see the warning)"

    def _fit(self, pred: Predictions) -> None:
        log_p, y = pred.log_probs, pred.require_labels()
        log_1mp = log_one_minus(log_p)
        classes = [1] if pred.n_classes == 2 else list(range(pred.n_classes))
        maps, failed = [], []
        for j in classes:
            target = (y == j).to(log_p.dtype)
            if self.smooth_targets:
                target = platt_targets(target)
            abc, solution = fit_beta_map(log_p[:, j], log_1mp[:, j], target, self.max_iter)
            maps.append(abc)
            if not solution.converged:
                failed.append((j, solution))
        if failed:
            j, solution = failed[0]
            more = f" and {len(failed) - 1} more" if len(failed) > 1 else ""
            warn_not_converged(
                f"BetaCalibration (class {j}{more})",
                solution,
                "that class's scores may separate it from the others",
            )
        a, b, c = (np.array(v, dtype=np.float64) for v in zip(*maps))
        self.a_, self.b_, self.c_ = a, b, c

    def _predict(self, pred: Predictions) -> torch.Tensor:
        log_p = pred.log_probs
        params = (as_tensor(v, log_p) for v in (self.a_, self.b_, self.c_))
        return torch.softmax(beta_logits(log_p, *params), dim=1)

    def _module(self, from_probs: bool) -> torch.nn.Module:
        return BetaModule(self.a_, self.b_, self.c_, from_probs)
