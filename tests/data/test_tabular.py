"""scikit-learn's bundled sets: the raw rows and labels are exactly sklearn's, reshuffled."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.data import all_labels, all_raw, cached
from sklearn import datasets

from selfcal.data import load_dataset

LOADERS = {"breast-cancer": "load_breast_cancer", "wine": "load_wine", "digits": "load_digits"}


def _rows_with_labels(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    table = np.column_stack([x, y])
    return table[np.lexsort(table.T[::-1])]


@pytest.mark.parametrize("name", LOADERS)
def test_rows_and_labels_are_sklearns(name):
    bunch = getattr(datasets, LOADERS[name])()
    data = cached(name)
    ours = _rows_with_labels(all_raw(data).numpy(), all_labels(data).numpy())
    np.testing.assert_array_equal(ours, _rows_with_labels(bunch.data, bunch.target))
    assert data.feature_names == tuple(bunch.feature_names)


def test_digits_constant_pixels_only_centred():
    data = cached("digits")
    constant = data.raw("train").std(0) == 0
    assert constant.any()
    assert (data.std[constant] == 1).all()
    assert (data.train.x[:, constant] == 0).all()


def test_fractions_option():
    data = load_dataset("wine", 0, fractions=(0.5, 0.25, 0.25))
    assert (len(data.train), len(data.val), len(data.test)) == (89, 44, 45)
