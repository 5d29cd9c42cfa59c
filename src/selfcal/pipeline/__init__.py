"""Train a self-calibrated classifier on one's own tabular data, and use it: the library
behind ``selfcal train`` and ``selfcal predict``.

::

    from selfcal.pipeline import TrainSettings, predict, train

    train("train.csv", "val.csv", "model/", TrainSettings(method="bsce-gra"), test="test.csv")
    predict("model/", "new.csv", "predictions.csv", target_accuracy=0.95)

:func:`train` reads DATA / VAL / TEST (:mod:`~selfcal.pipeline.tables`: CSV, parquet, npz),
maps the labels and standardises the features with DATA's statistics
(:mod:`~selfcal.pipeline.prepare`), trains every hyperparameter candidate of the method from
the same seed with the benchmark's tabular recipe and keeps the checkpoint with the lowest
validation NLL, selects a candidate on VAL by the method's criterion
(:mod:`selfcal.methods`, :mod:`~selfcal.pipeline.fitting`), fits a post-hoc
calibrator and the abstention thresholds on VAL (:mod:`~selfcal.pipeline.selective`) and
writes a model folder (:mod:`~selfcal.pipeline.model_dir`) with a calibration report
(:mod:`~selfcal.pipeline.report`). :func:`predict` applies the folder to new rows
(:mod:`~selfcal.pipeline.predictor`). Nothing is pickled.
"""

from __future__ import annotations

from selfcal.pipeline.fitting import (
    Candidate,
    Progress,
    Selection,
    fit_and_select,
    select_candidate,
    train_candidate,
)
from selfcal.pipeline.model_dir import TrainedModel, threshold_for
from selfcal.pipeline.predictor import PredictResult, predict
from selfcal.pipeline.prepare import LabelMap, PreparedData, Standardizer, prepare
from selfcal.pipeline.selective import (
    DEFAULT_TARGET_ACCURACY,
    DEFAULT_TARGET_COVERAGE,
    Threshold,
    choose_threshold,
)
from selfcal.pipeline.tables import FeatureTable, read_table
from selfcal.pipeline.trainer import DEFAULT_CALIBRATOR, TrainResult, TrainSettings, train

__all__ = [
    "DEFAULT_CALIBRATOR",
    "DEFAULT_TARGET_ACCURACY",
    "DEFAULT_TARGET_COVERAGE",
    "Candidate",
    "FeatureTable",
    "LabelMap",
    "PredictResult",
    "PreparedData",
    "Progress",
    "Selection",
    "Standardizer",
    "Threshold",
    "TrainResult",
    "TrainSettings",
    "TrainedModel",
    "choose_threshold",
    "fit_and_select",
    "predict",
    "prepare",
    "read_table",
    "select_candidate",
    "threshold_for",
    "train",
    "train_candidate",
]
