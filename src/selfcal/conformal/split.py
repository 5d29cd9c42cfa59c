"""Split-conformal classification as an estimator: fit a threshold on a calibration split,
predict sets of labels that hold the true label with probability at least ``1 - alpha``
(methods §10).

:class:`SplitConformal` shares the estimator machinery of the post-hoc calibrators
(:class:`~selfcal.estimator.ScoreEstimator`: hyperparameters, ``fit(X, y)`` /
``fit(logits=, labels=)`` / ``fit(probs=, labels=)`` / ``fit(Predictions)``, ``get_params`` /
``set_params``, ``save`` / ``load``).
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, ClassVar, Self

import numpy as np
import torch

from selfcal._inputs import Groups
from selfcal._validation import (
    check_choice,
    check_flag,
    check_int,
    check_nonnegative,
    check_positive,
)
from selfcal.conformal._mondrian import (
    check_mondrian,
    mondrian_mode,
    row_thresholds,
    rows_groups,
    too_small,
)
from selfcal.conformal._set_module import ConformalSetModule, seeded_generator
from selfcal.conformal.scores import (
    canonical_score,
    check_alpha,
    check_score_options,
    class_quantiles,
    conformal_quantile,
    scores_given_u,
    uniforms,
)
from selfcal.estimator import SCORE_KINDS, Check, ScoreEstimator, checked_value
from selfcal.estimator.loading import (
    INTEGER,
    INTEGERS,
    NON_NEGATIVE,
    NUMBER_OR_FLOATS,
    TEXTS,
    Fitted,
    FittedRange,
    probe_logits,
)
from selfcal.exceptions import DegenerateCalibration
from selfcal.predictions import ArrayLike, Predictions

__all__ = ["ConformalSetModule", "SplitConformal"]

PREDICT_STREAM = 0x5EED
"""Predictions draw their ``u`` from a generator seeded with ``seed ^ PREDICT_STREAM``, so that
they never reuse the calibration draws (seeded with ``seed``)."""


def deprecated_score(score: str, nonconformity: str | None) -> str:
    """``SplitConformal(score=...)``, the name of ``nonconformity`` before selfcal 0.3: warns
    :class:`FutureWarning` and returns it; ``nonconformity`` given too, with another value than
    ``score`` or its default, is a ``ValueError``."""
    if nonconformity not in (None, "aps", score):
        raise ValueError(
            f"pass the non-conformity score once: nonconformity={nonconformity!r} or the "
            f"deprecated score={score!r}"
        )
    warnings.warn(
        "SplitConformal(score=...) is deprecated and will be removed in the next release; "
        f"use SplitConformal(nonconformity={score!r}) (score shadows scikit-learn's score "
        "method)",
        FutureWarning,
        stacklevel=3,
    )
    return score


def _check_nonconformity(name: str, value: Any) -> None:
    canonical_score(value, name)


class SplitConformal(ScoreEstimator):
    """Split-conformal prediction sets for a classifier's scores (methods §10).

    ``fit`` on a calibration split (rows the model was not trained on) computes the
    non-conformity score of each row's true label (:func:`~selfcal.conformal.conformity_scores`
    with ``nonconformity``, ``penalty``, ``k_reg``, ``weight``) and sets ``threshold_``, their
    ``ceil((n + 1)(1 - alpha))``-th smallest value; :meth:`predict_set` then returns, for new
    rows, the ``(N, C)`` boolean mask of the labels whose score is at most ``threshold_``.
    When the calibration and test rows are exchangeable, the set holds the true label with
    probability in ``[1 - alpha, 1 - alpha + 1 / (n + 1)]`` (the upper bound needs scores
    without ties: the randomised ones).

    ``mondrian=True`` fits one threshold per class, from the rows whose true label is that
    class (``threshold_`` is then a ``(C,)`` float64 array and ``class_counts_`` their
    counts); label ``k`` is in the set iff its score is at most class ``k``'s threshold, so
    the guarantee holds for each class separately. A class with fewer than
    ``ceil(1 / alpha) - 1`` rows gets ``+inf`` (it is in every set) and a
    :class:`~selfcal.exceptions.DegenerateCalibration` warning names it.

    ``mondrian="class"`` is the explicit name of ``mondrian=True``. ``mondrian="group"`` fits
    one threshold per *group of rows* instead: ``fit(..., groups=g)`` (one group label per
    row, checked by the input contract, :func:`selfcal._inputs.as_groups`; or the groups of a
    :class:`~selfcal.predictions.Predictions`) sets ``threshold_[j]`` to the
    ``ceil((n_j + 1)(1 - alpha))``-th smallest score of the ``n_j`` calibration rows of group
    ``group_names_[j]``, and :meth:`predict_set` (which then needs ``groups=`` too) compares
    each row's scores with its own group's threshold. When calibration and test rows are
    exchangeable *within each group*, a test row of group ``j`` has its true label in the set
    with probability at least ``1 - alpha``, for every group separately (the marginal
    predictor promises this only on average over groups, and can under-cover a hard group).
    A group with fewer than ``ceil(1 / alpha) - 1`` calibration rows gets ``+inf`` (its rows'
    sets hold every label: the guarantee kept, trivially) and a
    :class:`~selfcal.exceptions.DegenerateCalibration` warning names it and its size. A row
    whose group was not seen at fit time gets every label (threshold ``+inf``) and a
    ``UserWarning`` names the group: nothing was calibrated for it, so the only set that
    keeps the guarantee without assumptions is the full one (coverage 1, no information).
    Overlapping groups (membership columns) are refused: conditional conformal over
    overlapping groups is :class:`~selfcal.conformal.ConditionalConformal`. Fitted too:
    ``group_names_`` (list of ``G`` names) and ``group_counts_`` (``(G,)`` int64 calibration
    rows per group); both are empty unless ``mondrian="group"``.

    ``randomized=True`` draws the ``u`` of the APS / RAPS / SAPS scores from a
    ``torch.Generator`` on the input's device seeded at each call: with ``seed`` in ``fit``,
    with ``seed ^ 0x5EED`` in :meth:`predict_set` and :meth:`conformity_scores` (so the same
    input gives the same sets, and predictions never reuse the calibration draws). LAC has no
    ``u``. ``kind`` reads positional scores, as for every calibrator.

    Fitted: ``threshold_``, ``n_calibration_`` (rows), ``class_counts_`` (``(C,)`` int64 rows
    per true label), ``n_classes_``.

    ``nonconformity`` names the non-conformity score (``"lac"``, ``"aps"``, ``"raps"``,
    ``"saps"``; :data:`~selfcal.conformal.SCORES`). It was called ``score`` up to selfcal
    0.2, a name that shadows scikit-learn's ``score`` method: ``score=`` is still accepted,
    with a :class:`FutureWarning`, until the next release, and files keep storing it as
    ``params.score`` (so a file reads the same in every version).

    scikit-learn's model selection (``GridSearchCV``) needs an explicit ``scoring=`` for this
    estimator: a set predictor has no single quality to maximise (coverage and set size pull
    against each other), so it has no ``score`` method to fall back on, and scikit-learn says
    so when ``scoring=`` is missing.
    """

    _parameters: ClassVar[dict[str, Check]] = {
        "alpha": checked_value(check_alpha),
        "nonconformity": _check_nonconformity,
        "randomized": check_flag,
        "mondrian": check_mondrian,
        "penalty": check_nonnegative,
        "k_reg": functools.partial(check_int, minimum=0),
        "weight": check_positive,
        "seed": functools.partial(check_int, minimum=0),
    }
    _fitted_attributes: ClassVar[tuple[str, ...]] = (
        "threshold_",
        "n_calibration_",
        "class_counts_",
        "group_names_",
        "group_counts_",
    )
    _noun: ClassVar[str] = "conformal predictor"
    _fitted_schema: ClassVar[dict[str, Fitted]] = {
        # conformity scores are >= 0; +inf: every set holds the label; one per class (Mondrian)
        "threshold_": Fitted(NUMBER_OR_FLOATS, NON_NEGATIVE, infinite=True),
        "n_calibration_": Fitted(INTEGER, FittedRange(1.0)),
        "class_counts_": Fitted(INTEGERS, NON_NEGATIVE),
        "group_names_": Fitted(TEXTS),
        "group_counts_": Fitted(INTEGERS, NON_NEGATIVE),
    }
    _stored_names: ClassVar[dict[str, str]] = {"nonconformity": "score"}

    def __init__(
        self,
        alpha: float = 0.1,
        nonconformity: str = "aps",
        randomized: bool = True,
        mondrian: bool | str = False,
        penalty: float = 0.01,
        k_reg: int = 1,
        weight: float = 0.2,
        seed: int = 0,
        kind: str | None = None,
        *,
        score: str | None = None,
    ) -> None:
        if score is not None:
            nonconformity = deprecated_score(score, nonconformity)
        self.alpha = alpha
        self.nonconformity = nonconformity
        self.randomized = randomized
        self.mondrian = mondrian
        self.penalty = penalty
        self.k_reg = k_reg
        self.weight = weight
        self.seed = seed
        self.kind = kind

    # ------------------------------------------------------------------ public API
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
        """Fit the threshold(s) on the calibration split; returns ``self``.

        ``fit(logits=z, labels=y)``, ``fit(probs=p, labels=y)``, ``fit(predictions)`` or
        ``fit(X, y)`` with ``X`` of this estimator's ``kind``; ``groups=`` (one group label a
        row, or those of a ``Predictions``) with ``mondrian="group"`` only."""
        self._check_params()
        alpha = check_alpha(self.alpha)
        mode = mondrian_mode(self.mondrian)
        pred = self._resolve_inputs(X, y, logits, probs, labels, True)
        found = self._groups(pred, groups, mode)
        labels_ = pred.require_labels()
        gen = seeded_generator(int(self.seed), pred.device)
        scores = self._scores(pred, gen, labels_)
        counts = torch.bincount(labels_, minlength=pred.n_classes)
        self.group_names_: list[str] = []
        self.group_counts_ = np.zeros(0, dtype=np.int64)
        if found is not None:
            assert found.codes is not None
            thresholds, sizes = class_quantiles(scores, found.codes, found.n_groups, alpha)
            self.threshold_: float | np.ndarray = thresholds.cpu().numpy()
            self.group_names_ = list(found.names)
            self.group_counts_ = sizes.cpu().numpy().astype(np.int64)
            self._warn_small(self.group_counts_, self.group_names_, alpha)
        elif mode == "class":
            thresholds, _ = class_quantiles(scores, labels_, pred.n_classes, alpha)
            self.threshold_ = thresholds.cpu().numpy()
            self._warn_small(counts.cpu().numpy(), None, alpha)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DegenerateCalibration)
                self.threshold_ = conformal_quantile(scores, alpha)
            if math.isinf(self.threshold_):
                self._warn(
                    f"{pred.n_samples} calibration rows are too few for alpha={alpha:g}; "
                    "threshold_ = +inf, so every set holds every label",
                    alpha,
                )
        self.n_calibration_ = pred.n_samples
        self.class_counts_ = counts.cpu().numpy().astype(np.int64)
        self.n_classes_ = pred.n_classes
        return self

    def set_params(self, **params: Any) -> Self:
        """As :meth:`ScoreEstimator.set_params`; ``score=`` is the deprecated name of
        ``nonconformity=`` (:class:`FutureWarning`)."""
        if "score" in params:
            score = params.pop("score")
            params["nonconformity"] = deprecated_score(score, params.get("nonconformity"))
        return super().set_params(**params)

    def _loaded(self, fitted: dict[str, Any], version: int) -> None:
        """Files written before Mondrian-by-group have no group fields: no groups."""
        if "group_names_" not in fitted and "group_counts_" not in fitted:
            self.group_names_ = []
            self.group_counts_ = np.zeros(0, dtype=np.int64)

    def _check_loaded(self) -> None:
        """A loaded predictor must give a set per row: tried on one uniform and one
        confident row per class; thresholds per class (Mondrian) need one per class, per
        group one per group (and a count and name each)."""
        threshold = np.asarray(self.threshold_)
        mode = mondrian_mode(self.mondrian)
        n_groups = len(self.group_names_)
        if np.asarray(self.group_counts_).shape != (n_groups,):
            raise ValueError(f"group_counts_ must hold one count per group ({n_groups})")
        if mode != "group" and n_groups:
            raise ValueError("only a Mondrian-by-group predictor (mondrian='group') has groups")
        if mode == "group":
            if not n_groups or threshold.shape != (n_groups,):
                raise ValueError("a Mondrian-by-group predictor needs one threshold per group")
            rows = len(probe_logits(self.n_classes_))
            probe = [self.group_names_[i % n_groups] for i in range(rows)]
            self.predict_set(logits=probe_logits(self.n_classes_), groups=probe)
            return
        if mode == "class" and threshold.shape != (self.n_classes_,):
            raise ValueError(f"a Mondrian predictor needs {self.n_classes_} thresholds")
        if mode == "marginal" and threshold.size != 1:
            raise ValueError("a marginal predictor has one threshold")
        self.predict_set(logits=probe_logits(self.n_classes_))

    def predict_set(
        self,
        X: Predictions | ArrayLike | None = None,
        /,
        *,
        logits: ArrayLike | None = None,
        probs: ArrayLike | None = None,
        groups: ArrayLike | None = None,
    ) -> Any:
        """The ``(N, C)`` boolean prediction sets in the caller's form (numpy in -> numpy out;
        torch in -> a bool tensor on the input's device): label ``k`` is in row ``i``'s set
        iff its score is at most the (class ``k``'s; row ``i``'s group's) threshold.

        ``groups=`` (or the groups of a ``Predictions``) is needed with ``mondrian="group"``
        and refused otherwise; a row of a group unseen at fit time gets every label, with a
        ``UserWarning`` naming the group."""
        pred = self._fitted_predictions(X, logits, probs)
        mode = mondrian_mode(self.mondrian)
        found = self._groups(pred, groups, mode)
        scores = self._predict_scores(pred)
        if found is None:
            return pred.output(scores <= self._thresholds(pred.device))
        return pred.output(scores <= self._row_thresholds(found, pred.device).unsqueeze(1))

    def predict(
        self,
        X: Predictions | ArrayLike | None = None,
        /,
        *,
        logits: ArrayLike | None = None,
        probs: ArrayLike | None = None,
        groups: ArrayLike | None = None,
    ) -> Any:
        """:meth:`predict_set` under scikit-learn's name (a set predictor's prediction is
        its set), so that pipelines and ``cross_val_predict`` find it."""
        return self.predict_set(X, logits=logits, probs=probs, groups=groups)

    def conformity_scores(
        self,
        X: Predictions | ArrayLike | None = None,
        /,
        *,
        logits: ArrayLike | None = None,
        probs: ArrayLike | None = None,
    ) -> Any:
        """The ``(N, C)`` float64 scores of every label that :meth:`predict_set` compares with
        the threshold (the same draws of ``u``), in the caller's form."""
        pred = self._fitted_predictions(X, logits, probs)
        return pred.output(self._predict_scores(pred))

    def to_module(self, kind: str | None = None) -> torch.nn.Module:
        """The fitted set predictor as a :class:`ConformalSetModule`: ``(N, C)`` scores of
        ``kind`` (default: this estimator's ``kind``, else logits) -> ``(N, C)`` bool sets,
        equal to :meth:`predict_set` on the same scores. Randomised scores draw ``u`` from the
        module's ``generator`` argument, or, when ``None``, from a generator seeded as
        :meth:`predict_set`'s (so ``module(z)`` equals ``predict_set(logits=z)``). The module
        does not validate its input."""
        self._check_fitted()
        if mondrian_mode(self.mondrian) == "group":
            raise ValueError(
                "to_module: a Mondrian-by-group predictor needs each row's group, which a "
                "module of scores alone does not get; use predict_set(..., groups=)"
            )
        kind = kind or self.kind or "logits"
        check_choice("kind", kind, SCORE_KINDS)
        penalty, k_reg, weight = check_score_options(self.penalty, self.k_reg, self.weight)
        return ConformalSetModule(
            self._thresholds(torch.device("cpu")),
            canonical_score(self.nonconformity, "nonconformity"),
            from_probs=kind == "probs",
            randomized=bool(self.randomized),
            seed=int(self.seed) ^ PREDICT_STREAM,
            penalty=penalty,
            k_reg=k_reg,
            weight=weight,
        ).eval()

    # ------------------------------------------------------------------ helpers
    def _scores(
        self, pred: Predictions, gen: torch.Generator, labels: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The scores of ``labels`` (``(N,)``), or of every label (``(N, C)``) without."""
        score = canonical_score(self.nonconformity, "nonconformity")
        penalty, k_reg, weight = check_score_options(self.penalty, self.k_reg, self.weight)
        p = pred.probs
        u: torch.Tensor | float = 1.0
        if self.randomized and score != "lac":
            shape = (p.shape[0], 1) if labels is not None else tuple(p.shape)
            u = uniforms(shape, gen, p.device)
        out = scores_given_u(p, u, score, penalty, k_reg, weight)
        return out if labels is None else out.gather(1, labels.unsqueeze(1)).squeeze(1)

    def _predict_scores(self, pred: Predictions) -> torch.Tensor:
        self._check_params()
        return self._scores(pred, seeded_generator(int(self.seed) ^ PREDICT_STREAM, pred.device))

    def _thresholds(self, device: torch.device) -> torch.Tensor:
        """``(1,)`` or ``(C,)`` float64 thresholds on ``device``."""
        t = torch.as_tensor(np.asarray(self.threshold_, dtype=np.float64), device=device)
        return t.reshape(-1)

    def _groups(self, pred: Predictions, groups: ArrayLike | None, mode: str) -> Groups | None:
        return rows_groups(pred, groups, mode, self.mondrian)

    def _row_thresholds(self, groups: Groups, device: torch.device) -> torch.Tensor:
        return row_thresholds(groups, self.group_names_, self._thresholds(device), self)

    def _warn_small(self, counts: np.ndarray, names: list[str] | None, alpha: float) -> None:
        problem = too_small(counts, names, alpha)
        if problem is not None:
            self._warn(problem, alpha, stacklevel=4)

    def _warn(self, problem: str, alpha: float, stacklevel: int = 3) -> None:
        need = math.ceil(1 / alpha) - 1
        per = {"class": "per class ", "group": "per group "}.get(mondrian_mode(self.mondrian), "")
        warnings.warn(
            f"{type(self).__name__}: {problem}. Use at least {need} calibration rows "
            f"{per}(ceil(1/alpha) - 1), or a larger alpha.",
            DegenerateCalibration,
            stacklevel=stacklevel,
        )
