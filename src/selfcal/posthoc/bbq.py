"""Bayesian binning into quantiles (Naeini, Cooper & Hauskrecht, 2015), one-vs-rest."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

from selfcal.estimator.loading import FLOATS, INTEGERS, NON_NEGATIVE, UNIT, Fitted
from selfcal.posthoc._base import Calibrator
from selfcal.posthoc._modules import padded_table, renormalise, score_probs
from selfcal.posthoc._tensors import as_tensor
from selfcal.posthoc.registry import register_calibrator
from selfcal.predictions import Predictions

PRIOR_SAMPLES = 2.0
"""``alpha_b + beta_b``: the pseudo-samples of each bin's beta prior. The authors' code's
default scoring function ("BDeu2", which it calls the version used in the paper) sets the
BDeu equivalent sample size to ``N' = 2B`` for a ``B``-bin model: two per bin."""

MIDPOINT_CLIP = 5e-3
"""The prior mean ``p_b`` (the bin's midpoint) is clipped to ``[0.005, 0.995]``, as in the
authors' code (the first bin starts at 0 and the last ends at 1)."""


def bin_count_range(n: int) -> tuple[int, int]:
    """The models' bin counts ``B``, from ``max(1, floor(N^(1/3) / 10))`` to
    ``min(ceil(N / 5), ceil(10 N^(1/3)))`` -- the paper's ``N^(1/3) / C`` to ``C N^(1/3)`` with
    ``C = 10``, at least 1 bin and at least 5 samples per bin, as in the authors' code (and
    netcal)."""
    root = n ** (1.0 / 3.0)
    return max(1, math.floor(root / 10)), min(math.ceil(n / 5), math.ceil(10 * root))


def cut_values(s: torch.Tensor, splits: torch.Tensor) -> torch.Tensor:
    """The cut between sorted scores ``s[j - 1] < s[j]`` (``j`` in ``splits``): their midpoint,
    or ``s[j - 1]`` itself if the midpoint rounds up onto ``s[j]`` (neighbouring floats), so
    that ``s[j - 1]`` falls below the cut and ``s[j]`` above it under the ``(e, e']``
    convention."""
    low, high = s[splits - 1], s[splits]
    mid = (low + high) / 2
    return torch.where(mid < high, mid, low)


