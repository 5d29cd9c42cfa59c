"""Conditional conformal prediction over possibly overlapping groups of rows (Gibbs, Cherian &
Candès 2023): sets that cover at ``1 - alpha`` within every group at once (methods §10).

:class:`ConditionalConformal` is a :class:`~selfcal.conformal.split.SplitConformal` (same
scores, hyperparameters, ``fit`` / ``predict_set`` / ``save`` / ``load``) whose threshold is
the augmented quantile regression over the group indicators, found exactly by
:mod:`selfcal.conformal._conditional`.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, ClassVar, Self

import numpy as np
import torch

from selfcal._inputs import Groups
from selfcal._validation import check_flag
from selfcal._warnings import warn_unseen_groups
from selfcal.conformal._conditional import cutoff
from selfcal.conformal._mondrian import too_small
from selfcal.conformal._set_module import seeded_generator
from selfcal.conformal.scores import check_alpha
from selfcal.conformal.split import PREDICT_STREAM, SplitConformal
from selfcal.estimator import Check
from selfcal.estimator.loading import (
    FLOATS,
    INTEGER,
    INTEGERS,
    NON_NEGATIVE,
    TEXTS,
    Fitted,
    FittedRange,
    probe_logits,
)
from selfcal.exceptions import DegenerateCalibration
from selfcal.predictions import ArrayLike, Predictions

__all__ = ["ConditionalConformal"]

CUTOFF_STREAM = 0xC0DE
"""The randomised variant draws each test row's ``U`` from a numpy generator seeded with
``seed ^ PREDICT_STREAM ^ CUTOFF_STREAM`` (the same input gives the same sets)."""


class ConditionalConformal(SplitConformal):
    """Prediction sets with coverage ``1 - alpha`` in every one of ``m`` possibly
    overlapping groups of rows: conditional conformal prediction over the class ``F`` spanned
    by an intercept and the group indicators (Gibbs, Cherian & Candès 2023, "Conformal
    prediction with conditional guarantees", their finite-dimensional method).

    ``fit(..., groups=g)`` takes the rows' groups by the input contract
    (:func:`selfcal._inputs.as_groups`): membership columns (an ``(N, m)`` 0/1 matrix, a
    mapping ``{name: column}``; a row may be in several groups or none) or one label per row
    (a partition). It keeps the non-conformity scores ``S_i`` of the true labels (as
    :class:`SplitConformal` computes them: ``nonconformity``, ``randomized``, ``seed``...)
    and the rows' membership patterns. For a test row with features ``phi = (1, 1{x in
    G_1}, ..., 1{x in G_m})``, label ``y`` is in the set iff ``S(x, y) <= S*(phi)``, where
    ``S*`` is the largest imputed score ``S`` at which the quantile regression at level
    ``tau = 1 - alpha`` fitted on the calibration rows plus ``(phi, S)`` still puts the test
    row on or above its fit -- computed exactly, without a search, by two linear programs
    per distinct membership pattern (:mod:`selfcal.conformal._conditional`).

    What is promised, with calibration and test rows i.i.d. (exchangeable):

    * ``randomized_cutoff=False`` (the paper's conservative, non-randomised set):
      ``P(Y in C(X) | X in G_j) >= 1 - alpha`` for every group ``j`` at once, and marginally
      (the intercept). Over-coverage is bounded when the scores have no ties:
      ``P(Y in C(X) | X in G_j) <= 1 - alpha + d / ((n + 1) P(X in G_j))``, ``d = m + 1``
      features (their Theorem 2), so a rare group may be over-covered.
    * ``randomized_cutoff=True``: the paper's randomised set, each test row with its own
      ``U ~ Uniform(-alpha, 1 - alpha)`` (the cutoff at ``c = U`` instead of ``1 - alpha``):
      coverage exactly ``1 - alpha`` in every group (given scores without ties), at the cost
      of one pair of programs per test row rather than per pattern, and of sets that depend
      on the draw.

    The guarantee is for the ``G_j`` (and any non-negative weighting in their span), not for
    other sets of rows: the intersection of two groups, or a group not given, is covered
    only as the marginal predictor covers it; nor is anything promised under a shift
    between calibration and test rows.

    For a partition (every row in exactly one group) the conservative set is
    ``SplitConformal(mondrian="group")``'s: each group's threshold is the
    ``ceil((n_j + 1)(1 - alpha))``-th smallest score of its calibration rows. A group with
    fewer than ``ceil(1 / alpha) - 1`` calibration rows cannot balance the regression: the
    rows in it get every label (threshold ``+inf``), with a
    :class:`~selfcal.exceptions.DegenerateCalibration` warning at fit. A test row in a group
    unseen at fit time gets every label, with a ``UserWarning`` naming the group (nothing was
    calibrated for it).

    Cost: ``fit`` stores the ``n`` scores and patterns (``O(n m)``); :meth:`predict_set`
    solves, per distinct membership pattern of the test rows (per test row with
    ``randomized_cutoff``), one HiGHS dual-simplex program over ``n`` bounded variables and
    ``m + 1`` equalities, and one over ``m + 1`` variables and at most ``2P`` inequalities
    (``P`` distinct calibration patterns); a pattern's cutoff is cached. A file holds the
    calibration scores, so it grows with ``n``.

    Fitted: ``calibration_scores_`` (``(n,)`` float64), ``patterns_`` (``(P, m)`` int64 0/1,
    the distinct calibration patterns), ``calibration_patterns_`` (``(n,)`` int64, each row's
    pattern), ``group_names_``, ``group_counts_`` (``(m,)`` calibration rows per group),
    ``n_calibration_``, ``class_counts_``, ``n_classes_``.
    """

    _parameters: ClassVar[dict[str, Check]] = {"randomized_cutoff": check_flag}
    """The others are :class:`SplitConformal`'s checks (merged along the bases)."""
    _fitted_attributes: ClassVar[tuple[str, ...]] = (
        "calibration_scores_",
        "patterns_",
        "calibration_patterns_",
        "n_calibration_",
        "class_counts_",
        "group_names_",
        "group_counts_",
    )
    _fitted_schema: ClassVar[dict[str, Fitted]] = {
        "calibration_scores_": Fitted(FLOATS, NON_NEGATIVE),
        "patterns_": Fitted(INTEGERS, FittedRange(0.0, 1.0)),
        "calibration_patterns_": Fitted(INTEGERS, NON_NEGATIVE),
        "n_calibration_": Fitted(INTEGER, FittedRange(1.0)),
        "class_counts_": Fitted(INTEGERS, NON_NEGATIVE),
        "group_names_": Fitted(TEXTS),
        "group_counts_": Fitted(INTEGERS, NON_NEGATIVE),
    }
    _stored_names: ClassVar[dict[str, str]] = {}

    def __init__(
        self,
        alpha: float = 0.1,
        nonconformity: str = "aps",
        randomized: bool = True,
        randomized_cutoff: bool = False,
        penalty: float = 0.01,
        k_reg: int = 1,
        weight: float = 0.2,
        seed: int = 0,
        kind: str | None = None,
    ) -> None:
        self.alpha = alpha
        self.nonconformity = nonconformity
        self.randomized = randomized
        self.randomized_cutoff = randomized_cutoff
        self.penalty = penalty
        self.k_reg = k_reg
        self.weight = weight
        self.seed = seed
        self.kind = kind

    def fit(
        self,
        X: Predictions | ArrayLike | None = None,
        y: ArrayLike | None = None,
        /,
        *,
        logits: ArrayLike | None = None,
        probs: ArrayLike | None = None,
        labels: ArrayLike | None = None,
        groups: ArrayLike | None = None,
    ) -> Self:
        """Keep the calibration rows' scores and membership patterns; returns ``self``.

        Inputs as :meth:`SplitConformal.fit`; ``groups=`` (membership columns or one label a
        row, or those of a ``Predictions``) is required."""
        self._check_params()
        alpha = check_alpha(self.alpha)
        pred = self._resolve_inputs(X, y, logits, probs, labels, True)
        found = self._groups(pred, groups, "conditional")
        assert found is not None
        labels_ = pred.require_labels()
        gen = seeded_generator(int(self.seed), pred.device)
        scores = self._scores(pred, gen, labels_)
        membership = _membership(found)
        patterns, inverse = np.unique(membership, axis=0, return_inverse=True)
        self.calibration_scores_ = scores.double().cpu().numpy()
        self.patterns_ = patterns.astype(np.int64)
        self.calibration_patterns_ = inverse.reshape(-1).astype(np.int64)
        self.group_names_ = list(found.names)
        self.group_counts_ = membership.sum(0).astype(np.int64)
        self.n_calibration_ = pred.n_samples
        counts = torch.bincount(labels_, minlength=pred.n_classes)
        self.class_counts_ = counts.cpu().numpy().astype(np.int64)
        self.n_classes_ = pred.n_classes
        self._cutoffs: dict[bytes, float] = {}
        self._warn_small(self.group_counts_, self.group_names_, alpha)
        return self

    def predict_set(
        self,
        X: Predictions | ArrayLike | None = None,
        /,
        *,
        logits: ArrayLike | None = None,
        probs: ArrayLike | None = None,
        groups: ArrayLike | None = None,
    ) -> Any:
        """The ``(N, C)`` boolean sets in the caller's form: label ``k`` is in row ``i``'s
        set iff its score is at most the cutoff of row ``i``'s membership pattern.

        ``groups=`` (or the groups of a ``Predictions``) is required. Membership columns
        must name every group of fit time (``group_names_``); one label a row may name a
        subset of them. A row in a group unseen at fit time gets every label, with a
        ``UserWarning``."""
        pred = self._fitted_predictions(X, logits, probs)
        found = self._groups(pred, groups, "conditional")
        assert found is not None
        scores = self._predict_scores(pred)
        thresholds = torch.as_tensor(self.row_cutoffs(found), device=pred.device)
        return pred.output(scores <= thresholds.unsqueeze(1))

    def row_cutoffs(self, groups: Groups) -> np.ndarray:
        """``(N,)`` float64: each row's cutoff ``S*`` (class doc); ``+inf`` for a row in a
        group unseen at fit time (with a ``UserWarning`` naming it)."""
        self._check_fitted()
        membership, unseen = self._test_membership(groups)
        tau = 1.0 - check_alpha(self.alpha)
        args = (self.calibration_scores_, self.calibration_patterns_, self.patterns_)
        if self.randomized_cutoff:
            seed = int(self.seed) ^ PREDICT_STREAM ^ CUTOFF_STREAM
            draws = np.random.default_rng(seed).uniform(tau - 1.0, tau, len(membership))
            out = np.array([cutoff(*args, row, tau, u) for row, u in zip(membership, draws)])
        else:
            patterns, inverse = np.unique(membership, axis=0, return_inverse=True)
            cache = self.__dict__.setdefault("_cutoffs", {})
            for p in patterns:
                if p.tobytes() not in cache:
                    cache[p.tobytes()] = cutoff(*args, p, tau, tau)
            table = np.array([cache[p.tobytes()] for p in patterns], dtype=np.float64)
            out = table[inverse.reshape(-1)] if len(membership) else np.zeros(0)
        out[unseen] = math.inf
        return out.astype(np.float64)

    def to_module(self, kind: str | None = None) -> torch.nn.Module:
        """Not available: the sets need each row's groups, which a module of scores alone
        does not get (use :meth:`predict_set` with ``groups=``)."""
        raise ValueError(
            "to_module: a conditional conformal predictor needs each row's groups, which a "
            "module of scores alone does not get; use predict_set(..., groups=)"
        )

    # ------------------------------------------------------------------ helpers
    def _groups(self, pred: Predictions, groups: ArrayLike | None, mode: str) -> Groups | None:
        if groups is not None:
            pred = pred.with_groups(groups)
        if pred.groups is None:
            raise ValueError("ConditionalConformal needs each row's groups: pass groups=")
        return pred.groups

    def _test_membership(self, groups: Groups) -> tuple[np.ndarray, np.ndarray]:
        """``(N, m)`` int64 membership in the fitted groups' order, and the ``(N,)`` mask of
        rows in a group unseen at fit time (warned about)."""
        names = list(self.group_names_)
        given = _membership(groups)
        if groups.overlapping:
            missing = [n for n in names if n not in groups.names]
            if missing:
                raise ValueError(
                    f"groups= lacks the membership column {missing[0]!r} the predictor was "
                    f"fitted with (it needs all of {', '.join(map(repr, names))})"
                )
        position = {n: j for j, n in enumerate(groups.names)}
        out = np.zeros((given.shape[0], len(names)), dtype=np.int64)
        for j, name in enumerate(names):
            if name in position:
                out[:, j] = given[:, position[name]]
        new = [j for j, n in enumerate(groups.names) if n not in set(names)]
        unseen = np.asarray(given[:, new].any(1) if new else np.zeros(len(given)), dtype=bool)
        warn_unseen_groups(
            type(self).__name__,
            [groups.names[j] for j in new if given[:, j].any()],
            "their rows' sets hold every label (no cutoff was calibrated for them)",
        )
        return out, unseen

    def _loaded(self, fitted: dict[str, Any], version: int) -> None:
        self._cutoffs = {}

    def _check_loaded(self) -> None:
        """The fitted arrays must agree in shape and index one another; then one probe row
        per fitted pattern must give a set."""
        n, m = len(self.calibration_scores_), len(self.group_names_)
        patterns = np.asarray(self.patterns_)
        if patterns.ndim != 2 or patterns.shape[1] != m or not len(patterns):
            raise ValueError(f"patterns_ must be a (P, {m}) array with P >= 1")
        index = np.asarray(self.calibration_patterns_)
        if index.shape != (n,) or n != self.n_calibration_:
            raise ValueError(f"calibration_patterns_ must hold one pattern a row ({n})")
        if index.size and int(index.max()) >= len(patterns):
            raise ValueError("calibration_patterns_ indexes a pattern patterns_ lacks")
        if np.asarray(self.group_counts_).shape != (m,):
            raise ValueError(f"group_counts_ must hold one count per group ({m})")
        probe = probe_logits(self.n_classes_)
        rows = np.resize(patterns, (len(probe), m)).astype(bool)
        self.predict_set(logits=probe, groups=dict(zip(self.group_names_, rows.T, strict=True)))

    def _warn_small(self, counts: np.ndarray, names: list[str] | None, alpha: float) -> None:
        problem = too_small(counts, names, alpha)
        if problem is not None:
            self._warn(problem.replace("a Mondrian threshold", "a conditional cutoff"), alpha)

    def _warn(self, problem: str, alpha: float, stacklevel: int = 4) -> None:
        need = math.ceil(1 / alpha) - 1
        warnings.warn(
            f"{type(self).__name__}: {problem}. Use at least {need} calibration rows per group "
            "(ceil(1/alpha) - 1), or a larger alpha.",
            DegenerateCalibration,
            stacklevel=stacklevel,
        )


def _membership(groups: Groups) -> np.ndarray:
    """``(N, m)`` int64 0/1 membership of ``groups`` (a partition as one-hot columns)."""
    if groups.membership is not None:
        return groups.membership.cpu().numpy().astype(np.int64)
    assert groups.codes is not None
    codes = groups.codes.cpu().numpy()
    return np.eye(groups.n_groups, dtype=np.int64)[codes].reshape(len(codes), groups.n_groups)
