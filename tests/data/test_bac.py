"""BAC: the Widmark formula on hand-computed cases, the labels, encoding and positive rate."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.data import all_labels, all_raw, cached

from selfcal.data import load_dataset
from selfcal.data.bac import FEATURE_NAMES, LEGAL_LIMIT, sample_drinkers, widmark_bac


@pytest.mark.parametrize(
    "gender, weight, drinks, meal, minutes, expected",
    [
        # female, 60 kg, 3 drinks, no meal, 1 h: 3*11/(0.55*60) - 0.14 = 1 - 0.14
        (1, 60.0, 3, 0, 60, 0.86),
        # male, 70 kg, 5 drinks, full meal, 2 h: 0.94*55/(0.65*70) - 0.28 = 51.7/45.5 - 0.28
        (0, 70.0, 5, 2, 120, 51.7 / 45.5 - 0.28),
        # male, 80 kg, 2 drinks, snack, 30 min: 0.98*22/52 - 0.07
        (0, 80.0, 2, 1, 30, 0.98 * 22 / 52 - 0.07),
        # eliminated: 1 drink, 115 kg man after 4 h -> clipped at 0
        (0, 115.0, 1, 0, 240, 0.0),
    ],
)
def test_widmark_hand_computed(gender, weight, drinks, meal, minutes, expected):
    assert widmark_bac(gender, weight, drinks, meal, minutes) == pytest.approx(expected, abs=1e-12)


def _decode(raw: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "gender": raw[:, 0].astype(int),
        "weight_kg": raw[:, 1],
        "drinks": raw[:, 2].astype(int),
        "duration_min": raw[:, 3],
        "meal": raw[:, 4:7].argmax(1),
    }


def test_labels_are_thresholded_widmark_of_raw_features():
    data = cached("bac")
    raw = all_raw(data).numpy()
    people = _decode(raw)
    expected = widmark_bac(**people) >= LEGAL_LIMIT
    np.testing.assert_array_equal(all_labels(data).numpy(), expected.astype(np.int64))
    assert data.feature_names == FEATURE_NAMES
    assert set(np.unique(raw[:, 0])) == {0.0, 1.0}
    np.testing.assert_array_equal(raw[:, 4:7].sum(1), 1.0)
    assert set(np.unique(people["duration_min"])) == set(range(30, 241, 30))
    assert people["drinks"].min() == 1 and people["drinks"].max() == 14
    assert 45 <= people["weight_kg"].min() and people["weight_kg"].max() <= 115


def test_encoding_standardises_numeric_columns_only():
    data = cached("bac")
    codes = [0, 4, 5, 6]
    assert data.mean[codes].tolist() == [0.0] * 4 and data.std[codes].tolist() == [1.0] * 4
    assert torch.equal(data.train.x[:, codes], data.raw("train")[:, codes].float())
    assert (data.mean[1:4] > 0).all()


@pytest.mark.parametrize("max_drinks, band", [(14, (0.66, 0.70)), (10, (0.53, 0.57))])
def test_positive_rate_in_spec_range(max_drinks, band):
    # methods §8.3: about 68 % positive with 1-14 drinks, 55 % with 1-10
    people = sample_drinkers(100_000, np.random.default_rng(2), max_drinks)
    rate = (widmark_bac(**people) >= LEGAL_LIMIT).mean()
    assert band[0] <= rate <= band[1]
    data = load_dataset("bac", 5, max_drinks=max_drinks)
    assert abs(all_labels(data).double().mean().item() - rate) < 0.04
