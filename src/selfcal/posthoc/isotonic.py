"""Isotonic-regression calibrators (scikit-learn is imported only inside ``fit``).

A fitted isotonic map is stored as its knots ``(x_k, y_k)`` (scikit-learn's
``X_thresholds_`` / ``y_thresholds_``) and applied by linear interpolation between knots,
constant beyond the ends -- exactly scikit-learn's ``predict`` with ``out_of_bounds="clip"``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from selfcal._optional import require
from selfcal.estimator.loading import FLOATS, INTEGERS, UNIT, Fitted, FittedRange
from selfcal.posthoc._base import Calibrator
from selfcal.posthoc._modules import OneVsRestModule, TopLabelIsotonicModule, renormalise
from selfcal.posthoc._tensors import as_tensor, interp
from selfcal.posthoc.registry import register_calibrator
from selfcal.predictions import Predictions


def fit_isotonic(x: torch.Tensor, y: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Knots of ``IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1)`` fitted by least
    squares of ``y`` on ``x`` (non-decreasing)."""
    isotonic = require("sklearn.isotonic", "isotonic calibration", "scikit-learn")
    iso = isotonic.IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0, increasing=True)
    iso.fit(x.detach().cpu().numpy(), y.detach().cpu().numpy())
    return (
        np.asarray(iso.X_thresholds_, dtype=np.float64).copy(),
        np.asarray(iso.y_thresholds_, dtype=np.float64).copy(),
    )


def first_isotonic_fit() -> None:
    """A fit of two points: scikit-learn's first fit in a process imports more than
    ``sklearn.isotonic`` (in 1.9, its callback machinery and rich)."""
    fit_isotonic(torch.tensor([0.0, 1.0]), torch.tensor([0.0, 1.0]))


def check_knots(x: np.ndarray, y: np.ndarray, counts: Any) -> None:
    """A loaded file's knots: ``x`` and ``y`` of one length, split by ``counts`` into maps
    whose ``x`` never decreases (``np.interp`` reads anything else as garbage, silently)."""
    if np.shape(x) != np.shape(y) or np.ndim(x) != 1 or int(np.sum(counts)) != len(x):
        raise ValueError("x_thresholds_, y_thresholds_ and the knot counts disagree in length")
    for segment in np.split(np.asarray(x), np.cumsum(counts)[:-1]):
        if np.any(np.diff(segment) < 0):
            raise ValueError("x_thresholds_ must not decrease within a map")


