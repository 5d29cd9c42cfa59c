"""Venn-Abers predictors: a probability *interval* ``[p0, p1]`` for every prediction, one of
whose ends is calibrated, and a merged probability (Vovk & Petej 2014; Vovk, Petej &
Fedorova 2015; methods §2.8).

**The inductive predictor (IVAP).** For a binary problem with calibration scores ``s_i`` and
labels ``y_i``, and a test score ``s``: ``p_b`` is the value at ``s`` of the isotonic
regression of the labels on the scores fitted to the calibration rows *plus* ``(s, b)``
(``b = 0, 1``). Always ``p0 <= p1``. **The promise**: if the calibration rows and the test row
are exchangeable, the Venn predictor this is (its taxonomy: the isotonic fit's level sets) is
perfectly calibrated -- under the true label ``y``, ``E[y | p_y] = p_y`` -- so one of the two
ends, the one of the true label, is calibrated; which one is unknown, and a wide interval says
the calibration rows near ``s`` are few or mixed. The merged probability ``p = p1 / (1 - p0 +
p1)`` (minimax for log loss; ``merge="brier"``: ``p1 + p0^2 / 2 - p1^2 / 2``) lies in ``[p0,
p1]`` and carries no guarantee of its own. ``p0 < 1`` and ``p1 > 0`` always (the test row's
own label is in its block), so ``p`` (``merge="log"``) lies in ``[1 / (n + 2), (n + 1) / (n +
2)]`` for ``n`` calibration rows: no probability of 0 or 1, so no mixing is needed where the
merged probabilities are used directly.

**The cross predictor (CVAP, ``folds=K``).** The calibration rows are split into ``K``
stratified folds (seeded by ``seed``); an IVAP calibrated on each fold's rows gives ``(p0^k,
p1^k)``, merged as ``venn-abers`` and MAPIE merge them: ``p = GM(p1) / (GM(1 - p0) + GM(p1))``,
``GM`` the geometric mean over folds. With a model fitted once (post-hoc calibration), each
fold is an IVAP on ``1 / K`` of the rows -- wider intervals, each still valid -- and the merge
averages out the fold-to-fold variation. :meth:`predict_interval` then gives ``[min_k p0^k,
max_k p1^k]``, which always holds the merged ``p``. ``folds=1`` (the default) is the IVAP on
every row.

**Multiclass.** :class:`VennAbers` is one-vs-rest: class ``j``'s IVAP on ``p_{.j}`` against
``1[y = j]``, merged probabilities normalised over classes, ``p'_j = p_j / sum_l p_l`` (the
``venn-abers`` package's and MAPIE's ``one_vs_rest`` / ``one_vs_all``); for two classes one
IVAP on ``p_{.1}``. :class:`TopLabelVennAbers` asks one question of every row, "is the top
class right?": an IVAP on the top-label confidence against correctness, whose interval is the
interval of the confidence (no peer has it).

**Names.** ``"venn-abers"`` is what the peers call their binary and one-vs-rest predictor, so
it names that one here; ``"venn-abers-top"`` the top-label one (as ``"isotonic"`` /
``"isotonic-ovr"`` name the two isotonic maps, the peers' name taking the bare one). Cross
Venn-Abers is ``folds=K`` of either, not a name of its own: with a model fitted once it is the
same predictor on folds of the rows, and ``build_calibrator("venn-abers", folds=5)`` /
``selfcal calibrate --param folds=5`` reach it.

**In ``auto`` and ``compare``.** On the 42 shared prediction sets, :class:`TopLabelVennAbers`
as one more of ``auto``'s candidates (after top-label isotonic regression, whose map it
smooths) changed ``auto``'s choice on 2 (RepVGG-A0 and A2 on CIFAR-100, from isotonic
regression), lowering the test NLL by 0.0006 and 0.0030 nats, and on no other;
:class:`VennAbers` was never chosen. Neither is a default candidate yet: a new candidate moves
the committed benchmark and post-hoc studies, whose predictions store takes hours to
regenerate (``AutoCalibration(candidates=...)`` takes them). ``selfcal compare`` shows both
beside ``auto``'s candidates.

Computed by :mod:`selfcal.posthoc._venn_abers_tables`: both isotonic fits at every place a test
score can fall, for every class at once, by the cumulative-sum-diagram construction of Vovk et
al. (``O(n log n)`` per class), then one ``searchsorted`` per test score -- no per-test-point
loop, and equal to ``venn-abers`` and MAPIE to float64 rounding (``tests/posthoc/
test_venn_abers_reference.py``). A fitted map holds its tables (the distinct calibration
scores of each class and two values per gap), about three numbers per calibration row and
class, which is what its file holds too.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from selfcal._validation import check_choice, check_int
from selfcal.estimator import Check
from selfcal.estimator.loading import FLOATS, INTEGERS, UNIT, Fitted, FittedRange
from selfcal.posthoc._base import Calibrator
from selfcal.posthoc._degenerate import Coverage
from selfcal.posthoc._modules import log_with_confidence, renormalise, score_probs, top_label
from selfcal.posthoc._venn_abers_tables import fit_tables, lookup, merge, padded
from selfcal.posthoc.crossfit import stratified_folds
from selfcal.posthoc.isotonic import with_confidence
from selfcal.posthoc.registry import register_calibrator
from selfcal.predictions import ArrayLike, Predictions

MERGES = ("log", "brier")
"""The rules that merge the pairs (:func:`~selfcal.posthoc._venn_abers_tables.merge`)."""


class _VennAbersBase(Calibrator):
    """What both Venn-Abers calibrators share: the folds, the tables, the interval."""

    _abstract = True
    folds: int
    merge: str
    seed: int
    _parameters: ClassVar[dict[str, Check]] = {
        "folds": check_int,
        "merge": functools.partial(check_choice, choices=MERGES),
        "seed": functools.partial(check_int, minimum=0),
    }
    _fitted_attributes = ("thresholds_", "lower_", "upper_", "table_sizes_")
    _fitted_schema: ClassVar[dict[str, Fitted]] = {
        "thresholds_": Fitted(FLOATS, UNIT),
        "lower_": Fitted(FLOATS, UNIT),
        "upper_": Fitted(FLOATS, UNIT),
        "table_sizes_": Fitted(INTEGERS, FittedRange(1.0)),
    }

    @classmethod
    def prepare_fit(cls) -> None:
        """Load (or, the first time, compile) the numba kernel with a fit of two rows."""
        fit_tables(torch.tensor([[0.25], [0.75]]).double(), torch.tensor([[0], [1]]))

    # ------------------------------------------------------------------ what each form maps
    def _map_scores(self, pred: Predictions) -> torch.Tensor:  # pragma: no cover - abstract
        """``(N, M)`` float64 scores of the ``M`` maps."""
        raise NotImplementedError

    def _map_targets(self, pred: Predictions) -> torch.Tensor:  # pragma: no cover - abstract
        """``(N, M)`` 0/1 targets of the ``M`` maps."""
        raise NotImplementedError

    def _strata(self, pred: Predictions) -> torch.Tensor:  # pragma: no cover - abstract
        """What the folds are stratified by."""
        raise NotImplementedError

    def _n_maps(self) -> int:
        return 1

    # ------------------------------------------------------------------------------ fit
    def _fit(self, pred: Predictions) -> None:
        scores, targets = self._map_scores(pred), self._map_targets(pred)
        if self.folds == 1:
            held = [np.arange(pred.n_samples)]
        else:
            if 2 * self.folds > pred.n_samples:
                raise ValueError(
                    f"folds={self.folds} needs at least {2 * self.folds} calibration rows (two "
                    f"a fold), got {pred.n_samples}"
                )
            held = stratified_folds(self._strata(pred), self.folds, self.seed)
        parts = [fit_tables(scores[torch.as_tensor(r)], targets[torch.as_tensor(r)]) for r in held]
        self.thresholds_, self.lower_, self.upper_, self.table_sizes_ = (
            np.concatenate(column) + 0 for column in zip(*parts)
        )  # + 0: no negative zeros in the tables (nor in the saved file)

    # ---------------------------------------------------------------------------- predict
    def _pairs(self, pred: Predictions) -> tuple[torch.Tensor, torch.Tensor]:
        """``(p0, p1)``, each ``(F, N, M)``: every fold's pair for every map."""
        scores = self._map_scores(pred)
        pairs = [lookup(tables, scores) for tables in self._fold_tables()]
        return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])

    def _fold_tables(self) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Each fold's tables, padded (:func:`~selfcal.posthoc._venn_abers_tables.padded`):
        built once per fitted (or loaded) set of tables and kept, so that predicting a few
        rows does not rebuild them."""
        fitted = (self.thresholds_, self.lower_, self.upper_, self.table_sizes_)
        kept = self.__dict__.get("_padded")
        if kept is not None and all(a is b for a, b in zip(kept[0], fitted)):
            return kept[1]
        m, sizes = self._n_maps(), self.table_sizes_
        starts = np.concatenate([[0], np.cumsum(sizes)])
        value_starts = np.concatenate([[0], np.cumsum(sizes + 1)])
        tables = []
        for f in range(len(sizes) // m):
            a, b = f * m, (f + 1) * m
            tables.append(
                padded(
                    self.thresholds_[starts[a] : starts[b]],
                    self.lower_[value_starts[a] : value_starts[b]],
                    self.upper_[value_starts[a] : value_starts[b]],
                    sizes[a:b],
                )
            )
        self.__dict__["_padded"] = (fitted, tables)
        return tables

    def _merged(self, pred: Predictions) -> torch.Tensor:
        """``(N, M)`` merged probabilities (:func:`~selfcal.posthoc._venn_abers_tables.merge`)."""
        return merge(*self._pairs(pred), self.merge)

    def _envelope(self, pred: Predictions) -> tuple[torch.Tensor, torch.Tensor]:
        """``(N, M)`` ``[min_k p0^k, max_k p1^k]`` over the folds."""
        p0, p1 = self._pairs(pred)
        return p0.amin(0), p1.amax(0)

    def predict_interval(
        self,
        X: Predictions | ArrayLike | None = None,
        /,
        *,
        logits: ArrayLike | None = None,
        probs: ArrayLike | None = None,
    ) -> tuple[Any, Any]:
        """The Venn-Abers interval ``(p0, p1)`` of every prediction, each in the caller's form
        (see the class: per class, or of the top-label confidence); ``p0 <= p1``
        elementwise. With ``folds > 1``, the envelope of the folds' intervals."""
        pred = self._prepare(X, logits, probs)
        low, high = self._interval(pred)
        return pred.output(low), pred.output(high)

    def _interval(self, pred: Predictions) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError  # pragma: no cover - abstract

    # --------------------------------------------------------------------------- checks
    def _check_loaded(self) -> None:
        sizes = np.asarray(self.table_sizes_)
        m = self._n_maps()
        if sizes.ndim != 1 or len(sizes) == 0 or len(sizes) % m:
            raise ValueError(f"table_sizes_ must hold a positive multiple of {m} sizes")
        if len(self.thresholds_) != sizes.sum() or not (
            len(self.lower_) == len(self.upper_) == (sizes + 1).sum()
        ):
            raise ValueError("thresholds_, lower_, upper_ and table_sizes_ disagree in length")
        for segment in np.split(np.asarray(self.thresholds_), np.cumsum(sizes)[:-1]):
            if np.any(np.diff(segment) <= 0):
                raise ValueError("thresholds_ must increase strictly within a table")
        super()._check_loaded()

    def _all_correct_outcome(self, coverage: Coverage) -> str:
        n = coverage.n
        return (
            "returned the Venn-Abers probabilities, which stay below (n + 1) / (n + 2) = "
            f"{(n + 1) / (n + 2):.6g} by construction"
        )

    def _missing_outcome(self, coverage: Coverage) -> str:
        return (
            "those classes' maps are fitted to all-zero targets (p0 = 0; p1 and the merged "
            "probability small, except above every calibration score)"
        )


