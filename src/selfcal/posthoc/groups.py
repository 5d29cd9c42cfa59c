"""Group-wise calibration: a base calibrator fitted on every row and, per group, on that
group's rows, each group's map shrunk toward the global one by the rows the group has.

The rule (:class:`GroupwiseCalibration`): for a row of group ``g`` with ``n_g`` fitting rows,

    log p(x) = w_g log p_g(x) + (1 - w_g) log p(x)_global   (then renormalised),
    w_g = n_g / (n_g + k),

a geometric pool of the group's map and the global map whose weight grows with the group's
evidence; ``k`` (``prior_rows``) is how many rows count as much as the global fit. For
temperature scaling it is temperature scaling again, with the inverse temperature shrunk,
``1/T = w_g / T_g + (1 - w_g) / T_global``. ``k = 0`` gives the independent per-group fits,
``k = inf`` the global fit, exactly.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, ClassVar

import numpy as np
import torch

from selfcal._validation import check_int
from selfcal._warnings import warn_unseen_groups
from selfcal.estimator import Check
from selfcal.estimator.loading import (
    FLOATS,
    INTEGERS,
    MAPPING,
    NON_NEGATIVE,
    NUMBER,
    TEXTS,
    UNIT,
    Fitted,
)
from selfcal.estimator.persistence import encode
from selfcal.exceptions import CalibrationNotConverged, DegenerateCalibration
from selfcal.posthoc._base import CALIBRATOR, Calibrator
from selfcal.posthoc.crossfit import stratified_folds
from selfcal.posthoc.registry import build_calibrator, calibrator_name, register_calibrator
from selfcal.predictions import Predictions

PRIOR_GRID = (0.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, math.inf)
"""``prior_rows="auto"`` chooses ``k`` among these by group-stratified cross-validation: from
the independent per-group fits (0) to the global fit alone (inf), in steps of about 3."""
MIN_ROWS = 20
"""Default ``min_rows``: a group with fewer fitting rows takes the global map. The shrinkage
already gives a small group a small weight; this guards the fits themselves -- on fewer than
20 rows a base fit is mostly noise or fails (one class in the group's labels), and a
cross-validation fold of such a group holds a handful of rows."""


def check_base(name: str, value: object) -> None:
    """A registered calibrator name or a :class:`Calibrator` instance, that does not itself
    use groups."""
    if isinstance(value, str):
        value = build_calibrator(calibrator_name(value))
    if not isinstance(value, Calibrator):
        raise ValueError(f"{name} must be a calibrator name or a Calibrator, got {value!r:.60}")
    if value.uses_groups:
        raise ValueError(f"{name} must be a calibrator that does not use groups")


def check_prior_rows(name: str, value: object) -> None:
    """``"auto"`` or a number in ``[0, inf]`` (``inf``: the global map for every group)."""
    is_number = isinstance(value, int | float | np.number) and not isinstance(value, bool)
    if value != "auto" and not (is_number and float(value) >= 0):  # type: ignore[arg-type]
        raise ValueError(f"{name} must be 'auto' or a number in [0, inf], got {value!r}")


def pooled(p_group: torch.Tensor, p_global: torch.Tensor, weight: float) -> torch.Tensor:
    """The geometric pool ``softmax(w log p_group + (1 - w) log p_global)`` of two maps'
    ``(n, C)`` probabilities, a log read as ``log max(p, tiny)`` (the floor of
    :attr:`~selfcal.Predictions.log_probs`, so that maps with disjoint supports still pool);
    ``w = 1`` returns ``p_group`` and ``w = 0`` ``p_global`` themselves."""
    if weight == 1.0:
        return p_group
    if weight == 0.0:
        return p_global
    tiny = torch.finfo(torch.float64).tiny
    log = weight * p_group.clamp_min(tiny).log() + (1 - weight) * p_global.clamp_min(tiny).log()
    return torch.softmax(log, dim=1)


def weight_of(rows: int, prior_rows: float) -> float:
    """``w = n / (n + k)``: 1 for ``k = 0`` (``n > 0``), 0 for ``k = inf``."""
    if math.isinf(prior_rows):
        return 0.0
    return rows / (rows + prior_rows)


def group_folds(codes: torch.Tensor, labels: torch.Tensor, n_folds: int, seed: int) -> list:
    """Held-out rows of folds stratified by group and, within a group, by label: every group's
    rows spread over the folds (within one row of each other)."""
    key = codes.cpu() * (int(labels.max()) + 1) + labels.cpu()
    return stratified_folds(key, n_folds, seed)


@register_calibrator("groupwise")
class GroupwiseCalibration(Calibrator):
    """A base calibrator per group, shrunk toward its global fit by the group's rows.

    ``fit`` fits a copy of ``base`` (a registered name, default ``"ts"``, or an unfitted
    :class:`Calibrator`) on every row (``global_``) and one on each group's rows; at
    prediction a row of group ``g`` gets the geometric pool

        ``p = softmax(w_g log p_g + (1 - w_g) log p_global)``, ``w_g = n_g / (n_g + k)``,

    ``n_g`` the group's fitting rows and ``k = prior_rows`` (:func:`pooled`; for temperature
    scaling, the inverse temperature ``w_g / T_g + (1 - w_g) / T``). ``k = 0`` is the
    independent per-group fits, ``k = inf`` the global fit, both exactly. ``prior_rows="auto"``
    (default) takes the ``k`` of :data:`PRIOR_GRID` with the lowest mean held-out NLL in
    ``n_folds``-fold cross-validation stratified by group (each group's rows spread over the
    folds; ties go to the larger ``k``); the per-fold fits do not depend on ``k``, so the
    choice costs ``n_folds`` fits of the global and group maps. ``cv_results_`` records each
    ``k``'s mean and worst-group held-out NLL.

    What is promised, and what not:

    * A group with fewer than ``min_rows`` fitting rows (default :data:`MIN_ROWS`), or whose
      own fit fails (labels of one class) or is degenerate (the base warns
      :class:`~selfcal.exceptions.DegenerateCalibration`, e.g. every prediction of the group
      correct), takes the global map (``w_g = 0``), its reason in ``fallback_``; the degenerate
      and failed ones are warned, once, as ``DegenerateCalibration``.
    * A group unseen at fit time takes the global map, with a ``UserWarning`` naming it.
    * Groups must be one a row (a partition); membership columns (overlapping groups) are a
      ``ValueError``: a row in several groups has no one group map to pool with (use a
      multicalibration post-processor for overlapping groups).
    * The top-label confidence is the largest pooled probability (a top-label base's own
      confidence map is not pooled). ``to_module`` is a ``ValueError``: the map depends on
      each row's group, which a module of scores alone does not take (export
      ``group_calibrators_[g].to_module()`` and ``global_.to_module()`` and pool them).

    Parameters
    ----------
    base : a registered calibrator name (default ``"ts"``) or an unfitted calibrator that
        does not use groups. One given as an instance is saved as the fitted ``global_``
        (its class and hyperparameters; a later ``fit`` refits it).
    prior_rows : ``"auto"`` (default) or ``k`` in ``[0, inf]``.
    min_rows : the fewest fitting rows a group needs for its own map (default 20).
    n_folds : the folds of ``prior_rows="auto"`` (default 5).
    seed : the folds' seed (default 0).
    kind : ``"logits"``, ``"probs"`` or ``None`` (default): what a positional score array holds.

    Attributes
    ----------
    global_ : the base fitted on every row
    group_names_ : the groups seen at fit time
    group_rows_ : ``n_g``, their fitting rows (int64)
    group_calibrators_ : group name -> the base fitted on its rows (groups with a map)
    weights_ : ``w_g`` (float64; 0 for a group in ``fallback_``)
    prior_rows_ : the ``k`` used
    fallback_ : group name -> why it takes the global map
    cv_results_ : for ``prior_rows="auto"``, ``prior_rows``, ``nll`` and ``worst_group_nll``
        of each ``k`` of the grid (empty otherwise)
    """

    uses_groups: ClassVar[bool] = True
    _parameters: ClassVar[dict[str, Check]] = {
        "base": check_base,
        "prior_rows": check_prior_rows,
        "min_rows": check_int,
        "n_folds": lambda name, value: check_int(name, value, minimum=2),
        "seed": lambda name, value: check_int(name, value, minimum=0),
    }
    _fitted_attributes = (
        "global_",
        "group_names_",
        "group_rows_",
        "group_calibrators_",
        "weights_",
        "prior_rows_",
        "fallback_",
        "cv_results_",
    )
    _fitted_schema: ClassVar[dict[str, Fitted]] = {
        "global_": Fitted(CALIBRATOR),
        "group_names_": Fitted(TEXTS),
        "group_rows_": Fitted(INTEGERS, NON_NEGATIVE),
        "group_calibrators_": Fitted(MAPPING),
        "weights_": Fitted(FLOATS, UNIT),
        "prior_rows_": Fitted(NUMBER, NON_NEGATIVE, infinite=True),
        "fallback_": Fitted(MAPPING),
        "cv_results_": Fitted(MAPPING),
    }

    def __init__(
        self,
        base: str | Calibrator = "ts",
        prior_rows: float | str = "auto",
        min_rows: int = MIN_ROWS,
        n_folds: int = 5,
        seed: int = 0,
        kind: str | None = None,
    ) -> None:
        self.base = base
        self.prior_rows = prior_rows
        self.min_rows = min_rows
        self.n_folds = n_folds
        self.seed = seed
        self.kind = kind

    # ------------------------------------------------------------------ fitting
    def _new_base(self) -> Calibrator:
        """An unfitted copy of ``base`` (built by name, or the instance's class with its
        hyperparameters: what ``sklearn.base.clone`` does)."""
        if isinstance(self.base, str):
            return build_calibrator(self.base)
        return type(self.base)(**self.base.get_params())

    def _check_classes(self, n_classes: int) -> None:
        self._new_base()._check_classes(n_classes)

    def _fit(self, pred: Predictions) -> None:
        codes = self._codes(pred)
        plain = pred.with_groups(None)
        names = pred.require_groups().names
        self.global_ = self._fit_global(plain)
        fits, fallback, degenerate = self._fit_groups(plain, codes, len(names))
        self.group_names_ = list(names)
        self.group_rows_ = torch.bincount(codes.cpu(), minlength=len(names)).numpy()
        self.group_calibrators_ = {names[g]: cal for g, cal in fits.items()}
        self.fallback_ = {names[g]: why for g, why in fallback.items()}
        self.cv_results_: dict[str, Any] = {}
        if self.prior_rows == "auto":
            self.prior_rows_, self.cv_results_ = self._choose_prior(plain, codes, len(names))
        else:
            self.prior_rows_ = float(self.prior_rows)
        self.weights_ = np.array(
            [
                weight_of(int(n), self.prior_rows_) if name in self.group_calibrators_ else 0.0
                for name, n in zip(names, self.group_rows_.tolist(), strict=True)
            ]
        )
        if degenerate:
            shown = "; ".join(f"{names[g]}: {fallback[g]}" for g in degenerate[:5])
            more = f" (and {len(degenerate) - 5} more)" if len(degenerate) > 5 else ""
            self.warn_degenerate(
                f"{len(degenerate)} group(s) could not fit their own map and take the global "
                f"one ({shown}{more})"
            )

    def _fit_global(self, plain: Predictions) -> Calibrator:
        """The base on every row, its warnings re-warned under this class's name."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fitted = self._new_base().fit(plain)
        for w in caught:
            if issubclass(w.category, (DegenerateCalibration, CalibrationNotConverged)):
                message = f"{type(self).__name__}: the global fit says: {w.message}"
                warnings.warn(message, w.category, stacklevel=5)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return fitted

    def _fit_groups(
        self, plain: Predictions, codes: torch.Tensor, n_groups: int
    ) -> tuple[dict[int, Calibrator], dict[int, str], list[int]]:
        """Each group's own fit (by index), the groups that take the global map with why, and
        which of those because their fit failed or was degenerate."""
        fits: dict[int, Calibrator] = {}
        fallback: dict[int, str] = {}
        degenerate: list[int] = []
        for g in range(n_groups):
            rows = torch.nonzero(codes == g).squeeze(1)
            if rows.numel() < self.min_rows:
                fallback[g] = f"{rows.numel()} rows, fewer than min_rows={self.min_rows}"
                continue
            fitted, problem = self._fit_one(plain.subset(rows))
            if fitted is None:
                fallback[g] = problem
                degenerate.append(g)
            else:
                fits[g] = fitted
        return fits, fallback, degenerate

    def _fit_one(self, part: Predictions) -> tuple[Calibrator | None, str]:
        """A copy of the base fitted on one group's rows, or ``None`` with the reason (its fit
        failed, or warned :class:`~selfcal.exceptions.DegenerateCalibration`)."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                fitted = self._new_base().fit(part)
            except (ValueError, ImportError) as error:
                return None, f"its fit failed: {str(error).splitlines()[0]}"
        for w in caught:
            if issubclass(w.category, DegenerateCalibration):
                return None, f"its fit is degenerate: {str(w.message).split('; ')[0]}"
        return fitted, ""

    def _choose_prior(
        self, plain: Predictions, codes: torch.Tensor, n_groups: int
    ) -> tuple[float, dict[str, Any]]:
        """``k`` of :data:`PRIOR_GRID` by group-stratified cross-validation (class docstring),
        with each ``k``'s mean and worst-group held-out NLL."""
        folds = group_folds(codes, plain.require_labels(), self.n_folds, self.seed)
        terms = torch.zeros(plain.n_samples, len(PRIOR_GRID), dtype=torch.float64)
        everything = np.arange(plain.n_samples)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the fold fits' warnings are not the user's fit's
            try:
                for rows in folds:
                    train = torch.as_tensor(np.setdiff1d(everything, rows), device=plain.device)
                    held = torch.as_tensor(rows, device=plain.device)
                    terms[rows] = self._fold_terms(plain, codes, train, held, n_groups)
            except ValueError as error:  # a fold's global fit failed: too few rows to choose
                why = str(error).splitlines()[0]
                self.warn_degenerate(
                    f"prior_rows='auto' could not cross-validate ({why}), so every group "
                    "takes the global map (prior_rows_ = inf)"
                )
                return math.inf, {}
        nll_of_k = terms.mean(0)
        per_group = [terms[(codes.cpu() == g)].mean(0) for g in range(n_groups)]
        seen = [t for t in per_group if not bool(torch.isnan(t).any())]
        worst = torch.stack(seen).amax(0)
        lowest = float(nll_of_k.min())
        best = max(i for i, v in enumerate(nll_of_k.tolist()) if v == lowest)
        results = {
            "prior_rows": list(PRIOR_GRID),
            "nll": nll_of_k.tolist(),
            "worst_group_nll": worst.tolist(),
        }
        return PRIOR_GRID[best], results

    def _fold_terms(
        self,
        plain: Predictions,
        codes: torch.Tensor,
        train: torch.Tensor,
        held: torch.Tensor,
        n_groups: int,
    ) -> torch.Tensor:
        """``(n_held, len(PRIOR_GRID))`` held-out NLL terms of one fold, for every ``k``."""
        fits, _, _ = self._fit_groups(plain.subset(train), codes[train], n_groups)
        held_out = plain.subset(held)
        base = self._new_base().fit(plain.subset(train)).calibrated(held_out)
        y = held_out.require_labels().unsqueeze(1)
        out = torch.empty(held.numel(), len(PRIOR_GRID), dtype=torch.float64)
        rows_of = torch.bincount(codes[train].cpu(), minlength=n_groups).tolist()
        held_codes = codes[held]
        for j, k in enumerate(PRIOR_GRID):
            p = base.clone()
            for g, cal in fits.items():
                mine = torch.nonzero(held_codes == g).squeeze(1)
                if mine.numel():
                    own = cal.calibrated(held_out.subset(mine))
                    p[mine] = pooled(own, base[mine], weight_of(rows_of[g], k))
            tiny = torch.finfo(torch.float64).tiny
            out[:, j] = -p.gather(1, y).squeeze(1).clamp_min(tiny).log().cpu()
        return out

    # ------------------------------------------------------------------ predicting
    def _codes(self, pred: Predictions) -> torch.Tensor:
        """The rows' group codes (one group a row), or ``ValueError`` for membership columns."""
        groups = pred.require_groups()
        if groups.codes is None:
            raise ValueError(
                f"{type(self).__name__} needs one group a row (a partition); got "
                f"{groups.n_groups} membership columns: a row in several groups has no one "
                "group map (use a multicalibration post-processor for overlapping groups)"
            )
        return groups.codes

    def _predict(self, pred: Predictions) -> torch.Tensor:
        self._codes(pred)
        groups = pred.require_groups()
        warn_unseen_groups(
            type(self).__name__,
            groups.unseen(self.group_names_),
            "their rows take the global map",
        )
        codes = groups.codes_in(self.group_names_)
        plain = pred.with_groups(None)
        p = self.global_.calibrated(plain).clone()  # a map may return its input's own tensor
        for g, name in enumerate(self.group_names_):
            cal, weight = self.group_calibrators_.get(name), float(self.weights_[g])
            rows = torch.nonzero(codes == g).squeeze(1)
            if cal is None or weight == 0.0 or not rows.numel():
                continue
            p[rows] = pooled(cal.calibrated(plain.subset(rows)), p[rows], weight)
        return p

    def _coverage_problems(self, coverage: Any) -> list[str]:
        """None: the global fit has warned itself (re-warned by :meth:`_fit_global`), and each
        group's degenerate fit is reported by :meth:`_fit`."""
        return []

    def _module(self, from_probs: bool) -> torch.nn.Module:
        raise ValueError(
            f"{type(self).__name__}.to_module: the map depends on each row's group, which a "
            "module of scores alone does not take; use predict_proba(..., groups=), or export "
            "global_.to_module() and each group_calibrators_[name].to_module() and pool them "
            "as the class docstring says"
        )

    # ------------------------------------------------------------------ files
    def _document(self) -> dict[str, Any]:
        """As every calibrator's, except that a ``base`` given as an (unfitted) instance is
        written as the fitted ``global_``, its class and hyperparameters (a file holds no
        unfitted calibrator)."""
        doc = super()._document() if isinstance(self.base, str) else self._instance_document()
        return doc

    def _instance_document(self) -> dict[str, Any]:
        params = {k: encode(v, Calibrator) for k, v in self.get_params().items() if k != "base"}
        return {
            "class": type(self).__name__,
            "params": {"base": encode(self.global_, Calibrator), **params},
            "fitted": {k: encode(v, Calibrator) for k, v in self.fitted_attributes().items()},
        }

    def _probe_groups(self, n_rows: int) -> list[str] | None:
        """Probe rows take the fitted groups in turn (:meth:`_check_loaded`)."""
        names = self.group_names_
        return [names[i % len(names)] for i in range(n_rows)]

    def _check_loaded(self) -> None:
        """The loaded maps agree: one of the base's class per group (``global_`` and each
        group's, fitted on as many classes), every group either with a map or in
        ``fallback_``, ``weights_ = n_g / (n_g + prior_rows_)`` for those with a map."""
        names, kind = self.group_names_, type(self._new_base())
        if type(self.global_) is not kind:
            raise ValueError(f"global_ is not a {kind.__name__}, the base")
        if len(self.group_rows_) != len(names) or len(self.weights_) != len(names):
            raise ValueError("group_rows_ and weights_ must have one value per group")
        if set(self.group_calibrators_) | set(self.fallback_) != set(names) or (
            set(self.group_calibrators_) & set(self.fallback_)
        ):
            raise ValueError("every group must have either a map or a fallback_ reason")
        for name, cal in self.group_calibrators_.items():
            if type(cal) is not kind or cal.n_classes_ != self.n_classes_:
                raise ValueError(
                    f"group_calibrators_[{name!r}] is not a {kind.__name__} fitted "
                    f"on {self.n_classes_} classes"
                )
        for g, name in enumerate(names):
            fitted = name in self.group_calibrators_
            expected = weight_of(int(self.group_rows_[g]), self.prior_rows_) if fitted else 0.0
            if float(self.weights_[g]) != expected:
                raise ValueError(f"weights_[{g}] is not n_g / (n_g + prior_rows_)")
        super()._check_loaded()
