"""smECE against relplot (``relplot.smECE`` / ``relplot.smECE_sigma``)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.smooth import random_logits

from selfcal.metrics.smooth import smooth_ece
from selfcal.predictions import Predictions


def _relplot_cases():
    rng = np.random.default_rng(123)
    cases = []
    for k in range(52):
        kind = k % 4
        n = int(rng.integers(10, 600))
        if kind == 0:  # binary, positive-class probabilities
            cases.append((rng.uniform(size=n), rng.integers(0, 2, n), "probs"))
        elif kind == 1:  # C = 100
            z, y = random_logits(rng, n, 100)
            cases.append((z, y, "logits"))
        elif kind == 2:  # ties: probabilities on a coarse lattice
            z, y = random_logits(rng, n, 4)
            p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
            p = np.round(p, 1) + 1e-3
            cases.append((p / p.sum(1, keepdims=True), y, "probs"))
        else:  # many confidences exactly 1
            z, y = random_logits(rng, n, 5)
            p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
            onehot = rng.uniform(size=n) < 0.5
            p[onehot] = np.eye(5)[p[onehot].argmax(1)]
            cases.append((p, y, "probs"))
    return cases


@pytest.mark.reference
def test_smooth_ece_matches_relplot():
    relplot = pytest.importorskip("relplot")
    for scores, y, kind in _relplot_cases():
        pred = Predictions._build(scores, kind, y)
        want = relplot.smECE(pred.confidence.numpy(), pred.correct.numpy())
        got = float(smooth_ece.core(pred))
        assert got == pytest.approx(want, abs=1e-6)
        fixed = relplot.smECE_sigma(pred.confidence.numpy(), pred.correct.numpy(), 0.07)
        assert float(smooth_ece.core(pred, bandwidth=0.07)) == pytest.approx(fixed, abs=1e-6)


def test_rejects_a_nonpositive_bandwidth():
    z, y = np.array([[2.0, 0.0], [3.0, 0.0], [1.0, 0.0]]), [0, 0, 1]
    for bad in (0.0, -0.1):
        with pytest.raises(ValueError, match="bandwidth"):
            smooth_ece(logits=z, labels=y, bandwidth=bad)


@pytest.mark.parametrize("temperature", [1.0, 3.0], ids=["calibrated", "overconfident"])
def test_kept_spectra_change_no_bit_of_the_bandwidth_search(monkeypatch, temperature):
    """The search keeps the spectra of a grid every row needs instead of transforming the
    rows again at each of its steps: bit for bit the values of transforming each time (cache
    budget 0), for bootstrap rows whose bandwidths fall below 0.01 (larger, per-row grids)
    as well as above."""
    import torch

    from selfcal.metrics.smooth import smece

    rng = np.random.default_rng(7)
    n = 20_000
    z = rng.normal(size=(n, 5)) * 3
    p = np.exp(z / temperature) / np.exp(z / temperature).sum(1, keepdims=True)
    y = (rng.uniform(size=(n, 1)) > p.cumsum(1)).sum(1)  # drawn from softmax(z / T)
    pred = Predictions.from_logits(z, y)
    weights = torch.as_tensor(rng.multinomial(n, np.full(n, 1 / n), size=20)).double()
    kept = smooth_ece.core(pred, weights)
    monkeypatch.setattr(smece, "SMECE_SPECTRUM_CACHE_BYTES", 0)
    assert torch.equal(smooth_ece.core(pred, weights), kept)
    if temperature == 1.0:
        assert float(kept.min()) < 0.01  # some rows searched below relplot's smallest grid