@register_calibrator("venn-abers")
class VennAbers(_VennAbersBase):
    """Venn-Abers predictors, one-vs-rest: a probability interval per class, merged and
    normalised.

    For each class ``j`` an inductive Venn-Abers predictor (IVAP; module docstring) of
    ``1[y = j]`` on ``p_{.j}`` gives ``[p0_j, p1_j]`` and the merged ``q_j = p1_j / (1 - p0_j +
    p1_j)``; :meth:`predict_proba` returns ``q_j / sum_l q_l`` (every ``q_l > 0``). For two
    classes one IVAP on ``p_{.1}``: ``[1 - q, q]``. Equal to the ``venn-abers`` package's
    ``VennAbers`` (binary) and its and MAPIE's one-vs-rest prefit Venn-Abers (``precision=None``)
    to float64 rounding.

    :meth:`predict_interval` returns ``(p0, p1)``, each ``(N, C)``: class ``j``'s interval
    *before* normalisation (the normalised probability need not lie in it); for two classes,
    class 1's ``[p0, p1]`` and class 0's ``[1 - p1, 1 - p0]``.

    **Can change the predicted class** (the per-class maps are fitted independently).

    Parameters
    ----------
    folds : 1 (default): the IVAP on every calibration row; ``K > 1``: the cross Venn-Abers
        predictor on ``K`` stratified folds (module docstring).
    merge : ``"log"`` (default) or ``"brier"``: how each pair (and the folds) are merged.
    seed : the folds' seed (``folds > 1``).
    kind : ``"logits"``, ``"probs"`` or ``None`` (default): what a positional score array holds.

    Attributes
    ----------
    thresholds_ : float64 array, the distinct calibration scores of every table, concatenated
    lower_, upper_ : float64 arrays, ``p0`` and ``p1`` at each of a table's ``k + 1`` places
    table_sizes_ : int64 array, ``k`` of each table: fold after fold, class after class (one
        table per fold for two classes)
    """

    _per_class = True
    _rests_on_each_class = True

    def __init__(
        self, folds: int = 1, merge: str = "log", seed: int = 0, kind: str | None = None
    ) -> None:
        self.folds = folds
        self.merge = merge
        self.seed = seed
        self.kind = kind

    def _n_maps(self) -> int:
        return 1 if self.n_classes_ == 2 else self.n_classes_

    def _map_scores(self, pred: Predictions) -> torch.Tensor:
        p = pred.probs
        return p[:, 1:] if pred.n_classes == 2 else p

    def _map_targets(self, pred: Predictions) -> torch.Tensor:
        y = pred.require_labels()
        if pred.n_classes == 2:
            return (y == 1).unsqueeze(1)
        return torch.nn.functional.one_hot(y, pred.n_classes).bool()

    def _strata(self, pred: Predictions) -> torch.Tensor:
        return pred.require_labels()

    def _predict(self, pred: Predictions) -> torch.Tensor:
        q = self._merged(pred)
        if pred.n_classes == 2:
            return torch.cat([1 - q, q], 1)
        return renormalise(q)

    def _interval(self, pred: Predictions) -> tuple[torch.Tensor, torch.Tensor]:
        low, high = self._envelope(pred)
        if pred.n_classes == 2:
            return torch.cat([1 - high, low], 1), torch.cat([1 - low, high], 1)
        return low, high

    def _module(self, from_probs: bool) -> torch.nn.Module:
        return VennAbersModule(self, "binary" if self.n_classes_ == 2 else "ovr", from_probs)


