"""What the image-classification studies (BSCE-GRA, meta-regularization) share: the papers'
SGD recipe and its regimes, data loading, the CIFAR rows that join when the data is present,
evaluation before and after temperature scaling, and the per-epoch curves.

Recipe (methods §0 and §7.2, the [FLC] / [GRA] / [MC] code bases): SGD with momentum 0.9, weight
decay 5e-4, learning rate 0.1, batch 128, **sum**-reduced losses, global gradient-norm clipping
at 2, MultiStepLR x0.1 at the regime's milestones (the scheduler steps after each epoch).

Regimes (:class:`Regime`): the papers train 350 epochs on CIFAR (about 123k SGD steps), long
after the training set is memorised -- where over-confidence appears. On the CPU datasets a
``short`` regime (35 epochs, drops at 15 / 25: the schedule shortened tenfold) and a ``long``
one (three times longer, drops at 45 / 75), in which plain cross-entropy drives the training
error to zero, run side by side, so each verdict is reported in both. CIFAR rows always run
the papers' own 350-epoch schedule.

Temperature scaling is the reference code's: the grid T = 0.1 .. 10.0 chosen by validation
15-bin ECE (``ece_ts`` etc.; ``temperature``). Validation scores (``val_ece``, ``val_nll``,
``val_accuracy``) are computed before temperature scaling and are what hyperparameter
selection reads (:mod:`selfcal.experiments.selection`).
"""

from selfcal.studies._images.data import (
    available_cifar,
    load,
    load_splits,
    meta_split,
    sweep_datasets,
)
from selfcal.studies._images.evaluation import (
    Curves,
    evaluate,
    grid_temperature,
    logits,
    scores,
)
from selfcal.studies._images.methods import image_methods, train_as
from selfcal.studies._images.recipe import (
    CIFAR,
    CIFAR_FOLDERS,
    CURVE_POINTS,
    LONG,
    PAPER,
    SHORT,
    ImageProtocol,
    Regime,
    augmentation,
    device_for,
)
from selfcal.studies._images.report import (
    curve_figure,
    intro,
    quick_fields,
    regime_sections,
    regime_specs,
    regime_summary,
    regimes,
    study_texts,
)

__all__ = [
    "CIFAR",
    "CIFAR_FOLDERS",
    "CURVE_POINTS",
    "LONG",
    "PAPER",
    "SHORT",
    "Curves",
    "ImageProtocol",
    "Regime",
    "augmentation",
    "available_cifar",
    "curve_figure",
    "device_for",
    "evaluate",
    "grid_temperature",
    "image_methods",
    "intro",
    "load",
    "load_splits",
    "logits",
    "meta_split",
    "quick_fields",
    "regime_sections",
    "regime_specs",
    "regime_summary",
    "regimes",
    "scores",
    "study_texts",
    "sweep_datasets",
    "train_as",
]
