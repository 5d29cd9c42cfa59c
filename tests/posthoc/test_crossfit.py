"""The folds of :mod:`selfcal.posthoc.crossfit`: stratified folds deal each class evenly,
random folds cover every row once, both seeded; folds that leave rows out keep only the
held-out rows' values."""

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


def test_folds_that_leave_rows_out_keep_the_held_out_rows_only_in_order():
    """Two of three folds: each candidate's kept values are those of the held-out rows, in
    row order, equal to what the full three-fold cross-validation keeps for them."""
    from selfcal import Predictions
    from selfcal.metrics.scores import nll_terms
    from selfcal.posthoc.crossfit import cross_validate, held_out_rows

    rng = np.random.default_rng(0)
    pred = Predictions.from_logits(
        torch.as_tensor(3 * rng.normal(size=(90, 4))), rng.integers(0, 4, 90)
    )
    folds = random_folds(90, 3, seed=1)
    (full,) = cross_validate(["ts"], pred, folds, None, nll_terms)
    (part,) = cross_validate(["ts"], pred, folds[1:], None, nll_terms)
    rows = held_out_rows(folds[1:])
    np.testing.assert_array_equal(rows, np.sort(np.concatenate(folds[1:])))
    assert full.kept is not None and part.kept is not None
    torch.testing.assert_close(part.kept, full.kept[torch.as_tensor(rows)], rtol=0, atol=0)
    np.testing.assert_array_equal(held_out_rows(folds), np.arange(90))
