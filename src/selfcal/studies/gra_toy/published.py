"""[GRA] §4.3, the toy study: mean Pearson correlation over 5 runs between the true calibration
error and each uncertainty metric, each at its grid-searched hyperparameter (values unstated)."""

PUBLISHED = {"fl": 0.550, "dfl": 0.638, "gbs": 0.664}
