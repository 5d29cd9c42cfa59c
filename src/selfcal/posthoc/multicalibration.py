"""Multiclass multicalibration by residual boosting over group features (MCGrad generalised
to ``C`` classes), on LightGBM, with a held-out guard that keeps the base calibrator when
boosting does not help.

:class:`MulticlassMulticalibration` starts from a base calibrator (temperature scaling by
default) and corrects what it leaves wrong per group: trees on the group columns and the
calibrated scores find cells of group x class x confidence whose frequencies differ from their
probabilities and move those scores. The round structure, the score as a feature, the unshrink
factor and the early stopping with "0 rounds" as a candidate are MCGrad's (Tax et al., KDD 2026,
the ``mcgrad`` package), which is binary only; the rounds themselves are
:mod:`selfcal.posthoc._boosting`.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, ClassVar

import numpy as np
import torch

from selfcal._inputs import as_groups
from selfcal._validation import (
    check_choice,
    check_flag,
    check_int,
    check_nonnegative,
    check_positive,
    check_real,
)
from selfcal._warnings import warn_unseen_groups
from selfcal.estimator import Check
from selfcal.estimator.loading import (
    FLOATS,
    INTEGER,
    NON_NEGATIVE,
    TEXT,
    TEXTS,
    Fitted,
    FittedType,
    check_probabilities,
    probe_logits,
)
from selfcal.posthoc import _boosting as B
from selfcal.posthoc._base import CALIBRATOR, Calibrator
from selfcal.posthoc.crossfit import held_out_chunks
from selfcal.posthoc.registry import build_calibrator, register_calibrator
from selfcal.predictions import Predictions

MAX_ALL_CLASSES = 32
"""``classes="auto"`` boosts every class's score up to this many classes, the top label above."""
FORMS = ("auto", "all", "top")
MODEL_TEXTS = FittedType(
    "a list of LightGBM model strings",
    lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
    numeric=False,
)


