"""The temperature fits shared by the calibrators that begin with temperature scaling
(:class:`~selfcal.posthoc.TemperatureScaling` and the structured fits of
:mod:`selfcal.posthoc._structured_scaling`): the exact NLL fit with its degenerate cases
(:func:`solve_temperature`, over the solver of :mod:`selfcal.posthoc._inverse_temperature`),
one solve shared by the candidates of a fold (:class:`TemperatureFits`), and the
warnings a fit's outcome calls for (:func:`report_fit`)."""

from __future__ import annotations

import math
import warnings
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from selfcal.exceptions import CalibrationNotConverged
from selfcal.posthoc._inverse_temperature import (
    LOG_BETA_BOUNDS,
    LogitData,
    solve_inverse_temperature,
    uniform_slopes,
)

if TYPE_CHECKING:
    from selfcal.posthoc._base import Calibrator


@dataclass(frozen=True)
class TemperatureFit:
    """A fitted temperature; ``problem`` says (in one clause) why the validation data did not
    identify it and what was returned instead, ``converged`` whether the solver met its
    tolerance."""

    temperature: float
    problem: str | None = None
    converged: bool = True


IDENTITY = "returned T = 1 (the scores unchanged)"
"""What temperature scaling returns when the validation data do not identify ``T``."""


def _at_bound_problem(data: LogitData, beta: float) -> str | None:
    """Why the NLL's minimiser over ``beta`` lies at a bound of :data:`LOG_BETA_BOUNDS`, if it
    does: the NLL falls all the way to ``T = e^10`` when the true class's logit is on
    average no higher than its row's mean (the row that outweighs all others is named), and
    to ``T = e^-10`` only when almost every prediction is correct by a tiny margin."""
    lo, hi = (math.exp(b) for b in LOG_BETA_BOUNDS)
    if lo < beta < hi:
        return None
    if beta >= hi:
        return (
            "the validation NLL keeps falling as T shrinks to its bound e^-10, every "
            f"confidence towards 1; {IDENTITY}"
        )
    slopes = uniform_slopes(data)
    positive = slopes.clamp_min(0)
    worst = int(positive.argmax())
    dominant = ""
    if float(positive[worst]) > 0.5 * float(positive.sum()):
        span = float(data.z[worst].double().abs().max())
        dominant = (
            f"; row {worst} alone outweighs all others (a logit of magnitude {span:.3g}: not "
            "the scores of a trained model?)"
        )
    return (
        "the validation NLL keeps falling as T grows to its bound e^10, every probability "
        "towards 1/C: on average the true class's logit is no higher than its row's mean "
        f"(by {float(slopes.mean()):.3g}){dominant}; {IDENTITY}"
    )


class TemperatureFits:
    """Temperature fits shared by the calibrators handed it
    (:meth:`~selfcal.posthoc.Calibrator.share_temperature_fits`): :func:`solve_temperature`
    solves once per pair of score and label tensors (the same objects) and hands the same fit
    to every later call. The calibrators that begin with temperature scaling (TS, TS-mix, and
    SVS / SMS on float64 scores), fitted by :class:`~selfcal.posthoc.AutoCalibration` on one
    fold, solve the same problem, to the same bits. The tensors are only weakly referenced: a
    fit is reused while both still live (a freed tensor's id taken by another is a miss), and
    no copy is kept alive. One is made per use and dropped after it (no state outlives the
    fit that made it)."""

    def __init__(self) -> None:
        self.fits: dict[tuple[int, int], tuple[Any, Any, TemperatureFit]] = {}

    def solve(self, logits: torch.Tensor, labels: torch.Tensor) -> TemperatureFit:
        """The fit of ``(logits, labels)``: the one already made for these tensors, else
        solved and kept."""
        key = (id(logits), id(labels))
        entry = self.fits.get(key)
        if entry is not None and entry[0]() is logits and entry[1]() is labels:
            return entry[2]
        fit = _solve_temperature(logits, labels)
        self.fits[key] = (weakref.ref(logits), weakref.ref(labels), fit)
        return fit


def solve_temperature(
    logits: torch.Tensor,
    labels: torch.Tensor,
    all_correct: bool,
    shared: TemperatureFits | None = None,
) -> TemperatureFit:
    """Temperature scaling's fit, with its degenerate cases (methods §2.1): the exact NLL
    minimiser (:func:`solve_inverse_temperature`) when it lies inside
    :data:`LOG_BETA_BOUNDS`; otherwise the validation data do not identify ``T`` and it is
    1, the scores unchanged -- when every prediction is correct (the NLL falls without limit
    as ``T -> 0``; the caller warns) or when the minimiser lies at a bound (``problem``
    says why). With ``shared`` (:class:`TemperatureFits`), solved once per pair of tensors."""
    if all_correct:
        return TemperatureFit(1.0)
    if shared is None:
        return _solve_temperature(logits, labels)
    return shared.solve(logits, labels)


def _solve_temperature(logits: torch.Tensor, labels: torch.Tensor) -> TemperatureFit:
    """:func:`solve_temperature` when not every prediction is correct."""
    data = LogitData.build(logits, labels)
    beta, converged = solve_inverse_temperature(data)
    problem = _at_bound_problem(data, beta)
    return TemperatureFit(1.0 if problem else 1.0 / beta, problem, converged)


def report_fit(calibrator: Calibrator, fit: TemperatureFit) -> None:
    """Warn what a temperature fit's ``problem`` says
    (:class:`~selfcal.exceptions.DegenerateCalibration`), or that it did not converge
    (:class:`~selfcal.exceptions.CalibrationNotConverged`)."""
    if fit.problem is not None:
        calibrator.warn_degenerate(fit.problem)
    if not fit.converged:
        warnings.warn(
            f"{type(calibrator).__name__}: the temperature's Newton iteration stopped at its "
            f"cap before its tolerance (T = {fit.temperature:.6g})",
            CalibrationNotConverged,
            stacklevel=4,
        )
