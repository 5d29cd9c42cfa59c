"""Temperature scaling (Guo et al., 2017): ``p = softmax(z / T)`` with one scalar ``T > 0``.

Two fitting rules:

* ``method="nll"`` -- the exact minimiser of the validation NLL, by a safeguarded Newton
  iteration on the inverse temperature ``beta = 1/T`` (see
  :func:`~selfcal.posthoc._inverse_temperature.fit_inverse_temperature`).
* ``method="grid"`` -- the grid search of the [FLC]/[MC]/[GRA] reference code:
  ``T = 0.1, 0.2, ..., 10.0`` built by repeated ``+= 0.1``, keeping the first ``T`` with the
  lowest validation 15-bin ECE (``criterion="ece"``) or NLL (``criterion="nll"``).
"""

from __future__ import annotations

import functools
from typing import ClassVar

import torch

from selfcal._validation import check_choice
from selfcal.estimator import Check
from selfcal.estimator.loading import POSITIVE, Fitted
from selfcal.metrics import ece, nll
from selfcal.posthoc._base import Calibrator
from selfcal.posthoc._degenerate import Coverage
from selfcal.posthoc._modules import TemperatureModule
from selfcal.posthoc._scores import rows_as_logits, scores_as_logits
from selfcal.posthoc._temperature_fits import (
    IDENTITY,
    TemperatureFit,
    report_fit,
    solve_temperature,
)
from selfcal.posthoc.registry import register_calibrator
from selfcal.predictions import Predictions


def grid_temperatures() -> list[float]:
    """``0.1, 0.2, ..., 10.0`` built as the reference code does (``T += 0.1`` 100 times, so
    the values carry the float drift of repeated addition)."""
    out, t = [], 0.1
    for _ in range(100):
        out.append(t)
        t += 0.1
    return out


def grid_fit(
    z: torch.Tensor, labels: torch.Tensor, criterion: str, all_correct: bool
) -> TemperatureFit:
    """The reference code's grid search (:func:`grid_search_temperature`), value for value --
    it exists to reproduce the papers' numbers -- with a ``problem`` when the best ``T`` is an
    end of the grid while the criterion still falls there (its minimum may lie beyond the
    grid). When every prediction is correct the grid's choice is kept too (usually its
    smallest ``T``); the caller warns that the data do not identify it."""
    grid = grid_temperatures()
    t = grid_search_temperature(z.double(), labels, criterion)
    if all_correct or t not in (grid[0], grid[-1]):
        return TemperatureFit(t)
    inner = grid[1] if t == grid[0] else grid[-2]
    if _grid_criterion(z, labels, criterion, t) >= _grid_criterion(z, labels, criterion, inner):
        return TemperatureFit(t)  # flat at the edge (e.g. constant scores): nothing beyond
    end = "smallest" if t == grid[0] else "largest"
    return TemperatureFit(
        t,
        f"the validation {criterion.upper()} is lowest at the grid's {end} temperature, "
        f"T = {t:.3g}, so its minimum may lie beyond the grid; returned T = {t:.3g} "
        "(method='nll' searches [e^-10, e^10])",
    )


def _grid_criterion(z: torch.Tensor, labels: torch.Tensor, criterion: str, t: float) -> float:
    """The grid search's criterion, 15-bin ECE or NLL, of ``softmax(z / T)``."""
    metric = ece.core if criterion == "ece" else nll.core
    return float(metric(Predictions.from_logits(z.double() / t, labels)))


def grid_search_temperature(z: torch.Tensor, labels: torch.Tensor, criterion: str) -> float:
    """The reference code's loop: the first ``T`` (strict ``<``) with the lowest criterion
    (15-bin ECE or NLL of ``softmax(z / T)``); starts from ``T = 1`` with best ``1e7``."""
    best, best_t = 10.0**7, 1.0
    for t in grid_temperatures():
        value = _grid_criterion(z, labels, criterion, t)
        if value < best:
            best, best_t = value, t
    return best_t