@register_calibrator("venn-abers-top")
class TopLabelVennAbers(_VennAbersBase):
    """Top-label Venn-Abers predictor: an interval for the confidence that the top class is
    right.

    One inductive Venn-Abers predictor (IVAP; module docstring) of the correctness
    ``1[argmax_k p_k = y]`` on the top-label confidence ``c = max_k p_k``: ``[p0, p1]`` is an
    interval for ``P(top class right)`` with the Venn-Abers promise (one end calibrated, under
    exchangeability), and the merged ``f = p1 / (1 - p0 + p1)`` is the calibrated confidence.

    * :meth:`predict_confidence` returns ``f`` mixed with the uniform distribution,
      ``(1 - eps) f + eps / C``; the predicted class is unchanged.
    * :meth:`predict_proba` puts that on the predicted class and spreads the rest over the
      others in proportion to their probabilities, as top-label isotonic regression does
      (:class:`~selfcal.posthoc.IsotonicCalibration`; the mixing keeps a class the model gave
      probability 0 above 0).
    * :meth:`predict_interval` returns ``(p0, p1)``, each ``(N,)``, mixed in the same way (so the
      confidence lies in it; ``mix=0`` gives the raw pair).

    **Can change the predicted class** in :meth:`predict_proba` exactly as top-label isotonic
    regression can (when the calibrated confidence falls below a runner-up's share).

    Parameters
    ----------
    folds, merge, seed : as :class:`VennAbers` (the folds stratified by correctness).
    mix : ``"auto"`` (default: ``eps = 1 / (n + 1)``), or ``eps`` in ``[0, 1)``: the output is
        ``(1 - eps) p + eps / C`` (:mod:`selfcal.posthoc._base`); 0 is the un-mixed map.
    kind : ``"logits"``, ``"probs"`` or ``None`` (default): what a positional score array holds.

    Attributes
    ----------
    thresholds_, lower_, upper_, table_sizes_ : the tables, one per fold (as :class:`VennAbers`)
    mix_ : float, the mixing weight ``eps``
    """

    def __init__(
        self,
        folds: int = 1,
        merge: str = "log",
        seed: int = 0,
        mix: float | str = "auto",
        kind: str | None = None,
    ) -> None:
        self.folds = folds
        self.merge = merge
        self.seed = seed
        self.mix = mix
        self.kind = kind

    def _map_scores(self, pred: Predictions) -> torch.Tensor:
        return pred.confidence.unsqueeze(1)

    def _map_targets(self, pred: Predictions) -> torch.Tensor:
        return pred.correct.unsqueeze(1)

    def _strata(self, pred: Predictions) -> torch.Tensor:
        return pred.correct.long()

    def _confidence(self, pred: Predictions) -> torch.Tensor:
        return self._merged(pred)[:, 0]

    def _predict(self, pred: Predictions) -> torch.Tensor:
        return with_confidence(pred, self._confidence(pred))

    def _interval(self, pred: Predictions) -> tuple[torch.Tensor, torch.Tensor]:
        low, high = self._envelope(pred)
        eps, c = self._mix_weight(), pred.n_classes
        return (1 - eps) * low[:, 0] + eps / c, (1 - eps) * high[:, 0] + eps / c

    def _module(self, from_probs: bool) -> torch.nn.Module:
        return VennAbersModule(self, "top", from_probs)


