"""The inputs of a calibrator's ``fit`` and ``predict_proba``: scores by name (``logits=``,
``probs=``), a :class:`~selfcal.Predictions`, or scikit-learn style positional scores read
as the calibrator's ``kind`` -- never guessed -- resolved into validated predictions."""

from __future__ import annotations

from typing import Any

import torch

from selfcal.predictions import ArrayLike, Predictions, as_predictions, looks_like_probabilities


def resolve_predictions(
    calibrator: str,
    kind: str | None,
    X: Predictions | ArrayLike | None,
    y: ArrayLike | None,
    logits: ArrayLike | None,
    probs: ArrayLike | None,
    labels: ArrayLike | None,
    need_labels: bool,
) -> Predictions:
    """Resolve ``(X[, y])`` or ``logits= | probs=, labels=`` into validated predictions
    (tensors that require grad detached) for the calibrator named ``calibrator``, whose
    ``kind`` reads positional scores."""
    if y is not None and labels is not None:
        raise ValueError("pass the labels once: positionally (fit(X, y)) or as labels=")
    labels = _detached(y if y is not None else labels)
    logits, probs = _detached(logits), _detached(probs)
    if X is None or isinstance(X, Predictions):
        return as_predictions(X, labels=labels, logits=logits, probs=probs, need_labels=need_labels)
    if logits is not None or probs is not None:
        raise ValueError(
            "pass the scores once: positionally (read as this calibrator's kind) or as "
            "logits=... / probs=..."
        )
    if kind is None:
        raise ValueError(kind_needed(calibrator, X))
    scores = {kind: _detached(X)}
    return as_predictions(labels=labels, need_labels=need_labels, **scores)


def kind_needed(name: str, scores: ArrayLike) -> str:
    """The one-line error for positional scores without a ``kind`` given to the calibrator
    ``name``, with the evidence when they look like probabilities."""
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


def _detached(x: Any) -> Any:
    """A tensor that requires grad, detached (anything else as it is)."""
    if isinstance(x, torch.Tensor) and x.requires_grad:
        return x.detach()
    return x
