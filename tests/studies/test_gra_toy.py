"""[GRA] toy study: the data and ground truth, and one real (fast) run's candidates."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from selfcal.experiments import RunSpec
from selfcal.studies.gra_toy.execute import execute, make_toy_data, pearson, true_posterior
from selfcal.studies.gra_toy.protocol import FULL, GraToyProtocol


def test_data_follow_the_protocol():
    data = make_toy_data(3, FULL)
    assert data.x["train"].shape == (50_000, 2) and data.x["test"].shape == (5_000, 2)
    assert torch.bincount(data.y["train"]).tolist() == [10_000] * 5
    assert torch.bincount(data.y["val"]).tolist() == [1_000] * 5
    assert bool((data.means.abs() <= 10).all())
    for k in range(5):  # each class is N(mu_k, I)
        points = data.x["train"][data.y["train"] == k].double()
        torch.testing.assert_close(points.mean(0), data.means[k], atol=0.05, rtol=0)
        torch.testing.assert_close(
            torch.cov(points.T), torch.eye(2, dtype=torch.float64), atol=0.05, rtol=0
        )


def test_true_posterior_is_bayes_rule_with_gaussian_densities():
    means = torch.tensor([[0.0, 0.0], [1.0, 2.0], [-3.0, 0.5]], dtype=torch.float64)
    x = torch.tensor([[0.5, 1.0], [-2.0, 0.0]])
    dens = np.stack(
        [
            np.exp(-0.5 * ((x.double().numpy() - m) ** 2).sum(1)) / (2 * np.pi)
            for m in means.numpy()
        ],
        axis=1,
    )
    np.testing.assert_allclose(
        true_posterior(x, means).numpy(), dens / dens.sum(1, keepdims=True), rtol=1e-12
    )


def test_pearson_matches_numpy_and_flags_constants():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=100), rng.normal(size=100)
    assert pearson(a, 0.3 * a + b) == pytest.approx(np.corrcoef(a, 0.3 * a + b)[0, 1], rel=1e-12)
    assert math.isnan(pearson(a, np.ones(100)))


def test_one_seed_serves_every_candidate_deterministically():
    group = [
        RunSpec("gra-toy", "gaussians-5x2d", m, 0, {"hp.gamma": g})
        for m in ("fl", "dfl", "gbs")
        for g in (1.0, 2.0)
    ]
    first, again = execute(FULL, group), execute(FULL, group)
    assert [r.metrics for r in first] == [r.metrics for r in again]
    for result in first:
        m = result.metrics
        assert -1 <= m["pearson"] <= 1 and -1 <= m["val_pearson"] <= 1
        assert m["test_accuracy"] > 0.9  # the standardised setup trains a usable model
    shared = {k: first[0].metrics[k] for k in ("test_accuracy", "calibration_error")}
    assert all({k: r.metrics[k] for k in shared} == shared for r in first)


def test_protocol_is_validated():
    with pytest.raises(ValueError):
        GraToyProtocol("x", n_classes=1)
    with pytest.raises(ValueError):
        GraToyProtocol("x", batch_size=0)
