"""torchmetrics ``Metric`` classes for selfcal's binned calibration errors, NLL and Brier score.

Each class keeps as its state the **additive statistics** that the one-shot selfcal metric is
computed from, all float64, registered with ``add_state(..., dist_reduce_fx="sum")`` so that
torchmetrics' reduction across processes is a plain sum and loses nothing:

* :class:`ECE`, :class:`MCE` -- the top-label :class:`~selfcal.metrics.binning.BinStats` of
  :func:`~selfcal.metrics.binning.top_label_bins` over ``M`` equal-width bins: ``count``,
  ``confidence_sum`` and ``accuracy_sum``, each ``(M,)``;
* :class:`ClasswiseECE` -- the ``(C, M)`` statistics of
  :func:`~selfcal.metrics.binning.classwise_bins`;
* :class:`Brier`, :class:`NLL` -- the sum of the per-sample scores and the number of samples;
* :class:`RefinementLoss`, :class:`CalibrationLoss` -- a recalibrator is fitted on all the
  data, so every sample's scores and label are kept;
* :class:`AdaECE` -- equal-mass edges depend on the ranks of all confidences, so either every
  confidence and correctness is kept (``mode="exact"``, ``dist_reduce_fx="cat"``) or a
  fixed-size histogram of the confidences on a fine grid (``mode="sketch"``, ``"sum"``) from
  which the edges are approximated with a certified error bound (below).

``compute()`` applies :func:`~selfcal.metrics.binning.calibration_error` (or the mean) to the
accumulated statistics, so it equals the one-shot selfcal metric on the concatenation of every
batch of every process: bin counts exactly, sums up to float64 summation order
(``tests/integrations/test_torchmetrics.py``). ``ece``, ``mce`` and ``classwise_ece`` bin
``(e_m, e_{m+1}]`` with bin 0 closed (methods §1.1, §1.2, §1.4), ``adaece`` uses the reference
code's equal-mass edges (methods §1.3), ``nll`` and ``brier`` are those of methods §1.5.

Inputs follow selfcal's contract (:mod:`selfcal.predictions`): the scores are never guessed.
Every class takes ``kind="logits" | "probs"`` at construction, as selfcal's calibrators do: what
a *positional* score tensor holds. Then torchmetrics' calling convention works --
``metric(preds, target)``, ``metric.update(preds, target)`` or ``update(preds=..., target=...)``
-- and so does a positional ``torchmetrics.MetricCollection`` mixing these classes with
torchmetrics' own (which take ``(preds, target)`` too):

>>> import torch
>>> from torchmetrics import MetricCollection
>>> from torchmetrics.classification import MulticlassAccuracy
>>> from selfcal.integrations.torchmetrics import ECE, NLL
>>> logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 3.0]], dtype=torch.float64)
>>> labels = torch.tensor([0, 1, 1, 1])
>>> round(float(ECE(kind="logits")(logits, labels)), 4)
0.1572
>>> accuracy = MulticlassAccuracy(num_classes=2, average="micro")
>>> collection = MetricCollection(
...     {"ece": ECE(kind="logits"), "nll": NLL(kind="logits"), "accuracy": accuracy}
... )
>>> collection.update(logits[:2], labels[:2])
>>> collection.update(logits[2:], labels[2:])
>>> {name: round(float(value), 4) for name, value in collection.compute().items()}
{'accuracy': 0.75, 'ece': 0.1572, 'nll': 0.4505}

Without ``kind`` the scores are named: ``update(logits=z, labels=y)``, ``update(probs=p,
labels=y)``, or a validated :class:`~selfcal.predictions.Predictions` as the one positional
argument (it says what it holds, whatever ``kind`` is); positional scores then raise a
``ValueError``. A ``kind`` is taken as stated: scores passed as logits that look like
probabilities are still read as logits. Every input is checked (a ``ValueError`` names the
problem and the first offending row). Results are float64 0-d tensors on the metric's device;
states live on that device too (``metric.to(device)``). A device without float64 (Apple MPS)
cannot hold them: keep the metric on the CPU and update it with the MPS tensors, which are
scored on the CPU (:data:`~selfcal.predictions.NO_FLOAT64_DEVICES`).

**Where torchmetrics' own ``MulticlassCalibrationError`` differs** (pinned in
``tests/integrations/test_torchmetrics.py``): it bins ``[lower, upper)`` with an extra bin for
a confidence of exactly 1.0, so a confidence on an edge lands one bin higher; it casts
confidences to float32 and sums in float32, which drifts on large inputs; and its state is
every confidence (memory growing with the number of samples) where :class:`ECE`'s is ``3 M``
numbers. Where no confidence sits on an edge or at 1.0, and the inputs are float32-exact, the
two agree to 1e-6 (1e-5 beyond a few hundred samples, from its float32 sums). Its
``BinaryCalibrationError`` scores the positive class, which is :class:`ClasswiseECE` on two
classes, not :class:`ECE`.

**The AdaECE sketch** (``AdaECE(mode="sketch")``): a histogram of the confidences on a fine
grid, from which the equal-mass edges are rounded to the grid, with a certified bound on the
difference from the exact AdaECE (:mod:`selfcal.integrations._sketch`, where the bound is
derived).
"""

from __future__ import annotations

from selfcal.integrations._adaece import ADAECE_MODES, AdaECE
from selfcal.integrations._binned import ECE, MCE, ClasswiseECE
from selfcal.integrations._refinement import CalibrationLoss, RefinementLoss
from selfcal.integrations._scores import NLL, Brier
from selfcal.integrations._sketch import SKETCH_GRID, adaece_from_sketch

__all__ = [  # noqa: RUF022 - reading order, which the API page follows (docs/api/integrations.md)
    "SKETCH_GRID",
    "ADAECE_MODES",
    "ECE",
    "MCE",
    "ClasswiseECE",
    "AdaECE",
    "Brier",
    "NLL",
    "RefinementLoss",
    "CalibrationLoss",
    "adaece_from_sketch",
]
