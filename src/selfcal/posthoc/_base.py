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

import json
import math
import numbers
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np
import torch

from selfcal._validation import check_choice, check_real
from selfcal.exceptions import DegenerateCalibration, not_fitted
from selfcal.predictions import ArrayLike, Predictions, as_predictions, looks_like_probabilities

FORMAT = "selfcal-calibrator"
FORMAT_VERSION = 1

SCORE_KINDS = ("logits", "probs")
"""What a positional score array holds (the ``kind`` hyperparameter of every calibrator)."""

LARGEST_FITTABLE = math.sqrt(torch.finfo(torch.float64).max) / math.exp(10)
"""The largest logit magnitude the likelihood fits accept (about 6e149): they scale logits by
up to ``e^10`` and square them (Hessians), which must stay finite in float64."""

REMEDY = (
    "Fit on more validation rows: stratified, so that every class and some of the model's "
    "errors appear"
)
"""The remedy every :class:`~selfcal.exceptions.DegenerateCalibration` warning names."""


@dataclass(frozen=True)
class Coverage:
    """What the validation labels and predictions cover: ``n`` rows, the classes with no
    example (``missing``), and how many predictions are correct."""

    n: int
    n_classes: int
    missing: tuple[int, ...]
    n_correct: int

    @classmethod
    def of(cls, pred: Predictions) -> Coverage:
        """The coverage of validated predictions with labels; ``ValueError`` when the labels
        hold a single class (nothing about the others can be learned)."""
        labels = pred.require_labels()
        counts = torch.bincount(labels, minlength=pred.n_classes).cpu()
        present = torch.nonzero(counts).squeeze(1).tolist()
        if len(present) == 1:
            raise ValueError(
                f"the validation labels hold only class {present[0]} of {pred.n_classes} "
                f"({pred.n_samples} rows): a calibrator needs examples of at least two "
                "classes; fit on a validation split with several classes"
            )
        missing = tuple(int(j) for j in torch.nonzero(counts == 0).squeeze(1).tolist())
        return cls(pred.n_samples, pred.n_classes, missing, int(pred.correct.sum()))

    @property
    def all_correct(self) -> bool:
        return self.n_correct == self.n

    def missing_text(self) -> str:
        shown = ", ".join(map(str, self.missing[:10])) + (", ..." if len(self.missing) > 10 else "")
        return (
            f"the validation labels hold {self.n_classes - len(self.missing)} of the "
            f"{self.n_classes} classes (none of class {shown})"
        )


def check_fittable(pred: Predictions, name: str) -> None:
    """``ValueError`` naming the first row of logits beyond :data:`LARGEST_FITTABLE` in
    magnitude (probabilities' logs are never that large)."""
    if pred.kind != "logits":
        return
    big = pred.scores.detach().abs().amax(dim=1) > LARGEST_FITTABLE
    if bool(big.any()):
        i = int(torch.nonzero(big)[0, 0])
        value = float(pred.scores[i].double().abs().max())
        raise ValueError(
            f"{name}: row {i} has a logit of magnitude {value:.3g}, beyond the "
            f"{LARGEST_FITTABLE:.1e} its float64 likelihood fit can scale and square; these are "
            "not the logits of a trained model (or not logits at all): check that row"
        )


def resolve_mix(mix: Any, n: int) -> float:
    """The mixing weight ``eps`` of a ``mix`` hyperparameter: ``"auto"`` is ``1 / (n + 1)``,
    a number in ``[0, 1)`` is itself."""
    if mix == "auto":
        return 1.0 / (n + 1)
    return check_real("mix", mix, 0.0, 1.0, high_open=True)


def check_mix(mix: Any) -> None:
    """``mix`` is ``"auto"`` or a number in ``[0, 1)``."""
    if not (isinstance(mix, str) and mix == "auto"):
        if isinstance(mix, str):
            raise ValueError(f"mix must be 'auto' or a number in [0, 1), got {mix!r}")
        resolve_mix(mix, 1)


def mix_uniform(p: torch.Tensor, eps: float) -> torch.Tensor:
    """``(1 - eps) p + eps / C`` of ``(N, C)`` probabilities."""
    return (1.0 - eps) * p + eps / p.shape[1]


def mix_confidence(conf: torch.Tensor, eps: float, n_classes: int) -> torch.Tensor:
    """The mixed probability of the predicted class: ``(1 - eps) c + eps / C``."""
    return (1.0 - eps) * conf + eps / n_classes