@register_calibrator("isotonic")
class IsotonicCalibration(Calibrator):
    """Top-label isotonic regression -- the [BO4SC] "IsoReg" baseline.

    Fits a non-decreasing, piecewise-linear map ``f`` (isotonic least squares,
    ``out_of_bounds="clip"``, values in ``[0, 1]``) from the top-label confidence
    ``c = max_k p_k`` to the correctness ``1[argmax_k p_k = y]``.

    * :meth:`predict_confidence` returns ``f(c)``; the predicted class is unchanged.
    * :meth:`predict_proba` puts ``f(c)`` on the predicted class ``k^`` and spreads the rest in
      proportion to the original probabilities: ``p'_j = (1 - f(c)) p_j / sum_{l != k^} p_l``
      for ``j != k^`` (uniformly ``(1 - f(c)) / (C - 1)`` when those ``p_j`` are all 0).

    * Both are then mixed with the uniform distribution (``mix``): the confidence becomes
      ``(1 - eps) f(c) + eps / C``. Without it a validation set whose most confident rows are
      all correct gives ``f = 1`` there, and one error among such rows on new data costs an
      infinite NLL.

    **Can change the predicted class** in :meth:`predict_proba` exactly when
    ``f(c) < (1 - f(c)) p_(2) / sum_{l != k^} p_l`` (``p_(2)`` the runner-up probability;
    on equality the first index wins): never when ``f(c) >= 1/2``; for two classes, whenever
    ``f(c) < 1/2``. :meth:`predict_confidence` never changes it.

    Parameters
    ----------
    mix : ``"auto"`` (default: ``eps = 1 / (n + 1)``), or ``eps`` in ``[0, 1)``: the output is
        ``(1 - eps) p + eps / C`` (:mod:`selfcal.posthoc._base`); 0 is the un-mixed map.
    kind : ``"logits"``, ``"probs"`` or ``None`` (default): what a positional score array holds.

    Attributes
    ----------
    x_thresholds_, y_thresholds_ : (K,) float64 arrays, the knots of ``f``
    mix_ : float, the mixing weight ``eps``
    """

    _fitted_attributes = ("x_thresholds_", "y_thresholds_")
    _fitted_schema: ClassVar[dict[str, Fitted]] = {
        "x_thresholds_": Fitted(FLOATS),
        "y_thresholds_": Fitted(FLOATS, UNIT),
    }

    def _check_loaded(self) -> None:
        check_knots(self.x_thresholds_, self.y_thresholds_, [len(self.x_thresholds_)])
        super()._check_loaded()

    @classmethod
    def prepare_fit(cls) -> None:
        first_isotonic_fit()

    def __init__(self, mix: float | str = "auto", kind: str | None = None) -> None:
        self.mix = mix
        self.kind = kind

    def _fit(self, pred: Predictions) -> None:
        self.x_thresholds_, self.y_thresholds_ = fit_isotonic(pred.confidence, pred.correct)

    def _map(self, conf: torch.Tensor) -> torch.Tensor:
        xp, fp = as_tensor(self.x_thresholds_, conf), as_tensor(self.y_thresholds_, conf)
        return interp(conf, xp, fp)

    def _confidence(self, pred: Predictions) -> torch.Tensor:
        """``f(max_k p_k)``: the fitted map of the top-label confidence."""
        return self._map(pred.confidence)

    def _predict(self, pred: Predictions) -> torch.Tensor:
        return with_confidence(pred, self._map(pred.confidence))

    def _module(self, from_probs: bool) -> torch.nn.Module:
        """The knots as buffers; the module returns ``log`` of :meth:`predict_proba`'s
        probabilities (``predict_confidence`` is their entry on the predicted class)."""
        return TopLabelIsotonicModule(self.x_thresholds_, self.y_thresholds_, from_probs)


def with_confidence(pred: Predictions, confidence: torch.Tensor) -> torch.Tensor:
    """``(N, C)`` probabilities with the calibrated top-label ``confidence`` on the predicted
    class and ``1 - confidence`` spread over the others in proportion to their probabilities
    (the top-label calibrators' :meth:`~Calibrator.predict_proba`)."""
    p = pred.probs
    top = pred.predicted.unsqueeze(1)
    new_conf = confidence.unsqueeze(1)
    others = p.scatter(1, top, 0.0)
    rest = others.sum(1, keepdim=True)
    normal = rest >= torch.finfo(p.dtype).tiny
    share = others / torch.where(normal, rest, torch.ones_like(rest))
    if not bool(normal.all()):  # the runner-ups underflowed: their shares from the scores
        share = torch.where(normal, share, _shares_of_the_rest(pred, top))
    return (share * (1 - new_conf)).scatter(1, top, new_conf)


def _shares_of_the_rest(pred: Predictions, top: torch.Tensor) -> torch.Tensor:
    """Each non-predicted class's share of the probability left over, ``softmax`` of its
    log-score among them (logits, or the log of the probabilities), for rows whose runner-up
    probabilities sum to 0 or a subnormal number, where ``p_k / sum p`` would not sum to 1;
    uniform where every runner-up probability is exactly 0."""
    log_scores = pred.scores.double() if pred.kind == "logits" else pred.probs.log()
    masked = log_scores.scatter(1, top, float("-inf"))
    uniform = torch.full_like(masked, 1.0 / (masked.shape[1] - 1)).scatter(1, top, 0.0)
    none = torch.isneginf(masked).all(dim=1, keepdim=True)
    return torch.where(none, uniform, torch.softmax(masked.masked_fill(none, 0.0), dim=1))


