"""Mondrian split conformal by class or by group of rows (:class:`~selfcal.conformal.split.
SplitConformal`'s ``mondrian=``): which rows share a threshold, each row's threshold, and which
classes or groups are too small for one."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from selfcal._inputs import Groups
from selfcal._warnings import warn_unseen_groups
from selfcal.conformal.scores import quantile_rank
from selfcal.predictions import ArrayLike, Predictions

MONDRIAN = (False, True, "class", "group")
"""The values of ``SplitConformal(mondrian=...)``: no (one marginal threshold), ``True`` or
``"class"`` (one threshold per class), ``"group"`` (one threshold per group of rows)."""

OVERLAPPING = (
    "Mondrian needs one group per row; for overlapping groups (membership columns) use "
    "ConditionalConformal"
)


def check_mondrian(name: str, value: Any) -> None:
    if isinstance(value, (bool, np.bool_)) or value in ("class", "group"):
        return
    raise ValueError(f"{name} must be False, True, 'class' or 'group', got {value!r}")


def mondrian_mode(mondrian: Any) -> str:
    """``"marginal"``, ``"class"`` or ``"group"``: what ``mondrian`` conditions on."""
    if isinstance(mondrian, str):
        return mondrian
    return "class" if mondrian else "marginal"


def rows_groups(
    pred: Predictions, groups: ArrayLike | None, mode: str, mondrian: Any
) -> Groups | None:
    """The rows' groups (``groups=``, else the predictions'), checked by the input contract,
    with ``mondrian="group"``; ``None`` otherwise (``groups=`` is then refused, never
    ignored). Overlapping groups are refused (:data:`OVERLAPPING`)."""
    if mode != "group":
        if groups is not None:
            raise ValueError(
                f"groups= is used only by mondrian='group' (this predictor has "
                f"mondrian={mondrian!r})"
            )
        return None
    if groups is not None:
        pred = pred.with_groups(groups)
    if pred.groups is None:
        raise ValueError("mondrian='group' needs each row's group: pass groups=")
    if pred.groups.overlapping:
        raise ValueError(OVERLAPPING)
    return pred.groups


def row_thresholds(
    groups: Groups, names: list[str], thresholds: torch.Tensor, owner: object
) -> torch.Tensor:
    """``(N,)`` float64: each row's group's threshold (``thresholds[j]`` for ``names[j]``);
    ``+inf`` (every label) for a group unseen at fit time, with a warning naming it."""
    warn_unseen_groups(
        type(owner).__name__,
        groups.unseen(names),
        "their rows' sets hold every label (no threshold was calibrated for them)",
    )
    device = thresholds.device
    codes = groups.codes_in(names).to(device)
    table = torch.cat([thresholds, torch.full((1,), math.inf, device=device).double()])
    return table[torch.where(codes < 0, table.numel() - 1, codes)]


def too_small(counts: np.ndarray, names: list[str] | None, alpha: float) -> str | None:
    """The classes (``names`` ``None``) or groups with too few calibration rows for a
    threshold at ``alpha`` (``quantile_rank(n, alpha) > n``), said in one phrase; ``None``
    where there are none."""
    small = [c for c, n in enumerate(counts) if quantile_rank(int(n), alpha) > n]
    if not small:
        return None
    noun = "class(es)" if names is None else "group(s)"
    label = [str(c) for c in range(len(counts))] if names is None else [repr(n) for n in names]
    shown = ", ".join(f"{label[c]} ({int(counts[c])} rows)" for c in small[:10])
    more = f" and {len(small) - 10} more" if len(small) > 10 else ""
    where = "they are in every set" if names is None else "their sets hold every label"
    return (
        f"{noun} {shown}{more} have too few calibration rows for a Mondrian threshold at "
        f"alpha={alpha:g}; their threshold_ is +inf, so {where}"
    )
