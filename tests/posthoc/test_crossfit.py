"""The folds of :mod:`selfcal.posthoc.crossfit`: stratified folds deal each class evenly,
random folds cover every row once, both seeded."""

from __future__ import annotations

import numpy as np
import torch

from selfcal.posthoc.crossfit import random_folds, stratified_folds


def test_stratified_folds_deal_each_class_evenly():
    y = torch.as_tensor(np.repeat([0, 1, 2], [50, 23, 7]))
    folds = stratified_folds(y, 5, seed=3)
    assert sorted(np.concatenate(folds).tolist()) == list(range(80))
    sizes = [len(f) for f in folds]
    assert max(sizes) - min(sizes) <= 1
    for c in range(3):
        counts = [int((y[f] == c).sum()) for f in folds]
        assert max(counts) - min(counts) <= 1
    again = stratified_folds(y, 5, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(folds, again, strict=True))
    assert not all(
        np.array_equal(a, b) for a, b in zip(folds, stratified_folds(y, 5, 4), strict=True)
    )


def test_random_folds_cover_every_row_once_in_near_equal_seeded_folds():
    folds = random_folds(103, 5, seed=3)
    assert sorted(np.concatenate(folds).tolist()) == list(range(103))
    assert {len(f) for f in folds} == {20, 21}
    assert all(np.array_equal(a, b) for a, b in zip(folds, random_folds(103, 5, 3)))
    assert not all(np.array_equal(a, b) for a, b in zip(folds, random_folds(103, 5, 4)))
    assert len(random_folds(3, 5, 0)) == 3