def check_base(name: str, value: Any) -> None:
    """``base`` names a registered calibrator that does not itself use groups."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must name a registered calibrator (e.g. 'ts'), got {value!r}")
    if build_calibrator(value).uses_groups:
        raise ValueError(f"{name} must be a calibrator that does not use groups, got {value!r}")


@register_calibrator("multicalibration")
class MulticlassMulticalibration(Calibrator):
    """Multiclass multicalibration: LightGBM boosting over group features on a base calibrator.

    **Start.** ``base`` (a registered calibrator name, default ``"ts"``) is fitted on every row;
    its calibrated probabilities ``q`` are the starting score (LightGBM's ``init_score``).

    **Features.** The group columns -- the one-hot of a partition, or the membership columns
    of overlapping groups (``0/1`` numeric columns, so a tree splits one group off per node
    whatever its size; LightGBM's categorical splits need ``min_data_per_group`` rows per
    category, 100 by default, and would not split off a 75-row subject) -- and the current
    calibrated scores, so a cell of group x class x confidence can be corrected.

    **Two forms** (``classes``):

    * ``"all"`` (``"auto"`` up to ``C = 32``, :data:`MAX_ALL_CLASSES`): LightGBM's
      ``multiclass`` objective with the ``(N, C)`` starting scores ``s_0 = log q``; features
      ``log_softmax(s)`` (all ``C``); each round adds one tree per class per iteration.
      ``p = softmax(s_R)``. The argmax may change.
    * ``"top"`` (``"auto"`` above 32 classes; ImageNet's 1,000): the ``binary`` objective on
      "the base's top class is right", starting from ``t_0 = logit(c)``, ``c = max_k q_k``,
      with ``t`` as the one score feature. The corrected confidence ``c' = sigmoid(t_R)``
      replaces ``c``; every other class is rescaled by ``(1 - c') / (1 - c)``, so rows sum to
      1, and ``t_R`` is floored just above the point where the runner-up would tie (within
      ``1e-6`` of it, or half the base's margin), so the argmax is the base's. Why: the
      multiclass objective costs ``C`` trees per iteration and a ``(N, C)`` score matrix per
      copy -- at 50,000 x 1,000, 1,000 trees an iteration and 400 MB a copy -- and per-class
      cells of 50 rows carry little evidence; the top label is where decisions and
      confidences are read, it has ``N`` rows of evidence, and its marginal NLL is the binary
      log loss of ``t`` plus a constant per row (a wrong row's ``-log p_y + log(1 - c)``),
      so boosting the binary loss boosts the multiclass likelihood. The ranking of the other
      classes and their ratios are the base's.

    **Rounds** (:mod:`selfcal.posthoc._boosting`, MCGrad's): each trains ``n_trees`` trees
    (``learning_rate``, ``num_leaves``, ``min_data_in_leaf``, ``lambda_l2``) from the current
    state, then rescales it by the unshrink factor that minimises the training NLL.

    **The guard.** A fraction ``holdout`` (default 0.3) of the rows, stratified by group (a
    partition's groups; for membership columns a row's first group) and drawn with ``seed``,
    is held out; rounds are trained on the rest and scored by the held-out multiclass NLL
    after each, stopping at the first round that does not lower it (patience 0, at most
    ``max_rounds``). ``rounds_`` is the round count of the lowest held-out NLL, **0 when no
    round lowers it: the base calibrator, unchanged**. With ``refit=True`` (default) that
    many rounds are then trained again on all rows; with ``refit=False`` the held-out search's
    own rounds are kept. Promised: with ``refit=False``, the held-out NLL of the fitted map
    is never above the base's (``holdout_nll_[rounds_] <= holdout_nll_[0]``; the base was
    fitted on all rows, held-out ones included, which favours it: the guard is
    conservative). With ``refit=True`` the refitted rounds see more rows and their held-out
    NLL is not measured (no rows are left); the choice of ``rounds_`` is what the guard
    protects. Not promised: any per-group bound (a group's error can grow while the marginal
    NLL falls), nor calibration of groups unseen at fit.

    **Groups** are required at fit and predict (``groups=``: one label a row, or membership
    columns). A group unseen at fit time gets all-zero group columns -- the trees' branch for
    rows in none of the fitted groups -- and warns ``UserWarning`` naming it.

    **Determinism.** LightGBM runs with ``num_threads = n_threads`` (default 1),
    ``deterministic=True``, row-wise histograms, no bagging and ``seed``: refits with the same
    seed and thread count are bit-identical. The file holds each round's LightGBM model as its
    own text (``Booster.model_to_string()``): JSON only, nothing pickled. ``to_module`` is not
    available (the map is a tree ensemble over groups).

    Attributes
    ----------
    base_ : the fitted base calibrator
    group_names_ : the group names seen at fit
    form_ : ``"all"`` or ``"top"``
    rounds_ : rounds kept (0: the base unchanged)
    boosters_ : each kept round's LightGBM model text
    unshrink_ : each kept round's unshrink factor
    holdout_nll_ : held-out NLL after 0, 1, ... rounds of the search
    """

    uses_groups: ClassVar[bool] = True
    _parameters: ClassVar[dict[str, Check]] = {
        "base": check_base,
        "classes": functools.partial(check_choice, choices=FORMS),
        "holdout": lambda n, v: check_real(n, v, 0.0, 1.0, low_open=True, high_open=True),
        "max_rounds": check_int,
        "n_trees": check_int,
        "learning_rate": check_positive,
        "num_leaves": functools.partial(check_int, minimum=2),
        "min_data_in_leaf": check_int,
        "lambda_l2": check_nonnegative,
        "refit": check_flag,
        "seed": functools.partial(check_int, minimum=0),
        "n_threads": check_int,
    }
    _fitted_attributes = (
        "base_",
        "group_names_",
        "form_",
        "rounds_",
        "boosters_",
        "unshrink_",
        "holdout_nll_",
    )
    _fitted_schema: ClassVar[dict[str, Fitted]] = {
        "base_": Fitted(CALIBRATOR),
        "group_names_": Fitted(TEXTS),
        "form_": Fitted(TEXT),
        "rounds_": Fitted(INTEGER, NON_NEGATIVE),
        "boosters_": Fitted(MODEL_TEXTS),
        "unshrink_": Fitted(FLOATS, NON_NEGATIVE),
        "holdout_nll_": Fitted(FLOATS, infinite=True),
    }
    _parsed: tuple[int, list[Any]] | None = None

    @classmethod
    def prepare_fit(cls) -> None:
        """Import LightGBM (and the scikit-learn modules it loads) before a timed fit."""
        import lightgbm  # noqa: F401

    def __init__(
        self,
        base: str = "ts",
        classes: str = "auto",
        holdout: float = 0.3,
        max_rounds: int = 10,
        n_trees: int = 50,
        learning_rate: float = 0.05,
        num_leaves: int = 4,
        min_data_in_leaf: int = 20,
        lambda_l2: float = 1.0,
        refit: bool = True,
        seed: int = 0,
        n_threads: int = 1,
        kind: str | None = None,
    ) -> None:
        self.base = base
        self.classes = classes
        self.holdout = holdout
        self.max_rounds = max_rounds
        self.n_trees = n_trees
        self.learning_rate = learning_rate
        self.num_leaves = num_leaves
        self.min_data_in_leaf = min_data_in_leaf
        self.lambda_l2 = lambda_l2
        self.refit = refit
        self.seed = seed
        self.n_threads = n_threads
        self.kind = kind

    # ------------------------------------------------------------------ fit
    def _fit(self, pred: Predictions) -> None:
        self.base_ = build_calibrator(self.base, kind=self.kind).fit(pred)
        wide = self.classes == "all" or (
            self.classes == "auto" and pred.n_classes <= MAX_ALL_CLASSES
        )
        self.form_ = "all" if wide else "top"
        groups = pred.require_groups()
        self.group_names_ = list(groups.names)
        data = self._rows(pred, B.group_features(groups, groups.names)[0], fit=True)
        train, held = B.holdout_split(groups, float(self.holdout), int(self.seed))
        self._parsed = None
        if len(train) == 0 or len(held) == 0:
            self.warn_degenerate(
                f"{pred.n_samples} rows leave no {'held-out' if len(train) else 'training'} "
                "rows for the guard; returned the base calibrator unchanged (0 rounds)"
            )
            self._keep([], [], [B.held_out_nll(data, data.state, self._targets(data))])
            return
        texts, factors, nlls = self._search(data.take(train), data.take(held))
        best = int(np.argmin(nlls))
        if best and self.refit:
            texts, factors = [], []
            state = data.state
            for _ in range(best):
                text, factor, state = B.train_round(
                    B.Rows(data.features, state, data.targets), *self._round()
                )
                texts.append(text)
                factors.append(factor)
        self._keep(texts[:best], factors[:best], nlls)

    def _search(self, train: B.Rows, held: B.Rows) -> tuple[list[str], list[float], list[float]]:
        """Rounds on ``train`` scored on ``held`` until one does not lower its NLL: the
        rounds' texts and factors, and the held-out NLL after 0, 1, ... rounds."""
        import lightgbm as lgb

        nlls = [B.held_out_nll(held, held.state, self._targets(held))]
        texts: list[str] = []
        factors: list[float] = []
        state_train, state_held = train.state, held.state
        for _ in range(int(self.max_rounds)):
            round_data = B.Rows(train.features, state_train, train.targets)
            text, factor, state_train = B.train_round(round_data, *self._round())
            booster = lgb.Booster(model_str=text)
            state_held = B.apply_round(booster, factor, held.features, state_held)
            nlls.append(B.held_out_nll(held, state_held, self._targets(held)))
            texts.append(text)
            factors.append(factor)
            if nlls[-1] >= min(nlls[:-1]):
                break
        return texts, factors, nlls

    def _keep(self, texts: list[str], factors: list[float], nlls: list[float]) -> None:
        self.rounds_ = len(texts)
        self.boosters_ = texts
        self.unshrink_ = np.asarray(factors, dtype=np.float64)
        self.holdout_nll_ = np.asarray(nlls, dtype=np.float64)

    def _round(self) -> tuple[dict[str, Any], int]:
        """LightGBM's parameters and the trees a round trains."""
        settings = {
            "learning_rate": float(self.learning_rate),
            "num_leaves": int(self.num_leaves),
            "min_data_in_leaf": int(self.min_data_in_leaf),
            "lambda_l2": float(self.lambda_l2),
            "num_threads": int(self.n_threads),
            "seed": int(self.seed),
        }
        n_classes = int(self.base_.n_classes_) if self.form_ == "all" else 0
        return B.lightgbm_params(n_classes, settings), int(self.n_trees)

    @staticmethod
    def _targets(data: B.Rows) -> np.ndarray:
        assert data.targets is not None
        return data.targets

    # ------------------------------------------------------------------ rows and states
    def _rows(
        self, pred: Predictions, features: np.ndarray, fit: bool, out: torch.Tensor | None = None
    ) -> B.Rows:
        """The rounds' view of ``pred``'s rows under the fitted base (``fit``: with targets);
        the ``"top"`` form reads the base's probabilities a piece at a time, writing them into
        ``out`` when given (predict), never holding another ``(N, C)`` copy."""
        labels = None if pred.labels is None else pred.require_labels().cpu().numpy()
        if self.form_ == "all":
            probs = self.base_.calibrated(pred).cpu().numpy()
            state = np.log(np.maximum(probs, np.exp(B.LOG_FLOOR)))
            return B.Rows(features, state, labels if fit else None)
        parts = []
        for rows in held_out_chunks(np.arange(pred.n_samples), pred.n_classes):
            index = torch.as_tensor(rows, device=pred.device)
            q = self.base_.calibrated(pred.subset(index))
            if out is not None:
                out[index] = q
            parts.append(_top_summaries(q, None if labels is None else labels[rows]))
        columns = [np.concatenate(c) for c in zip(*parts)]
        t, floor, pinned, right, rest = columns
        return B.Rows(features, t, right if fit else None, floor, rest, pinned.astype(bool))

    # ------------------------------------------------------------------ predict
    def _predict(self, pred: Predictions) -> torch.Tensor:
        if self.rounds_ == 0:  # the guard kept the base: exactly its probabilities
            return self.base_.calibrated(pred)
        names = tuple(self.group_names_)
        features, unseen = B.group_features(pred.require_groups(), names)
        warn_unseen_groups(
            "MulticlassMulticalibration",
            unseen,
            "their rows get all-zero group columns (the trees' branch for rows in none of the "
            "fitted groups)",
        )
        out = None
        if self.form_ == "top":
            out = torch.empty(
                pred.n_samples, pred.n_classes, dtype=torch.float64, device=pred.device
            )
        data = self._rows(pred, features, fit=False, out=out)
        state = data.state
        for booster, factor in zip(self._boosters(), self.unshrink_.tolist()):
            state = B.apply_round(booster, factor, features, state)
        if out is None:
            p = torch.softmax(torch.as_tensor(state, dtype=torch.float64), dim=1)
            return p.to(pred.device)
        return _rescaled(out, B.top_floor(data, state), data)

    def _boosters(self) -> list[Any]:
        """The kept rounds as ``lightgbm.Booster`` objects, parsed once per fitted list."""
        import lightgbm as lgb

        if self._parsed is None or self._parsed[0] != id(self.boosters_):
            self._parsed = (id(self.boosters_), [lgb.Booster(model_str=t) for t in self.boosters_])
        return self._parsed[1]

    def _module(self, from_probs: bool) -> torch.nn.Module:
        raise NotImplementedError(
            "MulticlassMulticalibration has no torch module: its map is a LightGBM tree "
            "ensemble over each row's groups; use predict_proba(..., groups=...)"
        )

    # ------------------------------------------------------------------ files
    def _check_loaded(self) -> None:
        """The rounds agree with each other and parse as LightGBM models of the right shape,
        the base holds as many classes, and the map, probed with groups (one and three probe
        rows per class, assigned to the fitted groups in turn), gives probabilities."""
        check_choice("form_", self.form_, ("all", "top"))
        if not (len(self.boosters_) == self.rounds_ == len(self.unshrink_)):
            raise ValueError("rounds_, boosters_ and unshrink_ disagree on the number of rounds")
        if self.base_.n_classes_ != self.n_classes_:
            raise ValueError("base_ was fitted on another number of classes")
        width = len(self.group_names_) + (self.n_classes_ if self.form_ == "all" else 1)
        per_round = self.n_classes_ if self.form_ == "all" else 1
        self._parsed = None
        try:
            boosters = self._boosters()
        except Exception as exc:  # lightgbm.basic.LightGBMError: not a model text
            raise ValueError(f"boosters_ holds a text LightGBM cannot read ({exc})") from None
        for booster in boosters:
            if booster.num_feature() != width or booster.num_model_per_iteration() != per_round:
                raise ValueError("boosters_ holds a model of another shape than the groups'")
        probe = probe_logits(self.n_classes_)
        names = self.group_names_
        groups = np.asarray([names[i % len(names)] for i in range(len(probe))], dtype=object)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a probe row is not the user's data
            p = self.predict_proba(logits=probe, groups=as_groups(groups, len(probe)))
        check_probabilities(np.asarray(p))


def _top_summaries(q: torch.Tensor, labels: np.ndarray | None) -> tuple[np.ndarray, ...]:
    """Per row of base probabilities ``q``: the top-label log-odds ``log c - log(1 - c)``,
    the floor ``log p_2 - log(1 - c)`` (runner-up ``p_2``), pinned (``1 - c`` is 0), whether
    the top class is right and ``rest = -log p_y + log(1 - c)`` (zeros without labels); the
    log-odds clipped to :data:`~selfcal.posthoc._boosting.TOP_CLIP`."""
    rows = torch.arange(q.shape[0], device=q.device)
    top = q.argmax(dim=1)
    c = q[rows, top]
    other = q.clone()
    other[rows, top] = 0.0
    rest_mass = other.sum(dim=1)
    pinned = rest_mass <= 0
    log_rest = torch.where(pinned, 0.0, rest_mass).log()
    t = (c.log() - log_rest).clamp(-B.TOP_CLIP, B.TOP_CLIP)
    floor = torch.minimum((other.amax(dim=1).clamp_min(1e-300).log() - log_rest), t)
    if labels is None:
        right = rest = torch.zeros_like(t)
    else:
        y = torch.as_tensor(labels, device=q.device)
        right = (top == y).double()
        rest = log_rest - q[rows, y].clamp_min(1e-300).log()
    return tuple(
        v.cpu().numpy() for v in (t, floor.clamp(-B.TOP_CLIP, B.TOP_CLIP), pinned, right, rest)
    )


def _rescaled(out: torch.Tensor, t: np.ndarray, data: B.Rows) -> torch.Tensor:
    """The base probabilities ``out`` with each row's top class set to ``c' = sigmoid(t)`` and
    the others scaled by ``(1 - c') / (1 - c)``, in place, a piece at a time; pinned rows are
    left as they are."""
    assert data.pinned is not None
    for rows in held_out_chunks(np.arange(out.shape[0]), out.shape[1]):
        keep = rows[~data.pinned[rows]]
        if len(keep) == 0:
            continue
        index = torch.as_tensor(keep, device=out.device)
        q = out[index]
        top = q.argmax(dim=1)
        picked = torch.arange(len(keep), device=out.device)
        q[picked, top] = 0.0
        tt = torch.as_tensor(t[keep], dtype=torch.float64, device=out.device)
        q *= (torch.sigmoid(-tt) / q.sum(dim=1))[:, None]  # (1 - c') / (1 - c)
        q[picked, top] = torch.sigmoid(tt)
        out[index] = q
    return out