@register_calibrator("ts")
class TemperatureScaling(Calibrator):
    """Temperature scaling: ``p_k = exp(z_k / T) / sum_j exp(z_j / T)``, one ``T > 0``.

    **Never changes the predicted class**: dividing by ``T > 0`` preserves the order of the
    logits.

    Parameters
    ----------
    method : ``"nll"`` (default) minimises the validation NLL exactly (Newton on
        ``beta = 1/T``, ``T`` searched in ``[e^-10, e^10]``); ``"grid"`` reproduces the
        reference code's grid search over ``T = 0.1, ..., 10.0``.
    criterion : for ``method="grid"`` only: ``"ece"`` (default, 15 equal-width bins) or
        ``"nll"``.
    mix : ``eps`` in ``[0, 1)`` (default 0) or ``"auto"`` (``1 / (n + 1)`` for ``n`` validation
        rows): the output is ``(1 - eps) softmax(z / T) + eps / C``, Berta et al.'s "TS-mix"
        (registered as ``ts-mix``), whose probabilities are never below ``eps / C``. ``T`` is
        fitted on the un-mixed map, as theirs.
    kind : ``"logits"``, ``"probs"`` or ``None`` (default): what a positional score array holds
        (``fit(X, y)``, ``predict_proba(X)``) and what :meth:`to_module` takes.

    Given ``probs=``, the scores are ``z = log(p)`` (so ``T = 1`` returns ``p``).

    Attributes
    ----------
    temperature_ : float
    mix_ : float, the mixing weight ``eps``

    Examples
    --------
    Three of four predictions made with the same margin of 4 are right, so the NLL-optimal
    temperature makes that margin a 3 : 1 bet, ``sigmoid(4 / T) = 3/4``, i.e.
    ``T = 4 / ln 3``:

    >>> import numpy as np
    >>> from selfcal.posthoc import TemperatureScaling
    >>> logits = np.array([[4.0, 0.0], [4.0, 0.0], [4.0, 0.0], [0.0, 4.0]])
    >>> labels = np.array([0, 0, 1, 1])
    >>> ts = TemperatureScaling().fit(logits=logits, labels=labels)
    >>> print(round(ts.temperature_, 4))
    3.641
    >>> print(ts.predict_proba(logits=logits)[0].round(4))
    [0.75 0.25]
    """

    _parameters: ClassVar[dict[str, Check]] = {
        "method": functools.partial(check_choice, choices=("nll", "grid")),
        "criterion": functools.partial(check_choice, choices=("ece", "nll")),
    }
    _likelihood_fit = True
    _fitted_attributes = ("temperature_",)
    _fitted_schema: ClassVar[dict[str, Fitted]] = {"temperature_": Fitted(range=POSITIVE)}

    def __init__(
        self,
        method: str = "nll",
        criterion: str = "ece",
        mix: float | str = 0.0,
        kind: str | None = None,
    ) -> None:
        self.method = method
        self.criterion = criterion
        self.mix = mix
        self.kind = kind

    def _fit(self, pred: Predictions) -> None:
        y = pred.require_labels()
        # logits in their own dtype: the solver never copies the matrix to float64
        z = pred.scores if pred.kind == "logits" else pred.log_probs
        all_correct = bool(pred.correct.all())
        if self.method == "grid":
            fit = grid_fit(z, y, self.criterion, all_correct)
        else:
            fit = solve_temperature(z, y, all_correct, self._shared_fits)
        self.temperature_ = fit.temperature
        report_fit(self, fit)

    def _fit_warns_tied_errors(self) -> bool:
        return self.method != "grid"  # the NLL's minimiser at the interval's end: reported

    def _tied_errors_outcome(self, coverage: Coverage) -> str:
        return (
            f"returned the grid's choice T = {self.temperature_:.3g}, as the reference code "
            "does (method='nll' returns T = 1, the scores unchanged)"
        )

    def _all_correct_outcome(self, coverage: Coverage) -> str:
        if self.method == "grid":
            return (
                f"returned the grid's choice T = {self.temperature_:.3g}, as the reference code "
                "does (method='nll' returns T = 1, the scores unchanged)"
            )
        return f"the NLL falls without limit as T -> 0 (every confidence 1); {IDENTITY}"

    def _predict(self, pred: Predictions) -> torch.Tensor:
        """``softmax(z / T)``, chunk by chunk of rows (:meth:`Predictions.row_chunks`) into the
        one ``(N, C)`` float64 output (the whole array's softmax bit for bit): the float64
        logits and their scaled copy take a chunk each, not two more ``(N, C)`` float64 arrays
        (2 x 1,526 MiB at 200,000 x 1,000)."""
        if pred.scores.requires_grad:
            return torch.softmax(scores_as_logits(pred) / self.temperature_, dim=1)
        out = torch.empty(pred.scores.shape, dtype=torch.float64, device=pred.device)
        for rows in pred.row_chunks():
            out[rows] = torch.softmax(rows_as_logits(pred, rows) / self.temperature_, dim=1)
        return out

    def _module(self, from_probs: bool) -> torch.nn.Module:
        """``z / T`` (``log(p) / T`` from probabilities)."""
        return TemperatureModule(self.temperature_, from_probs)


register_calibrator("ts-grid")(functools.partial(TemperatureScaling, method="grid"))
register_calibrator("ts-mix")(functools.partial(TemperatureScaling, mix="auto"))