@register_calibrator("isotonic-ovr")
class OneVsRestIsotonic(Calibrator):
    """One-vs-rest isotonic calibration of each class's probability.

    As scikit-learn's ``CalibratedClassifierCV(method="isotonic")`` on probabilities: for each
    class ``j`` fit a non-decreasing map ``f_j`` of ``p_{.j}`` to ``1[y = j]``, then
    renormalise: ``p'_j = f_j(p_j) / sum_l f_l(p_l)`` (uniform ``1/C`` if every ``f_l`` is 0).
    For two classes (like scikit-learn) one map is fitted, on the positive class:
    ``p'_1 = f_1(p_1)``, ``p'_0 = 1 - p'_1``.

    The result is mixed with the uniform distribution (``mix``), so that a class whose map
    is 0 where a new score falls (for example one absent from the validation labels) keeps a
    probability of about ``eps / C`` instead of exactly 0.

    **Can change the predicted class**: the per-class maps are fitted independently.

    Parameters
    ----------
    mix : ``"auto"`` (default: ``eps = 1 / (n + 1)``), or ``eps`` in ``[0, 1)``: the output is
        ``(1 - eps) p + eps / C`` (:mod:`selfcal.posthoc._base`); 0 is the un-mixed map.
    kind : ``"logits"``, ``"probs"`` or ``None`` (default): what a positional score array holds.

    Attributes
    ----------
    x_thresholds_, y_thresholds_ : (K,) float64 arrays -- the knots of all maps concatenated
    knot_counts_ : (C,) or (1,) int64 array -- knots per map
    mix_ : float, the mixing weight ``eps``
    """

    _fitted_attributes = ("x_thresholds_", "y_thresholds_", "knot_counts_")
    _fitted_schema: ClassVar[dict[str, Fitted]] = {
        "x_thresholds_": Fitted(FLOATS),
        "y_thresholds_": Fitted(FLOATS, UNIT),
        "knot_counts_": Fitted(INTEGERS, FittedRange(1.0)),
    }
    _per_class = True
    _rests_on_each_class = True

    def _check_loaded(self) -> None:
        maps = 1 if self.n_classes_ == 2 else self.n_classes_
        if np.shape(self.knot_counts_) != (maps,):
            raise ValueError(f"knot_counts_ must hold {maps} count(s), one per map")
        check_knots(self.x_thresholds_, self.y_thresholds_, self.knot_counts_)
        super()._check_loaded()

    @classmethod
    def prepare_fit(cls) -> None:
        first_isotonic_fit()

    def __init__(self, mix: float | str = "auto", kind: str | None = None) -> None:
        self.mix = mix
        self.kind = kind

    def _fit(self, pred: Predictions) -> None:
        p, y = pred.probs, pred.require_labels()
        classes = [1] if pred.n_classes == 2 else range(pred.n_classes)
        knots = [fit_isotonic(p[:, j], (y == j).double()) for j in classes]
        self.x_thresholds_ = np.concatenate([k[0] for k in knots])
        self.y_thresholds_ = np.concatenate([k[1] for k in knots])
        self.knot_counts_ = np.array([len(k[0]) for k in knots], dtype=np.int64)

    def _maps(self, like: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        xs = as_tensor(self.x_thresholds_, like).split(self.knot_counts_.tolist())
        ys = as_tensor(self.y_thresholds_, like).split(self.knot_counts_.tolist())
        return list(zip(xs, ys))

    def _predict(self, pred: Predictions) -> torch.Tensor:
        p = pred.probs
        maps = self._maps(p)
        if pred.n_classes == 2:
            p1 = interp(p[:, 1].contiguous(), *maps[0])
            return torch.stack([1 - p1, p1], 1)
        out = torch.stack([interp(p[:, j].contiguous(), *maps[j]) for j in range(p.shape[1])], 1)
        return renormalise(out)

    def _module(self, from_probs: bool) -> torch.nn.Module:
        """The knots of every map as buffers (padded to one table)."""
        return OneVsRestModule(
            self.x_thresholds_, self.y_thresholds_, self.knot_counts_, from_probs
        )
