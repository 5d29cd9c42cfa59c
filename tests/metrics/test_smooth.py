"""Smooth calibration errors: SECE, DECE, KDE-ECE, smECE."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.signal
import torch

from selfcal.metrics.smooth import (
    dece,
    kde_ece,
    sece,
    smooth_ece,
    soft_accuracy,
    soft_bin_membership,
)
from selfcal.predictions import Predictions

METRICS = [sece, dece, kde_ece, smooth_ece]


def random_logits(rng, n, c, scale=None):
    scale = rng.uniform(0.3, 4.0) if scale is None else scale
    return rng.normal(size=(n, c)) * scale, rng.integers(0, c, n)


# ------------------------------------------------------------ loop-based spec transcriptions
def spec_soft_accuracy(p, y, t_a):
    out = []
    for i in range(len(y)):
        rank = 0.5
        for ell in range(p.shape[1]):
            rank += 1.0 / (1.0 + math.exp(-t_a * (p[i, ell] - p[i, y[i]])))
        out.append(max(0.0, 2.0 - rank))
    return out


def spec_sece(p, y, h=0.01, t_a=100.0):
    z = p.max(1)
    pi = spec_soft_accuracy(p, y, t_a)
    total = 0.0
    for i in range(len(z)):
        num = den = 0.0
        for j in range(len(z)):
            k = math.exp(-((z[i] - z[j]) ** 2) / (2 * h * h))
            num += pi[j] * k
            den += k
        total += abs(num / den - z[i])
    return total / len(z)


def spec_dece(p, y, m_bins=15, t_a=100.0, t_b=0.01, eps=1e-6):
    c = p.max(1)
    a = spec_soft_accuracy(p, y, t_a)
    n = len(c)
    cum, b = 0.0, []
    for m in range(m_bins):  # b = cumsum(-[0, 1/M, ..., (M-1)/M])
        cum -= m / m_bins
        b.append(cum)
    o = np.zeros((n, m_bins))
    for i in range(n):
        logits = [((m + 1) * c[i] + b[m]) / t_b for m in range(m_bins)]
        top = max(logits)
        e = [math.exp(v - top) for v in logits]
        for m in range(m_bins):
            o[i, m] = (e[m] / sum(e) + eps) / (1 + (m_bins + 1) * eps)
    total = 0.0
    for m in range(m_bins):
        mass = sum(o[i, m] for i in range(n))
        conf = sum(o[i, m] * c[i] for i in range(n)) / mass
        acc = sum(o[i, m] * a[i] for i in range(n)) / mass
        total += mass / n * abs(acc - conf)
    return total


def zhang_kde_ece(p, y, order=1):
    """numpy/scipy transcription of Zhang et al.'s ``ece_kde_binary`` (top-label) with
    KDEpy FFTKDE's evaluation (linear binning + convolution, unit-variance triweight)."""
    conf, correct = p.max(1), (p.argmax(1) == y).astype(float)
    x_int = np.linspace(-0.6, 1.6, num=2**14)
    n = len(conf)
    bw = np.std(conf[correct == 1]) * (n * 2) ** -0.2

    def mirror(d):
        return np.concatenate([-d[d < 0.5], d, 2 - d[d >= 0.5]])

    def fftkde(data):
        dx = (x_int.max() - x_int.min()) / (len(x_int) - 1)
        binned = np.zeros(len(x_int))
        for v in data:
            t = (v - x_int[0]) / dx
            k = int(np.floor(t))
            binned[k] += (1 - (t - k)) / len(data)
            binned[k + 1] += (t - k) / len(data)
        half = int(np.floor(3 * bw / dx))
        u = np.linspace(-dx * half, dx * half, 2 * half + 1) / (3 * bw)
        kern = np.where(u**2 < 1, (1 - u**2) ** 3, 0.0) * 35 / 32 / (3 * bw)
        dens = scipy.signal.convolve(binned, kern, mode="same")
        dens[x_int <= 0] = 0
        dens[x_int >= 1] = 0
        return dens * 2

    pp1, pp2 = fftkde(mirror(conf[correct == 1])), fftkde(mirror(conf))
    perc = correct.mean()
    integral = np.zeros(len(x_int))
    for i, x in enumerate(x_int):
        if max(pp1[i], pp2[i]) > 1e-6:
            accu = min(perc * pp1[i] / pp2[i], 1.0) if pp2[i] > 0 else 1.0
            integral[i] = abs(x - accu) ** order * pp2[i]
        elif i > 1:
            integral[i] = integral[i - 1]
    ind = (x_int >= 0) & (x_int <= 1)
    return np.trapezoid(integral[ind], x_int[ind]) / np.trapezoid(pp2[ind], x_int[ind])


