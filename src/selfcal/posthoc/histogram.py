"""Histogram binning (Zadrozny & Elkan, 2001), one-vs-rest."""

from __future__ import annotations

from typing import ClassVar

import torch

from selfcal.estimator import Check, checked_value
from selfcal.estimator.loading import FLOATS, NON_NEGATIVE, UNIT, Fitted
from selfcal.metrics.binning import bin_index, bin_statistics, check_n_bins, uniform_edges
from selfcal.posthoc._base import Calibrator
from selfcal.posthoc._modules import HistogramModule, renormalise
from selfcal.posthoc._tensors import as_tensor
from selfcal.posthoc.registry import register_calibrator
from selfcal.predictions import Predictions


@register_calibrator("histogram")
class HistogramBinning(Calibrator):
    """One-vs-rest equal-width histogram binning.

    For each class ``j``, split ``[0, 1]`` into ``M = n_bins`` bins ``(e_m, e_{m+1}]``
    (selfcal's binning convention, bin 0 closed on the left; :mod:`selfcal.metrics.binning`)
    and replace ``p_{ij}`` by the frequency of ``y = j`` among the validation samples whose
    ``p_{.j}`` falls in the same bin, ``theta_jm = |{i in B_jm : y_i = j}| / |B_jm|``; an empty
    bin keeps its midpoint ``(e_m + e_{m+1}) / 2``. Rows are then renormalised,
    ``p'_j = theta_j(p_j) / sum_l theta_l(p_l)`` (uniform ``1/C`` if all are 0).

    The result is mixed with the uniform distribution (``mix``): a bin whose validation
    samples are all negatives gives ``theta = 0``, and a new sample of that class there would
    otherwise get probability exactly 0.

    **Can change the predicted class** (the per-class maps are independent step functions).
    :meth:`to_module` gives a module holding the edges and ``bin_values_`` as buffers.

    Parameters
    ----------
    n_bins : bins per class (default 15).
    mix : ``"auto"`` (default: ``eps = 1 / (n + 1)``), or ``eps`` in ``[0, 1)``: the output is
        ``(1 - eps) p + eps / C`` (:mod:`selfcal.posthoc._base`); 0 is the un-mixed map.
    kind : ``"logits"``, ``"probs"`` or ``None`` (default): what a positional score array holds.

    Attributes
    ----------
    bin_values_ : (C, M) float64 array, ``theta_jm``
    bin_counts_ : (C, M) float64 array, validation samples per bin
    mix_ : float, the mixing weight ``eps``
    """

    _parameters: ClassVar[dict[str, Check]] = {"n_bins": checked_value(check_n_bins)}
    _fitted_attributes = ("bin_values_", "bin_counts_")
    _fitted_schema: ClassVar[dict[str, Fitted]] = {
        "bin_values_": Fitted(FLOATS, UNIT),
        "bin_counts_": Fitted(FLOATS, NON_NEGATIVE),
    }
    _per_class = True
    _rests_on_each_class = True

    def __init__(
        self, n_bins: int = 15, mix: float | str = "auto", kind: str | None = None
    ) -> None:
        self.n_bins = n_bins
        self.mix = mix
        self.kind = kind

    def _fit(self, pred: Predictions) -> None:
        edges = uniform_edges(self.n_bins, pred.device)
        mid = (edges[:-1] + edges[1:]) / 2
        p, y = pred.probs, pred.require_labels()
        values, counts = [], []
        for j in range(pred.n_classes):
            stats = bin_statistics(p[:, j].contiguous(), (y == j).double(), edges)
            values.append(torch.where(stats.count > 0, stats.accuracy, mid))
            counts.append(stats.count)
        self.bin_values_ = torch.stack(values).cpu().numpy()
        self.bin_counts_ = torch.stack(counts).cpu().numpy()

    def _predict(self, pred: Predictions) -> torch.Tensor:
        p = pred.probs
        edges = uniform_edges(self.n_bins, p.device)
        theta = as_tensor(self.bin_values_, p)
        columns = [theta[j][bin_index(p[:, j].contiguous(), edges)] for j in range(p.shape[1])]
        out = torch.stack(columns, 1)
        return renormalise(out)

    def _module(self, from_probs: bool) -> torch.nn.Module:
        edges = uniform_edges(self.n_bins).numpy()
        return HistogramModule(edges, self.bin_values_, from_probs)