def _version() -> str:
    from selfcal import __version__

    return __version__


def _encode(value: Any) -> Any:
    """Fitted value or hyperparameter -> JSON-able: arrays as dtype/shape/flat data, a
    calibrator as its own document (``{"calibrator": {class, params, fitted}}``), mappings
    as ``{"mapping": ...}``, sequences as lists."""
    if isinstance(value, np.ndarray):
        data = (
            [float(x) for x in value.reshape(-1)]
            if value.dtype.kind == "f"
            else [int(x) for x in value.reshape(-1)]
        )
        return {"dtype": str(value.dtype), "shape": list(value.shape), "data": data}
    if isinstance(value, Calibrator):
        return {"calibrator": value._document()}
    if isinstance(value, dict):
        return {"mapping": {str(k): _encode(v) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise TypeError(f"cannot serialise fitted value of type {type(value).__name__}")


def _decode(value: Any, path: str | Path) -> Any:
    if isinstance(value, list):
        return [_decode(v, path) for v in value]
    if not isinstance(value, dict):
        return value
    if "calibrator" in value:
        return Calibrator._from_document(value["calibrator"], path)
    if "mapping" in value:
        return {k: _decode(v, path) for k, v in value["mapping"].items()}
    return np.asarray(value["data"], dtype=value["dtype"]).reshape(value["shape"])


class Calibrator:
    """Base class of post-hoc calibrators (see the module docstring for the contract).

    ``kind`` (``"logits"``, ``"probs"`` or ``None``, the default) says what a score array
    passed positionally holds -- ``fit(X, y)``, ``predict_proba(X)`` -- and what the module of
    :meth:`to_module` takes (logits when ``None``). Scores passed by name (``logits=``,
    ``probs=``) or as a :class:`~selfcal.Predictions` say what they are themselves, whatever
    ``kind`` is; positional scores without a ``kind`` are a ``ValueError``."""

    _hyperparameters: ClassVar[tuple[str, ...]] = ()
    """Names of the constructor arguments other than ``kind`` (stored verbatim as attributes)."""
    _fitted_attributes: ClassVar[tuple[str, ...]] = ()
    """Names of the attributes :meth:`fit` sets (besides ``n_classes_`` and ``mix_``)."""
    _per_class: ClassVar[bool] = False
    """Whether the calibrator fits parameters per class, which a class missing from the
    validation labels leaves unidentified (warned, see :meth:`fit`)."""
    _likelihood_fit: ClassVar[bool] = False
    """Whether the fit is a likelihood optimisation in the logits (``log p`` for
    probabilities), whose float64 arithmetic limits their magnitude to
    :data:`LARGEST_FITTABLE` (larger is a ``ValueError``), and which reads exact zero
    probabilities through the floor of :func:`zero_floor` (fitted as ``prob_floor_``)."""

    def __init__(self, kind: str | None = None) -> None:
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
    ) -> Self:
        """Fit on validation scores and labels; returns ``self``.

        ``fit(logits=z, labels=y)``, ``fit(probs=p, labels=y)``, ``fit(predictions)`` or,
        scikit-learn style, ``fit(X, y)`` with ``X`` the scores of this calibrator's ``kind``.

        Labels of a single class raise ``ValueError``. When every validation prediction is
        correct, or (for a calibrator with per-class parameters) a class has no example, the
        data cannot identify the fit: it returns the bounded result the class documents and
        warns :class:`~selfcal.exceptions.DegenerateCalibration` once, naming the cause, the
        result and the remedy.
        """
        self._check_kind()
        if "mix" in self._hyperparameters:
            check_mix(self._mix_setting())
        self._validate_hyperparameters()
        pred = self._predictions(X, y, logits, probs, labels, need_labels=True)
        self._check_classes(pred.n_classes)
        if self._likelihood_fit:
            check_fittable(pred, type(self).__name__)
            self.prob_floor_ = zero_floor(pred)
            pred = self._floored(pred)
        coverage = Coverage.of(pred)
        self._fit(pred)
        self.n_classes_ = pred.n_classes
        if "mix" in self._hyperparameters:
            self.mix_ = resolve_mix(self._mix_setting(), pred.n_samples)
        self._warn_coverage(coverage)
        return self

    def predict_proba(
        self,
        X: Predictions | ArrayLike | None = None,
        /,
        *,
        logits: ArrayLike | None = None,
        probs: ArrayLike | None = None,
    ) -> Any:
        """Calibrated ``(N, C)`` probabilities (float64) in the caller's form."""
        pred = self._prepare(X, logits, probs)
        p = self._predict(pred)
        eps = self._mix_weight()
        return pred.output(mix_uniform(p, eps) if eps else p)

    def predict_confidence(
        self,
        X: Predictions | ArrayLike | None = None,
        /,
        *,
        logits: ArrayLike | None = None,
        probs: ArrayLike | None = None,
    ) -> Any:
        """Calibrated top-label confidence, ``(N,)`` float64 in the caller's form: what selective
        prediction thresholds. By default the largest calibrated probability; a calibrator
        that maps the confidence itself (top-label isotonic regression) returns that map."""
        pred = self._prepare(X, logits, probs)
        conf = self._confidence(pred)
        eps = self._mix_weight()
        return pred.output(mix_confidence(conf, eps, pred.n_classes) if eps else conf)

    def _confidence(self, pred: Predictions) -> torch.Tensor:
        return self._predict(pred).amax(dim=1)

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

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Hyperparameters as given to the constructor (``kind`` last). ``deep`` is accepted
        for scikit-learn (``sklearn.base.clone``); a calibrator holds no sub-estimators, so it
        changes nothing."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> Self:
        """Set hyperparameters by name and return ``self`` (as scikit-learn's estimators; the
        values are validated by the next :meth:`fit`). A name that is not a hyperparameter of
        this calibrator raises ``ValueError`` naming the valid ones."""
        valid = self._param_names()
        unknown = sorted(set(params) - set(valid))
        if unknown:
            raise ValueError(
                f"{type(self).__name__} has no hyperparameter {unknown[0]!r}; "
                f"valid: {', '.join(valid)}"
            )
        for name, value in params.items():
            setattr(self, name, value)
        return self

    def fitted_attributes(self) -> dict[str, Any]:
        """The fitted values by name (``n_classes_`` first, then the calibrator's own, e.g.
        ``{"n_classes_": 10, "temperature_": 1.83}``), as :meth:`save` writes them."""
        self._check_fitted()
        return {name: getattr(self, name) for name in self._all_fitted()}

    def __sklearn_tags__(self) -> Any:
        """Estimator tags for scikit-learn >= 1.6 meta-estimators (``GridSearchCV``,
        ``cross_validate``), built only when scikit-learn asks: fitting needs labels; no
        other tag applies (a calibrator maps scores, it is not itself a classifier)."""
        from sklearn.utils import Tags, TargetTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=True))

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

    def save(self, path: str | Path) -> None:
        """Write hyperparameters and fitted attributes to a JSON file."""
        doc = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "selfcal_version": _version(),
            **self._document(),
        }
        Path(path).write_text(json.dumps(doc, indent=1, allow_nan=False))

    @classmethod
    def load(cls, path: str | Path) -> Calibrator:
        """Read a file written by :meth:`save`. Called on a subclass, the file must hold that
        class; called on :class:`Calibrator`, the class named in the file is built."""
        doc = json.loads(Path(path).read_text())
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(f"{path} is not a selfcal calibrator file")
        if doc.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"{path} has calibrator format version {doc.get('format_version')!r}; "
                f"this selfcal reads version {FORMAT_VERSION}"
            )
        cls._resolve(doc.get("class"), path)
        return Calibrator._from_document(doc, path)

    def _document(self) -> dict[str, Any]:
        """``{"class", "params", "fitted"}``: what :meth:`save` writes for this calibrator."""
        return {
            "class": type(self).__name__,
            "params": {k: _encode(v) for k, v in self.get_params().items()},
            "fitted": {k: _encode(v) for k, v in self.fitted_attributes().items()},
        }

    @staticmethod
    def _from_document(doc: dict[str, Any], path: str | Path) -> Calibrator:
        name = doc.get("class")
        params = {k: _decode(v, path) for k, v in doc["params"].items()}
        obj = Calibrator._resolve(name, path)(**params)
        fitted = doc["fitted"]
        unknown = sorted(set(fitted) - set(obj._all_fitted()))
        if unknown:
            raise ValueError(
                f"{path}: {name} has no fitted attribute {unknown[0]!r} (it sets "
                f"{', '.join(obj._all_fitted())})"
            )
        for key, value in fitted.items():
            setattr(obj, key, _decode(value, path))
        if obj._likelihood_fit and "prob_floor_" not in fitted:
            obj.prob_floor_ = 0.0  # saved before the floor existed: read as before
        obj._check_fitted()
        return obj

    # ------------------------------------------------------------------ helpers
    @classmethod
    def _param_names(cls) -> tuple[str, ...]:
        return (*cls._hyperparameters, "kind")

    def _predictions(
        self,
        X: Predictions | ArrayLike | None,
        y: ArrayLike | None,
        logits: ArrayLike | None,
        probs: ArrayLike | None,
        labels: ArrayLike | None,
        need_labels: bool,
    ) -> Predictions:
        """Resolve ``(X[, y])`` or ``logits= | probs=, labels=`` into validated predictions
        (tensors that require grad detached)."""
        if y is not None and labels is not None:
            raise ValueError("pass the labels once: positionally (fit(X, y)) or as labels=")
        labels = _detached(y if y is not None else labels)
        logits, probs = _detached(logits), _detached(probs)
        if X is None or isinstance(X, Predictions):
            return as_predictions(
                X, labels=labels, logits=logits, probs=probs, need_labels=need_labels
            )
        if logits is not None or probs is not None:
            raise ValueError(
                "pass the scores once: positionally (read as this calibrator's kind) or as "
                "logits=... / probs=..."
            )
        if self.kind is None:
            raise ValueError(self._kind_needed(X))
        scores = {self.kind: _detached(X)}
        return as_predictions(labels=labels, need_labels=need_labels, **scores)

    def _kind_needed(self, scores: ArrayLike) -> str:
        """The one-line error for positional scores without a ``kind``, with the evidence
        when they look like probabilities."""
        name = type(self).__name__
        evidence = (
            " (these look like probabilities: every row lies in [0, 1] and sums to 1)"
            if looks_like_probabilities(scores)
            else ""
        )
        return (
            f"{name} got scores positionally but no kind{evidence}: build it with "
            f"{name}(kind='logits') or {name}(kind='probs'), or pass logits=... / probs=... "
            "by name (selfcal never guesses)"
        )

    def _check_kind(self) -> None:
        if self.kind is not None:
            check_choice("kind", self.kind, SCORE_KINDS)

    def _warn_coverage(self, coverage: Coverage) -> None:
        """One :class:`~selfcal.exceptions.DegenerateCalibration` warning for what the
        validation data leave unidentified (see :meth:`fit`)."""
        problems = []
        if coverage.all_correct:
            problems.append(
                f"all {coverage.n} validation predictions are correct, so the data cannot say "
                f"how confident to be; {self._all_correct_outcome(coverage)}"
            )
        if coverage.missing and self._per_class:
            problems.append(f"{coverage.missing_text()}; {self._missing_outcome(coverage)}")
        if problems:
            self._warn_degenerate("; also ".join(problems))

    def _warn_degenerate(self, problem: str) -> None:
        """Warn :class:`~selfcal.exceptions.DegenerateCalibration`: ``"Name: problem.
        Remedy."``"""
        warnings.warn(
            f"{type(self).__name__}: {problem}. {REMEDY}.", DegenerateCalibration, stacklevel=4
        )

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

    @classmethod
    def _resolve(cls, name: Any, path: str | Path) -> type[Calibrator]:
        if cls is not Calibrator:
            if name != cls.__name__:
                raise ValueError(
                    f"{path} holds a {name!r} calibrator, not a {cls.__name__}; load it with "
                    f"{name}.load or Calibrator.load"
                )
            return cls
        known = {c.__name__: c for c in _subclasses(Calibrator)}
        if name not in known:
            raise ValueError(f"{path} holds an unknown calibrator class {name!r}")
        return known[name]

    def _all_fitted(self) -> tuple[str, ...]:
        mixed = ("mix_",) if "mix" in self._hyperparameters else ()
        floor = ("prob_floor_",) if self._likelihood_fit else ()
        return ("n_classes_",) + self._fitted_attributes + mixed + floor

    def _check_fitted(self) -> None:
        missing = [n for n in self._all_fitted() if not hasattr(self, n)]
        if missing:
            raise not_fitted(
                f"this {type(self).__name__} is not fitted yet; call fit(logits=... or "
                f"probs=..., labels=...) first (missing {', '.join(missing)})"
            )

    def _prepare(
        self,
        X: Predictions | ArrayLike | None,
        logits: ArrayLike | None,
        probs: ArrayLike | None,
    ) -> Predictions:
        self._check_fitted()
        pred = self._predictions(X, None, logits, probs, None, need_labels=False)
        if pred.n_classes != self.n_classes_:
            raise ValueError(
                f"{type(self).__name__} was fitted on {self.n_classes_} classes but got scores "
                f"with {pred.n_classes} columns"
            )
        return self._floored(pred)

    def _check_classes(self, n_classes: int) -> None:
        """Hook: refuse class counts a method does not support."""

    def _validate_hyperparameters(self) -> None:
        """Hook: raise ``ValueError`` for invalid hyperparameters."""

    def _fit(self, pred: Predictions) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _predict(self, pred: Predictions) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _module(self, from_probs: bool) -> torch.nn.Module:  # pragma: no cover - abstract
        """The module of :meth:`to_module`, taking probabilities if ``from_probs`` else
        logits."""
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"


