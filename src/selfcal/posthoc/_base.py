"""Estimator-style base class shared by every post-hoc calibrator.

Contract:

* ``__init__`` only stores hyperparameters, verbatim (so ``sklearn.base.clone`` can rebuild
  an estimator from :meth:`Calibrator.get_params`); they are validated in
  :meth:`Calibrator.fit`. Every calibrator takes ``kind="logits" | "probs"``: what a
  positional score array holds.
* ``fit(*, logits= | probs=, labels=)`` validates the input through :mod:`selfcal.predictions`,
  fits, sets attributes whose names end in ``_`` and returns ``self``. A validated
  :class:`~selfcal.Predictions` may be passed positionally instead, and so may a score array
  with its labels, scikit-learn style: ``fit(X, y)`` reads ``X`` as the ``kind`` the
  calibrator was built with (``TemperatureScaling(kind="probs").fit(p, y)``).
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
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np
import torch

from selfcal._validation import check_choice
from selfcal.exceptions import NotFittedError
from selfcal.predictions import ArrayLike, Predictions, as_predictions

FORMAT = "selfcal-calibrator"
FORMAT_VERSION = 1

SCORE_KINDS = ("logits", "probs")
"""What a positional score array holds (the ``kind`` hyperparameter of every calibrator)."""


def _version() -> str:
    from selfcal import __version__

    return __version__


def _encode(value: Any) -> Any:
    """Fitted value -> JSON-able (arrays as dtype/shape/flat data)."""
    if isinstance(value, np.ndarray):
        data = (
            [float(x) for x in value.reshape(-1)]
            if value.dtype.kind == "f"
            else [int(x) for x in value.reshape(-1)]
        )
        return {"dtype": str(value.dtype), "shape": list(value.shape), "data": data}
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if isinstance(value, float):
        return value
    raise TypeError(f"cannot serialise fitted value of type {type(value).__name__}")


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        return np.asarray(value["data"], dtype=value["dtype"]).reshape(value["shape"])
    return value


class Calibrator:
    """Base class of post-hoc calibrators (see the module docstring for the contract).

    ``kind`` (``"logits"``, the default, or ``"probs"``) says what a score array passed
    positionally holds -- ``fit(X, y)``, ``predict_proba(X)`` -- and what the module of
    :meth:`to_module` takes. Scores passed by name (``logits=``, ``probs=``) or as a
    :class:`~selfcal.Predictions` say what they are themselves, whatever ``kind`` is."""

    _hyperparameters: ClassVar[tuple[str, ...]] = ()
    """Names of the constructor arguments other than ``kind`` (stored verbatim as attributes)."""
    _fitted_attributes: ClassVar[tuple[str, ...]] = ()
    """Names of the attributes :meth:`fit` sets (besides ``n_classes_``)."""

    def __init__(self, kind: str = "logits") -> None:
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
        """
        pred = self._predictions(X, y, logits, probs, labels, need_labels=True)
        check_choice("kind", self.kind, SCORE_KINDS)
        self._validate_hyperparameters()
        self._check_classes(pred.n_classes)
        self._fit(pred)
        self.n_classes_ = pred.n_classes
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
        return pred.output(self._predict(pred))

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
        return pred.output(self._confidence(pred))

    def _confidence(self, pred: Predictions) -> torch.Tensor:
        return self._predict(pred).amax(dim=1)

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
        kind = self.kind if kind is None else kind
        check_choice("kind", kind, SCORE_KINDS)
        module = self._module(kind == "probs")
        return module.eval()

    def save(self, path: str | Path) -> None:
        """Write hyperparameters and fitted attributes to a JSON file."""
        fitted = {name: _encode(value) for name, value in self.fitted_attributes().items()}
        doc = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "class": type(self).__name__,
            "selfcal_version": _version(),
            "params": self.get_params(),
            "fitted": fitted,
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
        name = doc.get("class")
        target = cls._resolve(name, path)
        obj = target(**doc["params"])
        for key, value in doc["fitted"].items():
            setattr(obj, key, _decode(value))
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
        """Resolve ``(X[, y])`` or ``logits= | probs=, labels=`` into validated predictions."""
        if y is not None and labels is not None:
            raise ValueError("pass the labels once: positionally (fit(X, y)) or as labels=")
        labels = y if y is not None else labels
        if X is None or isinstance(X, Predictions):
            return as_predictions(
                X, labels=labels, logits=logits, probs=probs, need_labels=need_labels
            )
        if logits is not None or probs is not None:
            raise ValueError(
                "pass the scores once: positionally (read as this calibrator's kind) or as "
                "logits=... / probs=..."
            )
        kind = check_choice("kind", self.kind, SCORE_KINDS)
        scores = {kind: X}
        return as_predictions(labels=labels, need_labels=need_labels, **scores)

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
        return ("n_classes_",) + self._fitted_attributes

    def _check_fitted(self) -> None:
        missing = [n for n in self._all_fitted() if not hasattr(self, n)]
        if missing:
            raise NotFittedError(
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
        return pred

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


def _subclasses(cls: type[Calibrator]) -> list[type[Calibrator]]:
    out: list[type[Calibrator]] = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_subclasses(sub))
    return out


# ---------------------------------------------------------------------- shared utilities
def scores_as_logits(pred: Predictions) -> torch.Tensor:
    """``(N, C)`` float64 logits: the logits as given, or ``log(p)`` for probabilities (a zero
    probability becomes ``log(tiny) ~ -708``)."""
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
