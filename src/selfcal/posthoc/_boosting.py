"""The LightGBM rounds of :class:`~selfcal.posthoc.multicalibration.MulticlassMulticalibration`:
group features, the held-out split stratified by group, one boosting round with its unshrink
factor, and the held-out negative log-likelihood of both of its forms.

A *state* is what the rounds correct: for the ``"all"`` form the ``(N, C)`` scores ``s``
(start: the base calibrator's log-probabilities; probabilities ``softmax(s)``), for the
``"top"`` form the ``(N,)`` top-label log-odds ``t`` (start: ``logit`` of the base's
confidence). A round (MCGrad's, Tax et al. 2026) trains ``n_trees`` trees by LightGBM on the
features ``[group columns | f(state)]`` -- ``f(s) = log_softmax(s)``, ``f(t) = t`` -- with the
state as ``init_score``, adds their raw output ``r`` and rescales by the *unshrink* factor
``a`` that minimises the training NLL of ``a (state + r)`` (a temperature on the corrected
scores, MCGrad's logistic regression without intercept on the logit): ``state <- a (state +
r)``. The next round splits on the corrected state, so a cell of group x class x confidence
that one round leaves miscalibrated can be split again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax, logsumexp

from selfcal._inputs import Groups

LOG_FLOOR = -700.0
"""Log-probabilities below this (a base probability of 0 or under ``e^-700``) are raised to it
in the ``"all"`` form's starting scores, so that LightGBM's scores stay finite."""
TOP_CLIP = 40.0
"""The ``"top"`` form's log-odds are clipped to ``[-40, 40]`` (confidences within ``4e-18`` of
0 or 1), so that features and scores stay finite."""
TIE_MARGIN = 1e-6
"""The ``"top"`` form's floor: corrected log-odds stay this far (or half the base's margin,
if smaller) above the point where the runner-up would tie the top class."""
UNSHRINK = (0.05, 20.0)
"""The interval the unshrink factor is searched in (bounded scalar minimisation)."""


def group_features(groups: Groups, names: tuple[str, ...]) -> tuple[np.ndarray, tuple[str, ...]]:
    """``(N, G)`` float64 0/1 columns of the fitted group ``names`` (one-hot of a partition,
    or the membership columns matched by name), and the names of groups with rows here that
    were not seen at fit time (their rows' columns are all 0)."""
    out = np.zeros((len(groups), len(names)))
    if groups.codes is not None:
        codes = groups.codes_in(names).cpu().numpy()
        rows = np.flatnonzero(codes >= 0)
        out[rows, codes[rows]] = 1.0
    else:
        assert groups.membership is not None
        member = groups.membership.cpu().numpy()
        position = {name: j for j, name in enumerate(names)}
        for j, name in enumerate(groups.names):
            if name in position:
                out[:, position[name]] = member[:, j]
    return out, groups.unseen(names)


def holdout_split(groups: Groups, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Training and held-out row indices: within each stratum the rows in a seeded random
    order, the first ``round(fraction n_k)`` held out. The strata are the groups of a
    partition; for membership columns, a row's first group (rows in no group form one more)."""
    if groups.codes is not None:
        key = groups.codes.cpu().numpy()
    else:
        assert groups.membership is not None
        member = groups.membership.cpu().numpy()
        key = np.where(member.any(1), member.argmax(1), member.shape[1])
    rng = np.random.default_rng(seed)
    held = [np.empty(0, dtype=np.int64)]
    for k in np.unique(key):
        rows = rng.permutation(np.flatnonzero(key == k))
        held.append(rows[: round(fraction * len(rows))])
    out = np.sort(np.concatenate(held))
    return np.setdiff1d(np.arange(len(key)), out), out


@dataclass
class Rows:
    """What the rounds read of a set of rows: the group columns, the starting state and,
    for fitting, the targets (the class, or for ``"top"`` whether the top class is right).
    ``"top"`` rows also carry ``floor`` (the log-odds below which the runner-up would
    overtake the top class), ``rest`` (the base's ``-log p_y + log(1 - c)``: a wrong row's
    NLL is ``rest + softplus(t)``) and ``pinned`` (rows whose base confidence is exactly 1:
    left as they are)."""

    features: np.ndarray
    state: np.ndarray
    targets: np.ndarray | None = None
    floor: np.ndarray | None = None
    rest: np.ndarray | None = None
    pinned: np.ndarray | None = None

    def take(self, rows: np.ndarray) -> Rows:
        def part(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[rows]

        return Rows(
            self.features[rows],
            self.state[rows],
            part(self.targets),
            part(self.floor),
            part(self.rest),
            part(self.pinned),
        )


def _inputs(features: np.ndarray, state: np.ndarray) -> np.ndarray:
    """The matrix a booster reads: the group columns, then ``f(state)``."""
    scores = log_softmax(state, axis=1) if state.ndim == 2 else state[:, None]
    return np.hstack([features, scores])


def lightgbm_params(n_classes: int, settings: dict[str, Any]) -> dict[str, Any]:
    """LightGBM's parameters: the form's objective, the calibrator's tree settings, and what
    makes reruns bit-identical (fixed threads, ``deterministic``, row-wise histograms, the
    seed; no bagging or feature sampling)."""
    objective = {"objective": "multiclass", "num_class": n_classes} if n_classes else {}
    return {
        "objective": "binary",
        **objective,
        **settings,
        "deterministic": True,
        "force_row_wise": True,
        "boost_from_average": False,
        "verbosity": -1,
    }


def train_round(data: Rows, params: dict[str, Any], n_trees: int) -> tuple[str, float, np.ndarray]:
    """One round on ``data`` (module docstring): the booster as LightGBM's model text, the
    unshrink factor, and the rows' new state."""
    import lightgbm as lgb

    x = _inputs(data.features, data.state)
    dataset = lgb.Dataset(x, label=data.targets, init_score=data.state, params=params)
    booster = lgb.train(params, dataset, num_boost_round=n_trees)
    state = data.state + booster.predict(x, raw_score=True)
    assert data.targets is not None
    factor = unshrink(state, data.targets)
    return booster.model_to_string(), factor, factor * state


def apply_round(booster: Any, factor: float, features: np.ndarray, state: np.ndarray) -> np.ndarray:
    """A fitted round's new state of rows (``booster``: a ``lightgbm.Booster``)."""
    return factor * (state + booster.predict(_inputs(features, state), raw_score=True))


def _loss(state: np.ndarray, targets: np.ndarray) -> float:
    """Mean training loss of a state: multiclass cross-entropy, or binary log loss."""
    if state.ndim == 2:
        picked = np.take_along_axis(state, targets[:, None].astype(np.int64), 1)[:, 0]
        return float(np.mean(logsumexp(state, axis=1) - picked))
    return float(np.mean(np.logaddexp(0.0, np.where(targets > 0, -state, state))))


def unshrink(state: np.ndarray, targets: np.ndarray) -> float:
    """The factor ``a`` in :data:`UNSHRINK` minimising the loss of ``a * state``."""
    result = minimize_scalar(lambda a: _loss(a * state, targets), bounds=UNSHRINK, method="bounded")
    return float(result.x)


def top_floor(data: Rows, state: np.ndarray) -> np.ndarray:
    """``"top"`` log-odds with the floor that keeps the top class on top (pinned rows keep
    their starting state)."""
    assert data.floor is not None and data.pinned is not None
    floor = data.floor + np.minimum(TIE_MARGIN, (data.state - data.floor) / 2)
    return np.where(data.pinned, data.state, np.maximum(state, floor))


def held_out_nll(data: Rows, state: np.ndarray, labels: np.ndarray) -> float:
    """The mean multiclass NLL of rows under a state: ``logsumexp(s) - s_y`` for ``"all"``;
    for ``"top"`` (floored), ``softplus(-t)`` where the top class is right and ``rest +
    softplus(t)`` where it is not."""
    if state.ndim == 2:
        return _loss(state, labels)
    assert data.targets is not None and data.rest is not None
    t = top_floor(data, state)
    right = data.targets > 0
    terms = np.where(right, np.logaddexp(0.0, -t), data.rest + np.logaddexp(0.0, t))
    return float(np.mean(terms))