@contextmanager
def recorded_degenerate_fits() -> Iterator[list[str]]:
    """Collect the :class:`~selfcal.exceptions.DegenerateCalibration` messages of the fits in
    the block into the yielded list (filled when the block ends) instead of showing them --
    for sweeps that record per run what a calibrator could not identify; other warnings pass
    through."""
    messages: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield messages
    for w in caught:
        if issubclass(w.category, DegenerateCalibration):
            messages.append(str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _detached(x: Any) -> Any:
    """A tensor that requires grad, detached (anything else as it is)."""
    if isinstance(x, torch.Tensor) and x.requires_grad:
        return x.detach()
    return x


def _subclasses(cls: type[Calibrator]) -> list[type[Calibrator]]:
    out: list[type[Calibrator]] = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_subclasses(sub))
    return out


# ---------------------------------------------------------------------- shared utilities
def zero_floor(pred: Predictions) -> float:
    """The floor under which the likelihood fits read probabilities: half the smallest
    positive probability of ``pred`` when some probability is exactly 0, else 0 (logits, or
    no zero).

    ``log 0`` has no value, and any fixed stand-in decides the fit: read as
    ``log(tiny) = -708`` (or probmetrics' ``log(float32 tiny) = -87``), a random forest's
    "no tree voted for the true class" dominates temperature scaling's NLL and drives it to
    a huge temperature (test NLL 0.97 against 0.49 over 17 random-forest sets with zeros;
    matrix scaling 2.0 against 0.48; ``scripts/zero_probabilities.py``). A zero is instead
    read as half the smallest probability the model gave on the fitting rows -- for vote
    fractions, half a vote; for a network, below anything it resolves -- and every row
    renormalised (:meth:`~selfcal.Predictions.with_floor`)."""
    if pred.kind != "probs":
        return 0.0
    p = pred.scores
    zero = p == 0
    if not bool(zero.any()):
        return 0.0
    return float(p[~zero].min()) / 2


