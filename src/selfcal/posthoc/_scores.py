"""How the fits read their scores: the largest logits a likelihood fit accepts, the floor
under which it reads exact zero probabilities, and the scores as logits."""

from __future__ import annotations

import math

import torch

from selfcal.predictions import Predictions

LARGEST_FITTABLE = math.sqrt(torch.finfo(torch.float64).max) / math.exp(10)
"""The largest logit magnitude the likelihood fits accept (about 6e149): they scale logits by
up to ``e^10`` and square them (Hessians), which must stay finite in float64."""


def check_fittable(pred: Predictions, name: str) -> None:
    """``ValueError`` naming the first row of logits beyond :data:`LARGEST_FITTABLE` in
    magnitude (probabilities' logs are never that large)."""
    if pred.kind != "logits":
        return
    low, high = torch.aminmax(pred.scores.detach(), dim=1)  # no (N, C) copy, as abs() made
    big = torch.maximum(low.neg(), high) > LARGEST_FITTABLE
    if bool(big.any()):
        i = int(torch.nonzero(big)[0, 0])
        value = float(pred.scores[i].double().abs().max())
        raise ValueError(
            f"{name}: row {i} has a logit of magnitude {value:.3g}, beyond the "
            f"{LARGEST_FITTABLE:.1e} its float64 arithmetic can scale and square; these are "
            "not the logits of a trained model (or not logits at all): check that row"
        )


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


def rows_as_logits(pred: Predictions, rows: slice) -> torch.Tensor:
    """Those rows of :func:`scores_as_logits`, bit for bit, without the whole array."""
    scores = pred.scores[rows]
    return scores.double() if pred.kind == "logits" else pred.log_probs_of(scores)
