"""Non-conformity scores of split-conformal classification and the finite-sample quantile
(methods §10).

A score ``s(x, k)`` is large when label ``k`` is unusual for ``x``; a prediction set holds the
labels whose score is at most a threshold fitted on held-out data. Write ``p`` for a row's
probabilities, ``p_max`` for the largest, ``rank_k`` for the 1-based rank of label ``k`` when
the probabilities are sorted in decreasing order (ties broken stably: among equal
probabilities the smaller class index ranks first) and ``u ~ U(0, 1)`` for an independent
uniform draw (``u = 1`` for the deterministic scores):

* ``"lac"`` (alias ``"thr"``; Sadinle et al. 2019): ``1 - p_k``.
* ``"aps"`` (Romano et al. 2020): ``sum_{j: rank_j < rank_k} p_j + u p_k``, the mass ranked
  above ``k`` plus a uniform share of ``p_k`` (all of it when deterministic).
* ``"raps"`` (Angelopoulos et al. 2021): APS ``+ penalty * max(0, rank_k - k_reg)``, the
  1-based rank as in TorchCP's ``RAPS`` and MAPIE (so ``k_reg = 1`` leaves the top label
  unpenalised and charges ``penalty`` per label below it).
* ``"saps"`` (Huang et al. 2024): ``u p_max`` for the top-ranked label, else
  ``p_max + weight * (rank_k - 2 + u)``: only the largest probability is used, the rest of
  the ranking costs ``weight`` per place.

The scores are float64. TorchCP writes the same randomised scores with ``1 - u`` in place of
``u`` (``cumsum - U p``), the same distribution; see the methods page for every difference.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch

from selfcal._validation import (
    check_choice,
    check_int,
    check_nonnegative,
    check_positive,
    check_real,
)
from selfcal.exceptions import DegenerateCalibration
from selfcal.predictions import ArrayLike, as_predictions

__all__ = [
    "SCORES",
    "class_quantiles",
    "conformal_quantile",
    "conformity_scores",
    "quantile_rank",
]

SCORES = ("lac", "aps", "raps", "saps")
"""The non-conformity scores (``"thr"`` is accepted as an alias of ``"lac"``)."""
ALIASES = {"thr": "lac"}


def canonical_score(score: str, name: str = "score") -> str:
    """``score`` checked against :data:`SCORES` (aliases resolved); ``name`` is the
    argument's name in the error."""
    check_choice(name, score, (*SCORES, *ALIASES))
    return ALIASES.get(score, score)


def check_score_options(penalty: Any, k_reg: Any, weight: Any) -> tuple[float, int, float]:
    """The RAPS / SAPS hyperparameters, validated."""
    return (
        check_nonnegative("penalty", penalty),
        check_int("k_reg", k_reg, minimum=0),
        check_positive("weight", weight),
    )


