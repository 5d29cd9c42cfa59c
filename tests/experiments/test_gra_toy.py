"""[GRA] toy study: the data and ground truth, determinism, and one real (fast) run."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch

from selfcal.experiments.gra_toy import (
    GRA_TOY_PUBLISHED,
    GraToyConfig,
    make_gra_toy_data,
    pearson,
    run_gra_toy,
    true_posterior,
)


def test_data_follow_the_protocol():
    data = make_gra_toy_data(3)
    assert data.x_train.shape == (50_000, 2) and data.x_test.shape == (5_000, 2)
    assert torch.bincount(data.y_train).tolist() == [10_000] * 5
    assert torch.bincount(data.y_test).tolist() == [1_000] * 5
    assert bool((data.means.abs() <= 10).all())
    for k in range(5):  # each class is N(mu_k, I)
        points = data.x_train[data.y_train == k].double()
        torch.testing.assert_close(points.mean(0), data.means[k], atol=0.05, rtol=0)
        torch.testing.assert_close(torch.cov(points.T), torch.eye(2, dtype=torch.float64),
                                   atol=0.05, rtol=0)


def test_true_posterior_is_bayes_rule_with_gaussian_densities():
    means = torch.tensor([[0.0, 0.0], [1.0, 2.0], [-3.0, 0.5]], dtype=torch.float64)
    x = torch.tensor([[0.5, 1.0], [-2.0, 0.0]])
    dens = np.stack([np.exp(-0.5 * ((x.double().numpy() - m) ** 2).sum(1)) / (2 * np.pi)
                     for m in means.numpy()], axis=1)
    np.testing.assert_allclose(true_posterior(x, means).numpy(),
                               dens / dens.sum(1, keepdims=True), rtol=1e-12)


def test_pearson_matches_numpy_and_flags_constants():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=100), rng.normal(size=100)
    assert pearson(a, 0.3 * a + b) == pytest.approx(np.corrcoef(a, 0.3 * a + b)[0, 1], rel=1e-12)
    assert math.isnan(pearson(a, np.ones(100)))


def test_one_run_is_fast_deterministic_and_sane():
    start = time.perf_counter()
    first = run_gra_toy(0)
    assert time.perf_counter() - start < 5.0
    assert first == run_gra_toy(0)
    assert first != run_gra_toy(1)
    for key in GRA_TOY_PUBLISHED:
        assert -1.0 <= first[key] <= 1.0 and -1.0 <= first[key.replace("_", "_abs_", 1)] <= 1.0
    assert first["test_accuracy"] > 0.9  # the standardised setup trains a usable model
    assert 0 <= first["abs_calibration_error"] <= 1


def test_config_is_validated():
    with pytest.raises(ValueError):
        GraToyConfig(n_classes=1)
    with pytest.raises(ValueError):
        GraToyConfig(batch_size=0)
    with pytest.raises(ValueError, match="seed"):
        run_gra_toy(-1)
