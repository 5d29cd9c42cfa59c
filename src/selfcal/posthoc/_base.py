"""Estimator-style base class shared by every post-hoc calibrator.

Contract:

* ``__init__`` only stores hyperparameters, verbatim (so ``sklearn.base.clone`` can rebuild
  an estimator from :meth:`Calibrator.get_params`); they are validated in
  :meth:`Calibrator.fit` (numpy numbers are accepted wherever Python numbers are). Every
  calibrator takes ``kind="logits" | "probs" | None``: what a positional score array holds.
* ``fit(*, logits= | probs=, labels=)`` validates the input through :mod:`selfcal.predictions`,
  fits, sets attributes whose names end in ``_`` and returns ``self``. A validated
  :class:`~selfcal.Predictions` may be passed positionally instead, and so may a score array
  with its labels, scikit-learn style: ``fit(X, y)`` reads ``X`` as the ``kind`` the
  calibrator was built with (``TemperatureScaling(kind="probs").fit(p, y)``); without a
  ``kind`` that is a ``ValueError`` (selfcal never guesses), which names the evidence when
  the scores look like probabilities. Tensors that require grad are detached (a calibrator
  is fitted, not differentiated through).
* **Degenerate fits** follow one rule (:meth:`Calibrator.fit`): validation labels of a single
  class raise ``ValueError``; every other case the data cannot identify -- every prediction
  correct, a class missing (for the calibrators with per-class parameters), the likelihood
  falling to the edge of a search interval -- returns a bounded result the class documents
  and warns :class:`~selfcal.exceptions.DegenerateCalibration` with the cause, the result
  and the remedy. Never a silent bound.
* **Mixing with the uniform distribution.** A calibrator with a ``mix`` hyperparameter returns
  ``(1 - eps) p + eps / C``: ``mix="auto"`` (the default of the non-parametric ones) sets
  ``eps = 1 / (n + 1)`` for ``n`` validation rows (Laplace smoothing, Berta et al.'s "ts-mix"
  weight), a number sets ``eps``, 0 returns the un-mixed map. No probability is then exactly
  0 or 1, so a held-out NLL stays below ``log(C / eps)`` per row. The fitted ``eps`` is
  ``mix_``.
* ``predict_proba(*, logits= | probs=)`` (or ``predict_proba(X)``) returns ``(N, C)``
  float64 probabilities in the caller's form (numpy in -> numpy out; torch in -> torch out on
  the same device).
* ``get_params(deep=True)`` / ``set_params(**params)`` as scikit-learn's estimators.
* ``to_module()`` exports the fitted map as a ``torch.nn.Module`` from scores of ``kind`` to
  calibrated logits (log-probabilities): ``softmax(module(z)) == predict_proba(logits=z)``.
* ``save(path)`` / ``load(path)`` use JSON (floats written with ``repr``, which round-trips
  exactly); a file records the class name and the selfcal version. Nothing is pickled.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar, Self

import numpy as np
import torch

from selfcal._validation import check_choice
from selfcal.estimator import SCORE_KINDS, Check, ScoreEstimator, checked_value
from selfcal.estimator.loading import (
    UNIT,
    Fitted,
    FittedType,
    check_probabilities,
    probe_logits,
)
from selfcal.exceptions import DegenerateCalibration
from selfcal.posthoc._degenerate import REMEDY, Coverage
from selfcal.posthoc._mixing import check_mix, mix_confidence, mix_uniform, resolve_mix
from selfcal.posthoc._scores import check_fittable, zero_floor
from selfcal.posthoc._temperature_fits import TemperatureFits
from selfcal.predictions import ArrayLike, Predictions


class Calibrator(ScoreEstimator):
    """Base class of post-hoc calibrators (see the module docstring for the contract).

    ``kind`` (``"logits"``, ``"probs"`` or ``None``, the default) says what a score array
    passed positionally holds -- ``fit(X, y)``, ``predict_proba(X)`` -- and what the module of
    :meth:`to_module` takes (logits when ``None``). Scores passed by name (``logits=``,
    ``probs=``) or as a :class:`~selfcal.Predictions` say what they are themselves, whatever
    ``kind`` is; positional scores without a ``kind`` are a ``ValueError``. The estimator
    machinery (parameters, inputs, files) is :class:`~selfcal.estimator.ScoreEstimator`'s,
    shared with the conformal predictors."""

    _parameters: ClassVar[dict[str, Check]] = {"mix": checked_value(check_mix)}
    _noun: ClassVar[str] = "calibrator"
    _abstract: ClassVar[bool] = True
    _fitted_schema: ClassVar[dict[str, Fitted]] = {
        "mix_": Fitted(range=UNIT),
        "prob_floor_": Fitted(range=UNIT),
    }
    _per_class: ClassVar[bool] = False
    """Whether the calibrator fits parameters per class, which a class missing from the
    validation labels leaves unidentified (warned, see :meth:`fit`)."""
    _rests_on_each_class: ClassVar[bool] = False
    """Whether a class's few rows alone shape its map (unregularised per-class or binary
    fits: Platt, beta, histogram, BBQ, one-vs-rest isotonic): a single row of a class warns."""
    _likelihood_fit: ClassVar[bool] = False
    """Whether the fit is a likelihood optimisation in the logits (``log p`` for
    probabilities), whose float64 arithmetic limits their magnitude to
    :data:`LARGEST_FITTABLE` (larger is a ``ValueError``), and which reads exact zero
    probabilities through the floor of :func:`zero_floor` (fitted as ``prob_floor_``)."""
    _shared_fits: TemperatureFits | None = None
    """The temperature fits this calibrator shares (:meth:`share_temperature_fits`)."""
    _found: list[str] | None = None
    """During :meth:`fit`, the problems its fit has found (:meth:`warn_degenerate`)."""
    uses_groups: ClassVar[bool] = False
    """Whether the fitted map depends on each row's group (:mod:`selfcal.posthoc.groups`):
    such a calibrator needs ``groups=`` in :meth:`fit` and :meth:`predict_proba`; every other
    refuses an explicit ``groups=`` rather than ignore it, unless it :attr:`accepts_groups`."""
    accepts_groups: ClassVar[bool] = False
    """Whether ``groups=`` is optional (when predictions need them: :meth:`needs_groups`)."""

    def needs_groups(self) -> bool:
        """Whether predictions need ``groups=``: :attr:`uses_groups`, or the fitted map's use."""
        return self.uses_groups

    @classmethod
    def prepare_fit(cls) -> None:
        """Do now what the first fit in a process does besides fitting -- import scikit-learn
        or scipy's optimisers, and what their own first fit imports, each slower than most
        fits -- so that :class:`~selfcal.posthoc.AutoCalibration`'s ``fit_seconds`` time the
        fits alone. Nothing by default."""

    def share_temperature_fits(self, fits: TemperatureFits | None) -> Self:
        """Solve this calibrator's temperature-scaling step (TS, TS-mix, SVS, SMS) through
        ``fits``, a :class:`~selfcal.posthoc._temperature_fits.TemperatureFits` shared with
        other calibrators fitted on the same score and label tensors, so that the problem is
        solved once (what :class:`~selfcal.posthoc.AutoCalibration` does for the candidates
        of a fold); ``None``, the default, solves each fit alone. Not a hyperparameter: it
        changes no result, only how often the same one is computed. Returns ``self``."""
        self._shared_fits = fits
        return self

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
        """Fit on validation scores and labels; returns ``self``.

        ``fit(logits=z, labels=y)``, ``fit(probs=p, labels=y)``, ``fit(predictions)`` or,
        scikit-learn style, ``fit(X, y)`` with ``X`` the scores of this calibrator's ``kind``.

        Labels of a single class raise ``ValueError``. When every validation prediction is
        correct, or (for a calibrator with per-class parameters) a class has no example, the
        data cannot identify the fit: it returns the bounded result the class documents and
        warns :class:`~selfcal.exceptions.DegenerateCalibration` once, naming the cause, the
        result and the remedy.

        ``groups=`` (one group a row, or membership columns: :func:`selfcal._inputs.as_groups`)
        is for the calibrators that use them (:attr:`uses_groups`) and refused by the others.
        """
        self._check_params()
        pred = self._grouped(self._resolve_inputs(X, y, logits, probs, labels, True), groups, True)
        self._check_classes(pred.n_classes)
        if self._likelihood_fit:
            check_fittable(pred, type(self).__name__)
            self.prob_floor_ = zero_floor(pred)
            pred = self._floored(pred)
        coverage = Coverage.of(pred, ties=not self._fit_warns_tied_errors())
        self._found = []
        try:
            self._fit(pred)
        finally:
            found = self._found
            del self._found
        self.n_classes_ = pred.n_classes
        if "mix" in self._param_names():
            self.mix_ = resolve_mix(self._mix_setting(), pred.n_samples)
        problems = [*found, *self._coverage_problems(coverage)]
        if problems:
            self.warn_degenerate("; also ".join(problems))
        return self

    def predict_proba(
        self,
        X: Predictions | ArrayLike | None = None,
        /,
        *,
        logits: ArrayLike | None = None,
        probs: ArrayLike | None = None,
        groups: ArrayLike | None = None,
    ) -> Any:
        """Calibrated ``(N, C)`` probabilities (float64) in the caller's form (``groups=``
        as in :meth:`fit`)."""
        pred = self._prepare(X, logits, probs, groups)
        return pred.output(self._finite(self.calibrated(pred), "predict_proba"))

    def predict_confidence(
        self,
        X: Predictions | ArrayLike | None = None,
        /,
        *,
        logits: ArrayLike | None = None,
        probs: ArrayLike | None = None,
        groups: ArrayLike | None = None,
    ) -> Any:
        """Calibrated top-label confidence, ``(N,)`` float64 in the caller's form: what selective
        prediction thresholds. By default the largest calibrated probability; a calibrator
        that maps the confidence itself (top-label isotonic regression) returns that map."""
        pred = self._prepare(X, logits, probs, groups)
        return pred.output(self._finite(self.calibrated_confidence(pred), "predict_confidence"))

    def calibrated(self, pred: Predictions) -> torch.Tensor:
        """The fitted map's ``(N, C)`` float64 probabilities of validated predictions, as a
        tensor on their device: the pipeline of :meth:`predict_proba` -- floor (the fitted
        ``prob_floor_`` of a likelihood fit), map, mix with the uniform distribution (the
        fitted ``mix_``) -- without its input checks and conversions. What a calibrator
        holding another (:class:`~selfcal.posthoc.AutoCalibration`) predicts through."""
        p = self._predict(self._floored(pred))
        eps = self._mix_weight()
        return mix_uniform(p, eps) if eps else p

    def calibrated_confidence(self, pred: Predictions) -> torch.Tensor:
        """The calibrated top-label confidence ``(N,)`` of validated predictions: the pipeline
        of :meth:`predict_confidence` (floor, map, mix), as :meth:`calibrated` is
        :meth:`predict_proba`'s."""
        conf = self._confidence(self._floored(pred))
        eps = self._mix_weight()
        return mix_confidence(conf, eps, pred.n_classes) if eps else conf

    def warn_degenerate(self, problem: str) -> None:
        """Warn :class:`~selfcal.exceptions.DegenerateCalibration` as this calibrator:
        ``"Name: problem. Remedy."`` (``problem`` says, in one clause, what the validation data
        leave unidentified and what the fit returned instead). Called from the fit (a fit
        helper such as :func:`~selfcal.posthoc._temperature_fits.report_fit` calls it on
        the calibrator it fits): what the fit finds is collected and warned once, after it,
        with what the data's coverage shows (:meth:`_coverage_problems`) -- one warning names
        every cause, and points at the caller of ``fit``."""
        if self._found is not None:
            self._found.append(problem)
            return
        warnings.warn(
            f"{type(self).__name__}: {problem}. {REMEDY}.", DegenerateCalibration, stacklevel=3
        )

    def score(
        self,
        X: Predictions | ArrayLike | None = None,
        y: ArrayLike | None = None,
        /,
        *,
        logits: ArrayLike | None = None,
        probs: ArrayLike | None = None,
        labels: ArrayLike | None = None,
        groups: ArrayLike | None = None,
    ) -> float:
        """The mean log-likelihood of the labels under the calibrated probabilities,
        ``(1/N) sum_i log p_{i, y_i}`` (minus the NLL: higher is better), so that scikit-learn's
        ``GridSearchCV`` and ``cross_val_score`` work without ``scoring=``."""
        from selfcal.metrics import nll

        pred = self._grouped(self._resolve_inputs(X, y, logits, probs, labels, True), groups)
        calibrated = self.predict_proba(pred)
        return -float(nll(probs=calibrated, labels=pred.require_labels()))

    def _confidence(self, pred: Predictions) -> torch.Tensor:
        return self._predict(pred).amax(dim=1)

    def _finite(self, out: torch.Tensor, method: str) -> torch.Tensor:
        """``out``, or ``ValueError`` naming the first row whose calibrated values are NaN or
        infinite (never returned: scores the input checks let through but the fitted map
        overflows on)."""
        bad = ~torch.isfinite(out)
        if bad.ndim > 1:
            bad = bad.any(dim=1)
        if bool(bad.any()):
            i = int(torch.nonzero(bad)[0, 0])
            raise ValueError(
                f"{type(self).__name__}.{method}: the fitted map gives NaN or infinity on row "
                f"{i} (its scores overflow the map's float64 arithmetic); check that row"
            )
        return out

    def _floored(self, pred: Predictions) -> Predictions:
        """``pred`` as this calibrator reads it: probabilities below the fitted
        ``prob_floor_`` raised to it, rows renormalised (likelihood fits only)."""
        if not self._likelihood_fit:
            return pred
        return pred.with_floor(self.prob_floor_)

    def _mix_setting(self) -> Any:
        """The ``mix`` hyperparameter of a calibrator that has one."""
        return getattr(self, "mix", 0.0)

    def _mix_weight(self) -> float:
        """The fitted mixing weight ``eps`` (0 for a calibrator without ``mix``)."""
        return float(getattr(self, "mix_", 0.0))

    def to_module(self, kind: str | None = None) -> torch.nn.Module:
        """The fitted map as a ``torch.nn.Module`` for deployment: ``(N, C)`` scores of ``kind``
        (default: this calibrator's ``kind``) -> ``(N, C)`` calibrated logits, so that
        ``softmax(module(scores)) == predict_proba(**{kind: scores})`` up to float64 rounding.

        The module holds the fitted values as float64 buffers and computes in their dtype
        (``module.float()`` gives a float32 module), on their device (``module.to(device)``).
        Its output is log-probabilities for every calibrator that is not a linear map of the
        scores (``-inf`` where a calibrated probability is exactly 0). It does not validate its
        input (``predict_proba`` does) and takes 2-D scores only (expand one-column binary
        scores to ``[0, z]`` logits or ``[1 - p, p]`` probabilities first). Every module
        exports with ``torch.export.export`` and scripts with ``torch.jit.script``, with
        identical outputs (``tests/posthoc/test_modules.py``; methods §2.7)."""
        self._check_fitted()
        kind = kind or self.kind or "logits"
        check_choice("kind", kind, SCORE_KINDS)
        module = self._module(kind == "probs")
        floor = float(getattr(self, "prob_floor_", 0.0))
        if kind == "probs" and floor > 0.0:
            from selfcal.posthoc._modules import ProbFloorModule

            module = torch.nn.Sequential(ProbFloorModule(floor), module)
        eps = self._mix_weight()
        if eps:
            from selfcal.posthoc._modules import MixtureModule

            module = MixtureModule(module, eps)
        return module.eval()

    def _loaded(self, fitted: dict[str, Any], version: int) -> None:
        if version == 1 and self._likelihood_fit and "prob_floor_" not in fitted:
            self.prob_floor_ = 0.0  # saved before the floor existed: read as before

    def _coverage_problems(self, coverage: Coverage) -> list[str]:
        """What the validation data leave unidentified (see :meth:`fit`), one clause each for
        the warning of :meth:`fit`."""
        problems = []
        if coverage.all_correct:
            problems.append(
                f"all {coverage.n} validation predictions are correct, so the data cannot say "
                f"how confident to be; {self._all_correct_outcome(coverage)}"
            )
        if coverage.missing and self._per_class:
            problems.append(f"{coverage.missing_text()}; {self._missing_outcome(coverage)}")
        if coverage.errors_all_tied and not self._fit_warns_tied_errors():
            problems.append(
                f"every validation error ({coverage.n - coverage.n_correct} of {coverage.n}) is "
                "an exact tie (its label shares the top score), so no row is confidently wrong "
                "and the data cannot say how confident to be; "
                f"{self._tied_errors_outcome(coverage)}"
            )
        if coverage.single and self._rests_on_each_class:
            problems.append(
                f"{coverage.single_text()}, so its map rests on one example and the calibrated "
                "probabilities can be far off"
            )
        return problems

    def _fit_warns_tied_errors(self) -> bool:
        """Whether this calibrator's own fit warns when every validation error is an exact tie
        (:attr:`~selfcal.posthoc._degenerate.Coverage.errors_all_tied`); for every other
        calibrator :meth:`fit` warns, as when every prediction is correct -- both leave the
        confidence unidentified. The fits that solve temperature scaling's NLL say so
        themselves (the tied rows' likelihood rises as ``T`` falls, so the minimiser lies at
        the end of the interval, and they return ``T = 1``), and ensemble temperature scaling
        returns the scores unchanged and says so."""
        return False

    def _tied_errors_outcome(self, coverage: Coverage) -> str:
        """What this calibrator returned when every validation error is an exact tie."""
        return "returned the map fitted as they give it, which can be far too sharp"

    def _all_correct_outcome(self, coverage: Coverage) -> str:
        """What this calibrator returned when every validation prediction is correct."""
        eps = self._mix_weight()
        if eps:
            top = 1 - eps + eps / coverage.n_classes
            return (
                f"returned its map mixed with the uniform distribution (eps = {eps:.3g}), so "
                f"no confidence exceeds {top:.6g}"
            )
        return "the fit is returned as it is (mix=0: confidences of 1 are possible)"

    def _missing_outcome(self, coverage: Coverage) -> str:
        """What this calibrator returned for the classes missing from the labels."""
        eps = self._mix_weight()
        mixed = (
            f", so after mixing their probability is about eps/C = "
            f"{eps / coverage.n_classes:.2g} or less"
            if eps
            else ""
        )
        return f"those classes' maps are fitted to all-zero targets{mixed}"

    def _all_fitted(self) -> tuple[str, ...]:
        mixed = ("mix_",) if "mix" in self._param_names() else ()
        floor = ("prob_floor_",) if self._likelihood_fit else ()
        return (*super()._all_fitted(), *mixed, *floor)

    def _prepare(
        self,
        X: Predictions | ArrayLike | None,
        logits: ArrayLike | None,
        probs: ArrayLike | None,
        groups: ArrayLike | None = None,
    ) -> Predictions:
        """The scores to predict on, validated (not yet floored: :meth:`calibrated` floors)."""
        pred = self._grouped(self._fitted_predictions(X, logits, probs), groups)
        if self._likelihood_fit:
            check_fittable(pred, type(self).__name__)
        return pred

    def _grouped(self, p: Predictions, groups: ArrayLike | None, fit: bool = False) -> Predictions:
        """``p`` with the ``groups=`` given (by the group rule), or ``ValueError``: ``groups=``
        given to a calibrator that neither uses nor accepts them, or none (given or in ``p``)
        to one that needs them (to fit: :attr:`uses_groups`; else :meth:`needs_groups`)."""
        name = type(self).__name__
        if groups is not None and not (self.uses_groups or self.accepts_groups):
            raise ValueError(
                f"{name} does not use groups; to calibrate per group use "
                f"GroupwiseCalibration({name}()) or MulticlassMulticalibration"
            )
        p = p if groups is None else p.with_groups(groups)
        needed = self.uses_groups if fit else self.needs_groups()
        if needed and p.groups is None:
            raise ValueError(f"{name} needs groups=: the group of each row (or membership columns)")
        return p

    def _check_classes(self, n_classes: int) -> None:
        """Hook: refuse class counts a method does not support."""

    def _validate_params(self) -> None:
        super()._validate_params()
        self._check_classes(self.n_classes_)

    def _check_loaded(self) -> None:
        """A loaded calibrator must map scores to probabilities: it is tried on one uniform
        and one confident row per class (:func:`~selfcal.estimator.loading.probe_logits`)."""
        probe = probe_logits(self.n_classes_)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a probe row is not the user's data
            p = self.predict_proba(logits=probe, groups=self._probe_groups(len(probe)))
        check_probabilities(np.asarray(p))

    def _probe_groups(self, n_rows: int) -> list[str] | None:
        """The groups of :meth:`_check_loaded`'s probe rows (none unless the map uses them)."""

    def _fit(self, pred: Predictions) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _predict(self, pred: Predictions) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _module(self, from_probs: bool) -> torch.nn.Module:  # pragma: no cover - abstract
        """The module of :meth:`to_module`, taking probabilities if ``from_probs`` else
        logits."""
        raise NotImplementedError


CALIBRATOR = FittedType("a calibrator", lambda value: isinstance(value, Calibrator), numeric=False)
"""The type of a fitted value that is itself a calibrator (``AutoCalibration.calibrator_``),
read from the file as its own document."""