def check_alpha(alpha: Any) -> float:
    """A miscoverage level in ``(0, 1)``."""
    return check_real("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)


def uniforms(
    shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device
) -> torch.Tensor:
    """``U(0, 1)`` float64 draws of ``shape`` on ``device`` (from ``generator`` when given)."""
    return torch.rand(shape, generator=generator, device=device, dtype=torch.float64)


def scores_given_u(
    probs: torch.Tensor,
    u: torch.Tensor | float,
    score: str,
    penalty: float = 0.01,
    k_reg: int = 1,
    weight: float = 0.2,
) -> torch.Tensor:
    """The ``(N, C)`` scores of every label of float64 probabilities ``probs`` with the
    uniform draws ``u`` (a number, ``(N, 1)`` or ``(N, C)``; 1 for the deterministic scores):
    the formulas of the module docstring, with ``score`` canonical. No validation."""
    if score == "lac":
        return 1.0 - probs
    ordered, order = torch.sort(probs, dim=1, descending=True, stable=True)
    positions = torch.arange(probs.shape[1], device=probs.device).expand_as(order)
    rank0 = torch.empty_like(order).scatter_(1, order, positions)  # 0-based rank of each label
    if score == "saps":
        top = ordered[:, :1]
        return torch.where(rank0 == 0, u * top, top + weight * (rank0 - 1 + u))
    above = (torch.cumsum(ordered, dim=1) - ordered).gather(1, rank0)
    out = above.clamp_min(0.0) + u * probs
    if score == "raps":
        out = out + penalty * (rank0 + 1 - k_reg).clamp_min(0)
    return out


def conformity_scores(
    probs: ArrayLike,
    labels: ArrayLike | None = None,
    *,
    score: str = "aps",
    randomized: bool = True,
    generator: torch.Generator | None = None,
    penalty: float = 0.01,
    k_reg: int = 1,
    weight: float = 0.2,
) -> torch.Tensor:
    """Non-conformity scores (float64, on the input's device) of probabilities ``probs``
    (``(N, C)``, rows summing to 1; validated as every selfcal input): with ``labels``
    ``(N,)`` the score of each row's label, without them the ``(N, C)`` scores of every label.

    ``score`` is one of :data:`SCORES` (formulas in the module docstring; ``"thr"`` =
    ``"lac"``); ``randomized`` draws ``u ~ U(0, 1)`` from ``generator`` (the global torch
    generator when ``None``; a generator must live on the input's device) -- one per row with
    ``labels``, one per row and label without -- and is ignored by LAC, which has no ``u``.
    ``penalty`` and ``k_reg`` are RAPS's, ``weight`` SAPS's.

    >>> import torch
    >>> from selfcal.conformal import conformity_scores
    >>> p = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64)
    >>> conformity_scores(p, score="aps", randomized=False)
    tensor([[0.5000, 0.8000, 1.0000]], dtype=torch.float64)
    """
    score = canonical_score(score)
    penalty, k_reg, weight = check_score_options(penalty, k_reg, weight)
    pred = as_predictions(probs=probs, labels=labels, need_labels=labels is not None)
    p = pred.probs
    u: torch.Tensor | float = 1.0
    if randomized and score != "lac":
        shape = (p.shape[0], 1) if pred.labels is not None else tuple(p.shape)
        u = uniforms(shape, generator, p.device)
    all_labels = scores_given_u(p, u, score, penalty, k_reg, weight)
    if pred.labels is None:
        return all_labels
    return all_labels.gather(1, pred.labels.unsqueeze(1)).squeeze(1)


def quantile_rank(n: int | torch.Tensor, alpha: float) -> Any:
    """``ceil((n + 1)(1 - alpha))``, the rank of the conformal quantile among ``n`` scores
    (an int, or an int64 tensor for a tensor ``n``). The product is rounded to 9 decimals
    first, so that ``(n + 1)(1 - alpha)`` that is an integer in exact arithmetic is not
    pushed to the next one by float rounding."""
    if isinstance(n, torch.Tensor):
        level = torch.round((n.double() + 1) * (1 - alpha), decimals=9)
        return torch.ceil(level).long()
    return math.ceil(round((n + 1) * (1 - alpha), 9))


def conformal_quantile(scores: ArrayLike, alpha: float) -> float:
    """The split-conformal threshold of ``n`` calibration scores at miscoverage ``alpha``: the
    ``k``-th smallest score, ``k = ceil((n + 1)(1 - alpha))``, so that a new exchangeable
    score is at most it with probability at least ``1 - alpha`` (and at most
    ``1 - alpha + 1 / (n + 1)`` when the scores have no ties).

    When ``k > n`` (fewer than ``ceil(1 / alpha) - 1`` scores) no finite threshold has the
    guarantee: the result is ``+inf`` (every set holds every label) and a
    :class:`~selfcal.exceptions.DegenerateCalibration` warning says so.

    >>> from selfcal.conformal import conformal_quantile
    >>> conformal_quantile([0.1, 0.4, 0.2, 0.3], alpha=0.4)
    0.3
    """
    alpha = check_alpha(alpha)
    if isinstance(scores, torch.Tensor):
        s = scores.detach().reshape(-1)
    else:
        s = torch.as_tensor(np.asarray(scores, dtype=np.float64)).reshape(-1)
    if s.numel() == 0:
        raise ValueError("scores is empty: need at least one calibration score")
    if not s.is_floating_point() or not bool(torch.isfinite(s).all()):
        raise ValueError("scores must be finite real numbers")
    n = s.numel()
    k = quantile_rank(n, alpha)
    if k > n:
        warnings.warn(
            f"conformal_quantile: {n} calibration scores are too few for alpha={alpha:g} "
            f"(the quantile is the {k}-th smallest); returned +inf, so every set holds every "
            f"label. Use at least {math.ceil(1 / alpha) - 1} calibration rows.",
            DegenerateCalibration,
            stacklevel=2,
        )
        return math.inf
    return float(torch.kthvalue(s.double(), k).values)


def class_quantiles(
    scores: torch.Tensor, labels: torch.Tensor, n_classes: int, alpha: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mondrian (class-conditional) thresholds: for each class ``c`` the conformal quantile
    (:func:`conformal_quantile`) of the scores of the rows labelled ``c``, ``+inf`` for a class
    with too few rows (``k > n_c``); returns ``((C,) float64 thresholds, (C,) int64 counts)``
    on the scores' device, computed in one sort without reading values on the host."""
    order = torch.argsort(scores.double(), stable=True)
    by_class = order[torch.argsort(labels[order], stable=True)]  # grouped by class, sorted
    grouped = scores.double()[by_class]
    counts = torch.bincount(labels, minlength=n_classes)
    starts = torch.cumsum(counts, 0) - counts
    k = quantile_rank(counts, alpha)
    found = k <= counts
    index = (starts + k - 1).clamp(0, max(grouped.numel() - 1, 0))
    inf = torch.full((n_classes,), math.inf, dtype=torch.float64, device=scores.device)
    return torch.where(found, grouped[index], inf), counts
