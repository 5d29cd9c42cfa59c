"""The estimator machinery every fitted map of scores shares: post-hoc calibrators
(:class:`~selfcal.posthoc.Calibrator`) and conformal predictors
(:class:`~selfcal.conformal.SplitConformal`).

:class:`ScoreEstimator` owns what is the same for both: hyperparameters stored verbatim by
``__init__`` and validated at ``fit`` (so ``sklearn.base.clone`` rebuilds an estimator from
:meth:`~ScoreEstimator.get_params`), ``kind="logits" | "probs" | None`` for scores passed
positionally, input resolution through :mod:`selfcal.predictions` (never guessing),
fitted attributes ending in ``_``, and the JSON file of ``save`` / ``load``
(:mod:`selfcal.estimator.persistence`). A *family* is the class directly below
:class:`ScoreEstimator` (``Calibrator``, ``SplitConformal``): ``Family.load`` builds any class
of the family that a file names, ``Subclass.load`` only that class.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Self

from selfcal._validation import check_choice
from selfcal.estimator.inputs import resolve_predictions
from selfcal.estimator.loading import INTEGER, Fitted, FittedRange, check_values, field, mapping
from selfcal.estimator.persistence import (
    decode,
    encode,
    read_document,
    subclasses,
    write_document,
)
from selfcal.exceptions import not_fitted
from selfcal.predictions import ArrayLike, Predictions

__all__ = ["SCORE_KINDS", "Check", "ScoreEstimator", "checked_value", "hyperparameter_names"]

Check = Callable[[str, Any], object]
"""A hyperparameter's check: ``check(name, value)`` raises ``ValueError`` naming ``name`` when
``value`` is invalid (:data:`ScoreEstimator._parameters`)."""

SCORE_KINDS = ("logits", "probs")
"""What a positional score array holds (the ``kind`` hyperparameter of every estimator)."""


class ScoreEstimator:
    """Base class of the estimators fitted on held-out scores and labels (module docstring)."""

    _parameters: ClassVar[dict[str, Check]] = {}
    """Each hyperparameter's check, by name: called as ``check(name, value)`` by :meth:`fit`
    (and on a loaded estimator), it raises ``ValueError`` naming the hyperparameter. The
    hyperparameters themselves -- names, order, defaults -- are declared once, by the
    constructor's signature (its arguments before any keyword-only one, ``kind`` last, stored
    verbatim as attributes): :meth:`get_params`, ``set_params``, ``repr`` and :meth:`save`
    read them from there (:func:`hyperparameter_names`). A class's entries add to (and
    override) its bases', so a check shared by a family is written once, in its base; a name
    the signature lacks is ignored. Keyword-only arguments are not hyperparameters (a
    deprecated alias, such as ``SplitConformal(score=...)``)."""
    _fitted_attributes: ClassVar[tuple[str, ...]] = ()
    """Names of the attributes :meth:`fit` sets (besides ``n_classes_``)."""
    _noun: ClassVar[str] = "estimator"
    """What the family is called in error messages (``"calibrator"``)."""
    _abstract: ClassVar[bool] = False
    """Set on a family's base class that a file may not name (only in its own body)."""
    _fitted_schema: ClassVar[dict[str, Fitted]] = {"n_classes_": Fitted(INTEGER, FittedRange(2.0))}
    """What each fitted value is (checked when a file is loaded): its type and where it
    lies (:class:`~selfcal.estimator.loading.Fitted`). A class's entries add to (and
    override) its bases'; a value without one is a finite number. The round trip of every
    registered calibrator on the reliability audit's fuzz cases checks that it is what the
    fits write (``tests/estimator/test_round_trip.py``)."""
    _version_1_lacks: ClassVar[tuple[str, ...]] = ()
    """Hyperparameters added while format version 1 was written, which a version-1 file may
    lack: each acts on the fit only, so its default loads the same predictions."""
    _stored_names: ClassVar[dict[str, str]] = {}
    """Hyperparameters stored in files under another name: the name they had when the file
    format was set (``{"nonconformity": "score"}``), so that a file's bytes do not change when
    a hyperparameter is renamed and files of every version read alike."""

    def __init__(self, kind: str | None = None) -> None:
        self.kind = kind

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Hyperparameters as given to the constructor (``kind`` last). ``deep`` is accepted
        for scikit-learn (``sklearn.base.clone``); an estimator here holds no sub-estimators,
        so it changes nothing."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> Self:
        """Set hyperparameters by name and return ``self`` (as scikit-learn's estimators; the
        values are validated by the next ``fit``). A name that is not a hyperparameter of
        this estimator raises ``ValueError`` naming the valid ones."""
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
        """The fitted values by name (``n_classes_`` first, then the estimator's own, e.g.
        ``{"n_classes_": 10, "temperature_": 1.83}``), as :meth:`save` writes them."""
        self._check_fitted()
        return {name: getattr(self, name) for name in self._all_fitted()}

    def __sklearn_tags__(self) -> Any:
        """Estimator tags for scikit-learn >= 1.6 meta-estimators (``GridSearchCV``,
        ``cross_validate``), built only when scikit-learn asks: fitting needs labels; no
        other tag applies (the estimator maps scores, it is not itself a classifier)."""
        from sklearn.utils import Tags, TargetTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=True))

    def save(self, path: str | Path) -> None:
        """Write hyperparameters and fitted attributes to a JSON file."""
        write_document(path, self._document())

    @classmethod
    def load(cls, path: str | Path) -> Any:
        """Read a file written by :meth:`save`. Called on a subclass, the file must hold that
        class; called on the family's base class, the class named in the file is built."""
        doc = read_document(path)
        cls._resolve(doc.get("class"), path)
        return cls._root()._from_document(doc, path, doc["format_version"])

    # ------------------------------------------------------------------ helpers
    @classmethod
    def _root(cls) -> type[ScoreEstimator]:
        """The family's base class: the class of ``cls``'s bases directly below this one."""
        mro = cls.__mro__
        return mro[max(0, mro.index(ScoreEstimator) - 1)]

    def _document(self) -> dict[str, Any]:
        """``{"class", "params", "fitted"}``: what :meth:`save` writes for this estimator."""
        family = self._root()
        return {
            "class": type(self).__name__,
            "params": {
                self._stored_names.get(k, k): encode(v, family)
                for k, v in self.get_params().items()
            },
            "fitted": {k: encode(v, family) for k, v in self.fitted_attributes().items()},
        }

    @classmethod
    def _from_document(cls, doc: dict[str, Any], path: str | Path, version: int) -> Any:
        """The estimator of a document (:meth:`_document`) of a file of format ``version``;
        ``cls`` is the family's base. Every field is read and checked
        (:mod:`selfcal.estimator.loading`): what is wrong is one ``ValueError`` naming the
        file and the field."""
        name = doc.get("class") if isinstance(doc, dict) else None
        target = cls._resolve(name, path)
        decoded = partial(decode, path=path, calibrator_type=cls, version=version)
        params = {
            target._param_name(key): field(path, f"params.{key}", partial(decoded, value))
            for key, value in target._stored_params(mapping(doc, "params", path), path, version)
        }
        obj = field(path, "params", lambda: target(**params))
        fitted = mapping(doc, "fitted", path)
        unknown = sorted(set(fitted) - set(obj._all_fitted()))
        if unknown:
            raise ValueError(
                f"{path}: {name} has no fitted attribute {unknown[0]!r} (it sets "
                f"{', '.join(obj._all_fitted())})"
            )
        for key, value in fitted.items():
            setattr(obj, key, field(path, f"fitted.{key}", partial(decoded, value)))
        obj._loaded(fitted, version)
        missing = [n for n in obj._all_fitted() if not hasattr(obj, n)]
        if missing:
            raise ValueError(f"{path}: {name} lacks its fitted {', '.join(missing)}")
        check_values(obj, path)
        field(path, "params", obj._validate_params)
        field(path, "fitted", obj._check_loaded)
        return obj

    @classmethod
    def _stored_params(
        cls, params: dict[str, Any], path: str | Path, version: int
    ) -> list[tuple[str, Any]]:
        """The ``(stored name, value)`` pairs of a file's ``params``, which must be exactly
        this class's hyperparameters: a missing one is refused, not defaulted -- the
        constructor's default need not be what was fitted (a conformal predictor's ``score``
        deleted became ``aps`` for ``lac``, and every set changed) -- except, in a version-1
        file, one added while version 1 was written (:data:`_version_1_lacks`)."""
        stored = [cls._stored_names.get(n, n) for n in cls._param_names()]
        unknown = sorted(set(params) - set(stored))
        if unknown:
            raise ValueError(
                f"{path}: {cls.__name__} has no hyperparameter {unknown[0]!r} (it has "
                f"{', '.join(stored)})"
            )
        excused = cls._version_1_lacks if version == 1 else ()
        missing = [k for k in stored if k not in params and cls._param_name(k) not in excused]
        if missing:
            raise ValueError(
                f"{path}: params.{missing[0]} is missing; a file holds every hyperparameter "
                "its estimator was fitted with (a default need not be the value fitted)"
            )
        return list(params.items())

    @classmethod
    def _param_name(cls, stored: str) -> str:
        """The hyperparameter a file stores under ``stored`` (:data:`_stored_names`)."""
        return next((n for n, s in cls._stored_names.items() if s == stored), stored)

    def _validate_params(self) -> None:
        """Hook: the hyperparameter checks ``fit`` makes (run on a loaded estimator too)."""
        self._check_params()

    def _check_params(self) -> None:
        """``kind``, then every hyperparameter through its check (:data:`_parameters`)."""
        self._check_kind()
        checks = self._checks()
        for name in self._param_names()[:-1]:
            check = checks.get(name)
            if check is not None:
                check(name, getattr(self, name))

    @classmethod
    def _checks(cls) -> dict[str, Check]:
        """:data:`_parameters` merged along the class's bases (a subclass's entry wins)."""
        return {
            name: check
            for klass in reversed(cls.__mro__)
            for name, check in vars(klass).get("_parameters", {}).items()
        }

    def _check_loaded(self) -> None:
        """Hook: raise ``ValueError`` when a loaded estimator's fitted values, each valid
        alone (:data:`_fitted_schema`), do not make a working estimator together."""

    def _loaded(self, fitted: dict[str, Any], version: int) -> None:
        """Hook: complete an estimator read from a file of format ``version`` 1 (which some
        fitted values postdate)."""

    @classmethod
    def _resolve(cls, name: Any, path: str | Path) -> type[Any]:
        root = cls._root()
        noun = root._noun
        if not isinstance(name, str):
            raise ValueError(f"{path}: class must name a {noun} class, got {name!r:.60}")
        if cls is not root:
            if name != cls.__name__:
                raise ValueError(
                    f"{path} holds a {name!r} {noun}, not a {cls.__name__}; load it with "
                    f"{name}.load or {root.__name__}.load"
                )
            return cls
        family = (root, *subclasses(root))
        known = {c.__name__: c for c in family if not c.__dict__.get("_abstract", False)}
        if name not in known:
            raise ValueError(f"{path} holds an unknown {noun} class {name!r}")
        return known[name]

    @classmethod
    def _param_names(cls) -> tuple[str, ...]:
        return hyperparameter_names(cls)

    def _check_kind(self) -> None:
        if self.kind is not None:
            check_choice("kind", self.kind, SCORE_KINDS)

    def _all_fitted(self) -> tuple[str, ...]:
        return ("n_classes_", *self._fitted_attributes)

    def _check_fitted(self) -> None:
        missing = [n for n in self._all_fitted() if not hasattr(self, n)]
        if missing:
            raise not_fitted(
                f"this {type(self).__name__} is not fitted yet; call fit(logits=... or "
                f"probs=..., labels=...) first (missing {', '.join(missing)})"
            )

    def _resolve_inputs(
        self,
        X: Predictions | ArrayLike | None,
        y: ArrayLike | None,
        logits: ArrayLike | None,
        probs: ArrayLike | None,
        labels: ArrayLike | None,
        need_labels: bool,
    ) -> Predictions:
        """``fit``'s or ``predict``'s arguments as validated predictions (positional scores
        read as this estimator's ``kind``)."""
        return resolve_predictions(
            type(self).__name__, self.kind, X, y, logits, probs, labels, need_labels
        )

    def _fitted_predictions(
        self,
        X: Predictions | ArrayLike | None,
        logits: ArrayLike | None,
        probs: ArrayLike | None,
    ) -> Predictions:
        """The scores to predict on, validated, of the fitted number of classes."""
        self._check_fitted()
        pred = self._resolve_inputs(X, None, logits, probs, None, False)
        n_classes = getattr(self, "n_classes_")  # noqa: B009 - set by fit
        if pred.n_classes != n_classes:
            raise ValueError(
                f"{type(self).__name__} was fitted on {n_classes} classes but got scores "
                f"with {pred.n_classes} columns"
            )
        return pred

    def __repr__(self) -> str:
        """The constructor call that builds this estimator: only the parameters that differ
        from their defaults, as scikit-learn prints estimators (``TemperatureScaling()``,
        ``TemperatureScaling(method='grid', criterion='nll')``)."""
        defaults = {
            name: p.default for name, p in inspect.signature(type(self).__init__).parameters.items()
        }
        changed = {
            k: v
            for k, v in self.get_params().items()
            if k not in defaults or not _same(v, defaults[k])
        }
        args = ", ".join(f"{k}={v!r}" for k, v in changed.items())
        return f"{type(self).__name__}({args})"