class VennAbersModule(torch.nn.Module):
    """``log`` of a Venn-Abers calibrator's probabilities (before mixing): the tables of every
    fold and map as padded buffers, each test score looked up by ``searchsorted``
    (``right=True`` for ``p0``, ``right=False`` for ``p1``), the pairs merged as ``merge``."""

    if TYPE_CHECKING:  # buffers (TorchScript cannot read string annotations)
        thresholds: torch.Tensor
        lower: torch.Tensor
        upper: torch.Tensor
    __constants__ = ("form", "from_probs", "folds", "brier")

    def __init__(self, fitted: _VennAbersBase, form: str, from_probs: bool) -> None:
        super().__init__()
        thr, low, high = padded(
            fitted.thresholds_, fitted.lower_, fitted.upper_, fitted.table_sizes_
        )  # every fold's maps, fold after fold
        self.register_buffer("thresholds", thr)
        self.register_buffer("lower", low)
        self.register_buffer("upper", high)
        self.form = form
        self.from_probs = from_probs
        self.folds = len(fitted.table_sizes_) // fitted._n_maps()
        self.brier = fitted.merge == "brier"

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        x = scores.to(self.lower.dtype)
        p = score_probs(x, self.from_probs)
        conf, predicted = top_label(x, self.from_probs)
        if self.form == "top":
            s = conf.unsqueeze(1)
        elif self.form == "binary":
            s = p[:, 1:]
        else:
            s = p
        t = s.T.contiguous().repeat(self.folds, 1)
        p0 = self.lower.gather(1, torch.searchsorted(self.thresholds, t, right=True))
        p1 = self.upper.gather(1, torch.searchsorted(self.thresholds, t, right=False))
        p0 = p0.reshape(self.folds, s.shape[1], s.shape[0])
        p1 = p1.reshape(self.folds, s.shape[1], s.shape[0])
        if self.brier:
            q = p1.mean(0) + (p0.square().mean(0) - p1.square().mean(0)) / 2
        elif self.folds == 1:
            q = p1[0] / (1 - p0[0] + p1[0])
        else:
            high = p1.prod(0) ** (1.0 / self.folds)
            q = high / ((1 - p0).prod(0) ** (1.0 / self.folds) + high)
        q = q.T
        if self.form == "top":
            return log_with_confidence(x, p, predicted, q, self.from_probs)
        if self.form == "binary":
            return torch.cat([1 - q, q], 1).log()
        return renormalise(q).log()