@dataclass(frozen=True)
class Binnings:
    """Every equal-frequency binning model of sorted scores at once, as flat arrays over all
    their bins (grouped by model, ascending within a model).

    Model ``B`` takes bins of ``floor(N / B)`` consecutive sorted scores, the remainder in the
    last bin (the authors' ``HistCalibrationFreq``); a boundary between two equal scores is
    dropped (its bins merge), so tied scores share a bin. Bin ``i`` holds the scores
    ``lower[i] <= rank < upper[i]`` (``counts``), ``positives`` of them positive, and lies
    between the cut values ``low_edge`` and ``high_edge`` (0 and 1 at the ends)."""

    model: torch.Tensor
    lower: torch.Tensor
    upper: torch.Tensor
    counts: torch.Tensor
    positives: torch.Tensor
    low_edge: torch.Tensor
    high_edge: torch.Tensor
    n_models: int

    @classmethod
    def build(cls, s: torch.Tensor, cum_pos: torch.Tensor, n_bins: torch.Tensor) -> Binnings:
        n, device = s.shape[0], s.device
        n_models = n_bins.shape[0]
        per_model = n_bins - 1
        model = torch.repeat_interleave(torch.arange(n_models, device=device), per_model)
        first = torch.cumsum(per_model, 0) - per_model
        k = torch.arange(model.shape[0], device=device) - first[model] + 1
        splits = k * (n // n_bins)[model]
        keep = s[splits - 1] < s[splits]
        model, splits = model[keep], splits[keep]
        # every bin's upper end: the kept splits, then N for each model's last bin
        model = torch.cat([model, torch.arange(n_models, device=device)])
        upper = torch.cat([splits, torch.full((n_models,), n, device=device)])
        order = torch.argsort(model * (n + 1) + upper)
        model, upper = model[order], upper[order]
        starts_model = torch.ones_like(model, dtype=torch.bool)
        starts_model[1:] = model[1:] != model[:-1]
        lower = torch.where(starts_model, 0, torch.roll(upper, 1))
        edge = torch.zeros(n + 1, dtype=s.dtype, device=device)
        inner = upper < n
        edge[upper[inner]] = cut_values(s, upper[inner])
        edge[n] = 1.0
        return cls(
            model=model,
            lower=lower,
            upper=upper,
            counts=(upper - lower).to(s.dtype),
            positives=cum_pos[upper] - cum_pos[lower],
            low_edge=edge[lower],
            high_edge=edge[upper],
            n_models=n_models,
        )

    def prior(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``alpha_b = 2 p_b``, ``beta_b = 2 (1 - p_b)``: ``p_b`` the bin's midpoint, clipped
        to ``[MIDPOINT_CLIP, 1 - MIDPOINT_CLIP]``."""
        mid = ((self.low_edge + self.high_edge) / 2).clamp(MIDPOINT_CLIP, 1 - MIDPOINT_CLIP)
        alpha = PRIOR_SAMPLES * mid
        return alpha, PRIOR_SAMPLES - alpha

    def log_marginal_likelihood(self) -> torch.Tensor:
        """``(n_models,)`` BDeu: ``sum_b [lgamma(alpha_b + beta_b) - lgamma(N_b + alpha_b +
        beta_b) + lgamma(m_b + alpha_b) - lgamma(alpha_b) + lgamma(N_b - m_b + beta_b) -
        lgamma(beta_b)]``."""
        alpha, beta = self.prior()
        n, m, lg = self.counts, self.positives, torch.lgamma
        terms = (
            math.lgamma(PRIOR_SAMPLES)
            - lg(n + PRIOR_SAMPLES)
            + lg(m + alpha)
            - lg(alpha)
            + lg(n - m + beta)
            - lg(beta)
        )
        out = torch.zeros(self.n_models, dtype=terms.dtype, device=terms.device)
        return out.index_add_(0, self.model, terms)

    def estimates(self) -> torch.Tensor:
        """``P(z = 1 | bin b) = (m_b + alpha_b) / (N_b + alpha_b + beta_b)``: the posterior
        mean under the prior the score uses."""
        alpha, _ = self.prior()
        return (self.positives + alpha) / (self.counts + PRIOR_SAMPLES)


def fit_bbq_map(scores: torch.Tensor, target: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """One binary BBQ map of ``scores`` against the 0/1 ``target``: ``(cuts, values)`` with
    ``f(x) = values[#{cuts < x}]``.

    The Bayesian model average ``f(x) = sum_B w_B f_B(x)`` over the binning models
    ``B = bin_count_range(N)``, ``w_B`` proportional to the marginal likelihood (a uniform
    prior over models), is itself a step function whose cuts are the union of the models'
    (every cut sits between two neighbouring sorted scores, so there are at most ``N - 1``):
    its value below every cut is ``sum_B w_B f_B(0)``, and it jumps by
    ``w_B (theta_{B,b+1} - theta_{B,b})`` at each cut of each model."""
    order = torch.argsort(scores, stable=True)
    s = scores[order].contiguous()
    n = s.shape[0]
    cum_pos = torch.cat([target.new_zeros(1), torch.cumsum(target[order], 0)])
    lo, hi = bin_count_range(n)
    bins = Binnings.build(s, cum_pos, torch.arange(lo, hi + 1, device=s.device))
    weights = torch.softmax(bins.log_marginal_likelihood(), dim=0)
    theta = bins.estimates()
    w = weights[bins.model]
    start = (w * theta)[bins.lower == 0].sum()
    inner = bins.upper < n  # a cut follows bin i; the next bin (i + 1) is the same model's
    jumps = torch.zeros(n + 1, dtype=s.dtype, device=s.device)
    jumps.index_add_(0, bins.upper[inner], (w * (theta.roll(-1) - theta))[inner])
    used = torch.zeros(n + 1, dtype=torch.bool, device=s.device)
    used[bins.upper[inner]] = True
    splits = torch.nonzero(used).squeeze(1)
    values = start + torch.cat([s.new_zeros(1), torch.cumsum(jumps[splits], 0)])
    return cut_values(s, splits).cpu().numpy(), values.clamp(0.0, 1.0).cpu().numpy()


def bbq_probs(
    p: torch.Tensor, cuts: torch.Tensor, values: torch.Tensor, binary: bool
) -> torch.Tensor:
    """Apply the maps: ``cuts`` ``(R, K)`` padded with ``+inf``, ``values`` ``(R, K + 1)``;
    ``f_r(x) = values[r, #{cuts_r < x}]``. Two classes (``R = 1``): ``[1 - f(p_1), f(p_1)]``;
    else ``f_j(p_j)`` renormalised."""
    if binary:
        x = p[:, 1:].t().contiguous()
    else:
        x = p.t().contiguous()
    index = torch.searchsorted(cuts, x, right=False)
    mapped = values.gather(1, index).t()
    if binary:
        p1 = mapped.squeeze(1)
        return torch.stack([1 - p1, p1], 1)
    return renormalise(mapped)


class BBQModule(torch.nn.Module):
    """``log`` of :func:`bbq_probs` of ``p`` (``softmax(z)``, or the probabilities); the
    averaged tables are buffers."""

    if TYPE_CHECKING:  # buffers (TorchScript cannot read string annotations)
        cut_points: torch.Tensor
        bin_values: torch.Tensor
    __constants__ = ("from_probs", "binary")

    def __init__(
        self, cuts: np.ndarray, values: np.ndarray, sizes: np.ndarray, from_probs: bool
    ) -> None:
        super().__init__()
        self.register_buffer("cut_points", torch.as_tensor(padded_table(cuts, sizes, np.inf)))
        self.register_buffer("bin_values", torch.as_tensor(padded_table(values, sizes + 1, np.nan)))
        self.from_probs = from_probs
        self.binary = len(sizes) == 1

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        p = score_probs(scores.to(self.bin_values.dtype), self.from_probs)
        return bbq_probs(p, self.cut_points, self.bin_values, self.binary).log()


@register_calibrator("bbq")
class BBQ(Calibrator):
    """Bayesian binning into quantiles: a Bayesian average of equal-frequency histogram binnings.

    Naeini, Cooper & Hauskrecht (2015) calibrate a binary score ``s`` by averaging
    equal-frequency binning models ``M_B`` with ``B`` bins over ``B`` from
    ``max(1, floor(N^(1/3) / 10))`` to ``min(ceil(N / 5), ceil(10 N^(1/3)))``, weighted by
    ``P(M_B | D)``, proportional to the BDeu marginal likelihood

    ``P(D | M) = prod_b Gamma(N'/B) / Gamma(N_b + N'/B) * Gamma(m_b + alpha_b) / Gamma(alpha_b)
    * Gamma(N_b - m_b + beta_b) / Gamma(beta_b)``

    (``N_b`` scores in bin ``b``, ``m_b`` of them positive; ``alpha_b = (N'/B) p_b``,
    ``beta_b = (N'/B)(1 - p_b)``, ``p_b`` the bin's midpoint; a uniform prior over models).
    As the authors' code does by default, ``N'/B = 2`` and ``p_b`` is clipped to
    ``[0.005, 0.995]``. Each model predicts its bin's posterior mean
    ``(m_b + alpha_b) / (N_b + 2)``. Differences from the authors' MATLAB code (methods
    §2.5): it predicts ``(m_b + p_0) / (N_b + 1)`` with a data-dependent ``p_0``, and keeps
    only the best-scoring models by an "elbow" rule (``alpha = 0.001``) before averaging;
    here every model is averaged with its posterior weight, as the paper's formula reads.

    **One-vs-rest**: BBQ is a binary method, and the full probability vector is needed, so
    each class ``j`` gets a map ``f_j`` of ``p_j`` against ``1[y = j]`` and the results are
    renormalised, ``p'_j = f_j(p_j) / sum_l f_l(p_l)`` -- the reading of netcal's ``BBQ`` and
    of scikit-learn's one-vs-rest calibration. For two classes (as netcal, which treats
    ``C <= 2`` as binary) one map of ``p_1`` is fitted: ``p'_1 = f(p_1)``,
    ``p'_0 = 1 - p'_1``. netcal's ``BBQ`` differs otherwise: equal-*width* bins by default
    (its quantile option fails at prediction), BIC instead of BDeu, and elbow pruning.

    The averaged map is stored as one step function per class -- its cut points (at most
    ``N - 1``, midpoints between neighbouring validation scores; bins ``(e, e']``) and
    values -- so prediction is one binary search per score.

    **Can change the predicted class** (independent per-class maps).

    The result is mixed with the uniform distribution (``mix``), as for the other
    non-parametric calibrators (the posterior means are never exactly 0 or 1, but a class
    absent from the labels gets a small value whose renormalisation is otherwise unchecked).

    Parameters
    ----------
    mix : ``"auto"`` (default: ``eps = 1 / (n + 1)``), or ``eps`` in ``[0, 1)``: the output is
        ``(1 - eps) p + eps / C`` (:mod:`selfcal.posthoc._base`); 0 is the un-mixed map.
    kind : ``"logits"``, ``"probs"`` or ``None`` (default): what a positional score array holds.

    Attributes
    ----------
    cut_points_ : (K,) float64 array -- the cut points of all maps concatenated
    bin_values_ : (K + R,) float64 array -- the values of all maps concatenated
    table_sizes_ : (R,) int64 array -- cut points per map (``R = 1`` binary, else ``C``); 0
        where a map is constant (every binning model of that class's scores has one bin:
        too few rows, or scores all tied), as fitting 2 rows gives
    mix_ : float, the mixing weight ``eps``
    """

    _fitted_attributes = ("cut_points_", "bin_values_", "table_sizes_")
    _fitted_schema: ClassVar[dict[str, Fitted]] = {
        "cut_points_": Fitted(FLOATS),
        "bin_values_": Fitted(FLOATS, UNIT),
        "table_sizes_": Fitted(INTEGERS, NON_NEGATIVE),  # 0: a constant map (one bin)
    }
    _per_class = True
    _rests_on_each_class = True

    def __init__(self, mix: float | str = "auto", kind: str | None = None) -> None:
        self.mix = mix
        self.kind = kind

    def _check_loaded(self) -> None:
        """A loaded file's tables: one per map (one for two classes, else one per class), as
        many cut points as their sizes add up to and one value more per map (a map of size 0
        is a constant: one bin, no cut), cut points that never decrease within a map (the
        binary search reads anything else as garbage)."""
        maps = 1 if self.n_classes_ == 2 else self.n_classes_
        sizes = self.table_sizes_
        if sizes.shape != (maps,):
            raise ValueError(f"table_sizes_ must hold {maps} size(s), one per map")
        total = int(sizes.sum())
        if self.cut_points_.shape != (total,) or self.bin_values_.shape != (total + maps,):
            raise ValueError("cut_points_, bin_values_ and table_sizes_ disagree in length")
        for segment in np.split(self.cut_points_, np.cumsum(sizes)[:-1]):
            if np.any(np.diff(segment) < 0):
                raise ValueError("cut_points_ must not decrease within a map")
        super()._check_loaded()

    def _fit(self, pred: Predictions) -> None:
        p, y = pred.probs, pred.require_labels()
        classes = [1] if pred.n_classes == 2 else range(pred.n_classes)
        tables = [fit_bbq_map(p[:, j].contiguous(), (y == j).to(p.dtype)) for j in classes]
        self.cut_points_ = np.concatenate([t[0] for t in tables])
        self.bin_values_ = np.concatenate([t[1] for t in tables])
        self.table_sizes_ = np.array([len(t[0]) for t in tables], dtype=np.int64)

    def _tables(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cuts = padded_table(self.cut_points_, self.table_sizes_, np.inf)
        values = padded_table(self.bin_values_, self.table_sizes_ + 1, np.nan)
        return as_tensor(cuts, like), as_tensor(values, like)

    def _predict(self, pred: Predictions) -> torch.Tensor:
        p = pred.probs
        cuts, values = self._tables(p)
        return bbq_probs(p, cuts, values, binary=len(self.table_sizes_) == 1)

    def _module(self, from_probs: bool) -> torch.nn.Module:
        return BBQModule(self.cut_points_, self.bin_values_, self.table_sizes_, from_probs)