_NAMES: dict[type, tuple[str, ...]] = {}
""":func:`hyperparameter_names` by class (a signature is read once)."""


def hyperparameter_names(cls: type) -> tuple[str, ...]:
    """The hyperparameters of an estimator class, ``kind`` last: the arguments of its
    constructor's signature that can be passed by position (keyword-only ones are deprecated
    aliases), in their order -- the one place they are declared."""
    names = _NAMES.get(cls)
    if names is None:
        parameters = inspect.signature(cls.__init__).parameters.values()  # type: ignore[misc]
        own = [
            p.name
            for p in parameters
            if p.kind is p.POSITIONAL_OR_KEYWORD and p.name not in ("self", "kind")
        ]
        names = _NAMES[cls] = (*own, "kind")
    return names


def checked_value(check: Callable[[Any], object]) -> Check:
    """A check of the value alone (its message names the hyperparameter itself, e.g.
    :func:`~selfcal.metrics.binning.check_n_bins`) as a :data:`Check`."""

    def named(name: str, value: Any) -> object:
        return check(value)

    return named


def _same(value: Any, default: Any) -> bool:
    """Whether a parameter equals its default (a value ``==`` cannot compare counts as
    changed)."""
    try:
        return bool(value is default or value == default)
    except (TypeError, ValueError):  # e.g. arrays
        return False