def scores_as_logits(pred: Predictions) -> torch.Tensor:
    """``(N, C)`` float64 logits: the logits as given, or ``log(p)`` for probabilities (a zero
    -- left only when the fit saw none, see :func:`zero_floor` -- becomes
    ``log(tiny) ~ -708``)."""
    if pred.kind == "logits":
        return pred.scores.double()
    return pred.log_probs


def as_tensor(values: np.ndarray | float, like: torch.Tensor) -> torch.Tensor:
    """Fitted numpy values as a float64 tensor on ``like``'s device."""
    return torch.as_tensor(np.asarray(values, dtype=np.float64), device=like.device)


def interp(x: torch.Tensor, xp: torch.Tensor, fp: torch.Tensor) -> torch.Tensor:
    """Piecewise-linear interpolation through ``(xp, fp)`` (``xp`` strictly increasing),
    constant beyond the ends -- ``numpy.interp`` on any torch device."""
    if xp.shape[0] == 1:
        return fp[0].expand_as(x).clone()
    xc = x.clamp(xp[0], xp[-1])
    i = (torch.searchsorted(xp, xc.contiguous(), right=True) - 1).clamp(0, xp.shape[0] - 2)
    x0, x1, y0, y1 = xp[i], xp[i + 1], fp[i], fp[i + 1]
    return y0 + (xc - x0) * ((y1 - y0) / (x1 - x0))
