"""What every torchmetrics class of :mod:`selfcal.integrations.torchmetrics` shares: the
torchmetrics base class (an ``ImportError`` naming the ``lightning`` extra without it), the
input contract of selfcal (:mod:`selfcal.predictions`), float64 states and no gradients."""

from __future__ import annotations

from typing import Any, get_args

import torch

from selfcal.integrations import _missing_dependency

try:
    from torchmetrics import Metric
except ImportError as error:
    raise ImportError(
        _missing_dependency("selfcal.integrations.torchmetrics", "torchmetrics")
    ) from error

from selfcal._validation import check_choice
from selfcal.predictions import ArrayLike, Predictions, ScoreKind, as_predictions

_F64 = torch.float64
_KINDS: tuple[ScoreKind, ...] = get_args(ScoreKind)


class _CalibrationMetric(Metric):
    """What every class of :mod:`selfcal.integrations.torchmetrics` shares: the input
    contract, float64 states, no gradients.

    ``kind`` (``"logits"``, ``"probs"`` or ``None``) is what a positional score tensor holds.
    Subclasses implement ``_accumulate(pred)`` and ``compute()``."""

    is_differentiable = False
    higher_is_better = False
    full_state_update = False
    plot_lower_bound = 0.0

    def __init__(self, *, kind: ScoreKind | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kind = None if kind is None else check_choice("kind", kind, _KINDS)

    def update(
        self,
        preds: Predictions | ArrayLike | None = None,
        target: ArrayLike | None = None,
        *,
        logits: ArrayLike | None = None,
        probs: ArrayLike | None = None,
        labels: ArrayLike | None = None,
    ) -> None:
        """Add one batch: ``update(preds, target)`` (torchmetrics' names; ``preds`` read as
        this metric's ``kind``), ``update(logits=z, labels=y)``, ``update(probs=p, labels=y)``
        or ``update(pred)`` with a validated :class:`~selfcal.predictions.Predictions`
        (checked as every selfcal input is; the scores are never guessed)."""
        pred = self._predictions(preds, target, logits, probs, labels)
        with torch.no_grad():
            self._accumulate(pred)

    def _predictions(
        self,
        preds: Predictions | ArrayLike | None,
        target: ArrayLike | None,
        logits: ArrayLike | None,
        probs: ArrayLike | None,
        labels: ArrayLike | None,
    ) -> Predictions:
        """Resolve :meth:`update`'s arguments into validated predictions."""
        if target is not None and labels is not None:
            raise ValueError("pass the labels once: positionally / as target=, or as labels=")
        labels = target if labels is None else labels
        if preds is None or isinstance(preds, Predictions):
            return as_predictions(preds, labels=labels, logits=logits, probs=probs)
        if logits is not None or probs is not None:
            raise ValueError(
                "pass the scores once: positionally / as preds= (read as the metric's kind), "
                "or as logits=... / probs=..."
            )
        if self.kind is None:
            raise ValueError(
                f"{type(self).__name__} got scores without a kind: construct it with "
                "kind='logits' or kind='probs' (selfcal never guesses), or pass logits=... / "
                "probs=... by name"
            )
        return as_predictions(labels=labels, **{self.kind: preds})

    def _accumulate(self, pred: Predictions) -> None:
        raise NotImplementedError

    def _add(self, name: str, delta: torch.Tensor) -> None:
        """``state += delta`` (out of place: states may be inference tensors under Lightning)."""
        state = getattr(self, name)
        setattr(self, name, state + delta.detach().to(device=state.device, dtype=_F64))


def _cat(state: list[torch.Tensor] | torch.Tensor) -> torch.Tensor:
    """A list state, concatenated (after a synchronisation it is already one tensor)."""
    if isinstance(state, torch.Tensor):
        return state.to(_F64)
    return torch.cat(state).to(_F64) if state else torch.empty(0, dtype=_F64)