# ------------------------------------------------------------------------ building blocks
def test_soft_accuracy_matches_spec_loop():
    rng = np.random.default_rng(0)
    z, y = random_logits(rng, 30, 5)
    p = torch.softmax(torch.from_numpy(z), 1)
    got = soft_accuracy(p, torch.from_numpy(y)).numpy()
    np.testing.assert_allclose(got, spec_soft_accuracy(p.numpy(), y, 100.0), rtol=0, atol=1e-12)


def test_soft_bin_membership_rows_and_boundaries():
    c = torch.tensor([0.05, 0.5, 0.99], dtype=torch.float64)
    o = soft_bin_membership(c, 15, 0.01)
    m, eps = 15, 1e-6
    expected_row_sum = (1 + m * eps) / (1 + (m + 1) * eps)  # the documented quirk
    np.testing.assert_allclose(o.sum(1).numpy(), expected_row_sum, rtol=0, atol=1e-12)
    assert o.argmax(1).tolist() == [0, 7, 14]


# ------------------------------------------------------------ SECE / DECE vs transcriptions
@pytest.mark.parametrize("seed", range(4))
def test_sece_matches_spec_loop(seed):
    rng = np.random.default_rng(seed)
    z, y = random_logits(rng, 25, [2, 4, 10, 3][seed])
    pred = Predictions.from_logits(z, y)
    got = float(sece.core(pred, bandwidth=0.05))
    assert got == pytest.approx(spec_sece(pred.probs.numpy(), y, h=0.05), abs=1e-12)
    got = float(sece.core(pred))
    assert got == pytest.approx(spec_sece(pred.probs.numpy(), y), abs=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_dece_matches_spec_loop(seed):
    rng = np.random.default_rng(seed)
    z, y = random_logits(rng, 25, [2, 4, 10, 3][seed])
    pred = Predictions.from_logits(z, y)
    assert float(dece.core(pred)) == pytest.approx(spec_dece(pred.probs.numpy(), y), abs=1e-12)
    got = float(dece.core(pred, n_bins=7, t_a=20.0, t_b=0.05))
    want = spec_dece(pred.probs.numpy(), y, 7, 20.0, 0.05)
    assert got == pytest.approx(want, abs=1e-12)


def test_sece_grid_path_agrees_with_exact_path():
    rng = np.random.default_rng(5)
    for c, scale in [(10, 3.0), (2, 1.0), (100, 6.0)]:
        z, y = random_logits(rng, 3000, c, scale)
        pred = Predictions.from_logits(z, y)
        exact = float(sece.core(pred, method="exact"))
        grid = float(sece.core(pred, method="grid"))
        assert abs(exact - grid) < 1e-5, (exact, grid)
        w = torch.from_numpy(rng.integers(0, 3, (3, 3000))).double()
        np.testing.assert_allclose(
            sece.core(pred, w, method="grid").numpy(),
            sece.core(pred, w, method="exact").numpy(),
            rtol=0,
            atol=1e-5,
        )


# ------------------------------------------------------------------ KDE-ECE vs Zhang et al.
@pytest.mark.reference
@pytest.mark.parametrize("seed", range(3))
def test_kde_ece_matches_zhang_procedure(seed):
    rng = np.random.default_rng(10 + seed)
    z, y = random_logits(rng, [400, 150, 800][seed], [10, 2, 5][seed])
    pred = Predictions.from_logits(z, y)
    want = zhang_kde_ece(pred.probs.numpy(), y)
    assert float(kde_ece.core(pred)) == pytest.approx(want, abs=1e-9)


# ------------------------------------------------------------------------ smECE vs relplot
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


# --------------------------------------------------------------------------- properties
@pytest.mark.parametrize("f", METRICS, ids=lambda f: f.__name__)
def test_properties_range_permutation_numpy_torch(f):
    rng = np.random.default_rng(7)
    for c in (2, 10):
        z, y = random_logits(rng, 500, c)
        value = f(logits=z, labels=y)
        assert isinstance(value, float) and 0.0 <= value <= 1.0
        perm = rng.permutation(500)
        assert f(logits=z[perm], labels=y[perm]) == pytest.approx(value, abs=1e-9)
        torch_value = f(logits=torch.from_numpy(z), labels=torch.from_numpy(y))
        assert isinstance(torch_value, torch.Tensor) and torch_value.dtype == torch.float64
        assert float(torch_value) == pytest.approx(value, abs=1e-12)


@pytest.mark.parametrize("f", METRICS, ids=lambda f: f.__name__)
def test_bootstrap_weights_equal_repeated_rows(f):
    rng = np.random.default_rng(8)
    z, y = random_logits(rng, 120, 6)
    pred = Predictions.from_logits(z, y)
    weights = torch.from_numpy(rng.integers(0, 4, (4, 120))).double()
    batched = f.core(pred, weights)
    assert batched.shape == (4,)
    for b in range(4):
        rows = torch.repeat_interleave(torch.arange(120), weights[b].long())
        direct = f.core(pred.subset(rows))
        assert float(batched[b]) == pytest.approx(float(direct), abs=1e-9)


def _grad_inputs(n=7, c=3, seed=0):
    rng = np.random.default_rng(seed)
    z, y = random_logits(rng, n, c, 2.0)
    return torch.from_numpy(z).requires_grad_(True), torch.from_numpy(y)


@pytest.mark.parametrize("f", [sece, dece], ids=lambda f: f.__name__)
def test_gradcheck(f):
    z, y = _grad_inputs()
    opts = {"bandwidth": 0.1} if f is sece else {}
    assert torch.autograd.gradcheck(
        lambda s: f.core(Predictions.from_logits(s, y), **opts), (z,), atol=1e-6
    )


@pytest.mark.parametrize("f", METRICS, ids=lambda f: f.__name__)
def test_gradients_finite(f):
    z, y = _grad_inputs(n=300, c=5, seed=3)
    value = f.core(Predictions.from_logits(z, y))
    (grad,) = torch.autograd.grad(value, z)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_sece_grid_path_gradients_finite():
    z, y = _grad_inputs(n=3000, c=5, seed=4)
    value = sece.core(Predictions.from_logits(z, y), method="grid")
    (grad,) = torch.autograd.grad(value, z)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_kde_ece_needs_a_bandwidth_without_correct_predictions():
    z = np.array([[2.0, 0.0], [3.0, 0.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="bandwidth"):
        kde_ece(logits=z, labels=[1, 1, 1])
    assert 0 <= kde_ece(logits=z, labels=[1, 1, 1], bandwidth=0.05) <= 1


def test_invalid_options():
    z, y = np.zeros((4, 3)), np.zeros(4, dtype=int)
    with pytest.raises(ValueError):
        sece(logits=z, labels=y, bandwidth=0.0)
    with pytest.raises(ValueError):
        sece(logits=z, labels=y, method="fast")
    with pytest.raises(ValueError):
        dece(logits=z, labels=y, n_bins=0)
