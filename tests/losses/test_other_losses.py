"""Brier, MMCE_w, label smoothing and mixup against independent computations, and the focal
gradient factor g(p, gamma) against autograd."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
import torch
import torch.nn.functional as F
from helpers.losses import as_torch, brier_np, ce_np, make_batch, softmax_np

from selfcal.losses import (
    BrierLoss,
    LabelSmoothingLoss,
    MMCELoss,
    brier_loss,
    focal_gradient_factor,
    focal_loss,
    label_smoothing_loss,
    mixup_batch,
    mixup_loss,
    mmce_loss,
    mmce_weighted,
    sample_mixup_lambda,
)

# ----------------------------------------------------------------------------------- Brier


@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
def test_brier_equals_formula(reduction):
    z, y = make_batch(20)
    logits, labels = as_torch(z, y)
    expected = {"sum": np.sum, "mean": np.mean, "none": lambda v: v}[reduction](brier_np(z, y))
    np.testing.assert_allclose(
        BrierLoss(reduction=reduction)(logits, labels).detach().numpy(), expected, rtol=1e-12
    )


def test_brier_gradient_equals_autograd_of_formula():
    z, y = make_batch(21)
    logits, labels = as_torch(z, y)
    (ours,) = torch.autograd.grad(brier_loss(logits, labels, reduction="sum"), logits)
    formula = ((torch.softmax(logits, 1) - F.one_hot(labels, 5)) ** 2).sum()
    (expected,) = torch.autograd.grad(formula, logits)
    torch.testing.assert_close(ours, expected, rtol=1e-10, atol=1e-14)


# ------------------------------------------------------------------------------------ MMCE


def logits_with_confidences(confidences, n_classes=3):
    """Logits whose softmax is [r, (1-r)/2, (1-r)/2] per row (top class 0 for r > 1/3)."""
    r = np.asarray(confidences, dtype=float)
    probs = np.column_stack([r] + [(1 - r) / (n_classes - 1)] * (n_classes - 1))
    return np.log(probs)


def mmce_by_pairs(r, correct, normalization, width=0.4):
    """MMCE_w by explicit double loops over the two groups (Kumar et al. 2018 and methods §3)."""
    r_c = [ri for ri, ci in zip(r, correct) if ci]
    r_i = [ri for ri, ci in zip(r, correct) if not ci]
    m, n = len(r_c), len(r_i)
    if m == 0 or n == 0:
        return 0.0

    def k(a, b):
        return np.exp(-abs(a - b) / width)

    s_cc = sum((1 - a) * (1 - b) * k(a, b) for a in r_c for b in r_c)
    s_ii = sum(a * b * k(a, b) for a in r_i for b in r_i)
    s_ci = sum((1 - a) * b * k(a, b) for a in r_c for b in r_i)
    if normalization == "textbook":
        mmd2 = s_cc / m**2 + s_ii / n**2 - 2 * s_ci / (m * n)
    else:  # mean over each pair matrix, then divided again by (count + 1e-5)
        mmd2 = (
            (s_cc / m**2) / (m**2 + 1e-5)
            + (s_ii / n**2) / (n**2 + 1e-5)
            - 2 * (s_ci / (m * n)) / (m * n + 1e-5)
        )
    return float(np.sqrt(mmd2 + 1e-10))


HAND_BATCH = ([0.9, 0.6, 0.7, 0.5, 0.95], [0, 0, 1, 2, 0])  # confidences; predicted class 0


def test_mmce_on_hand_computed_batch():
    """Three correct (r = 0.9, 0.6, 0.95) and two incorrect (r = 0.7, 0.5) samples."""
    r, labels = HAND_BATCH
    logits = torch.tensor(logits_with_confidences(r))
    y = torch.tensor(labels)
    correct = [lab == 0 for lab in labels]
    for normalization in ("reference", "textbook"):
        got = mmce_weighted(logits, y, normalization=normalization).item()
        assert got == pytest.approx(mmce_by_pairs(r, correct, normalization), rel=1e-10)
    reference = mmce_weighted(logits, y).item()
    textbook = mmce_weighted(logits, y, normalization="textbook").item()
    assert abs(reference - textbook) > 0.1  # the two normalisations really differ here


def test_mmce_hand_value_for_one_correct_and_one_incorrect():
    """m = n = 1: textbook MMD^2 = (1-a)^2 + b^2 - 2 (1-a) b exp(-|a-b|/0.4)."""
    a, b = 0.8, 0.6
    logits = torch.tensor(logits_with_confidences([a, b]))
    y = torch.tensor([0, 1])
    mmd2 = (1 - a) ** 2 + b**2 - 2 * (1 - a) * b * np.exp(-0.2 / 0.4)
    textbook = mmce_weighted(logits, y, normalization="textbook").item()
    assert textbook == pytest.approx(np.sqrt(mmd2 + 1e-10), rel=1e-12)
    reference = mmce_weighted(logits, y).item()
    assert reference == pytest.approx(np.sqrt(mmd2 / (1 + 1e-5) + 1e-10), rel=1e-12)


@pytest.mark.parametrize("labels", [[0, 0, 0], [1, 2, 1]], ids=["all-correct", "all-wrong"])
def test_mmce_is_zero_when_a_group_is_empty(labels):
    logits, y = (
        torch.tensor(logits_with_confidences([0.9, 0.6, 0.5]), requires_grad=True),
        torch.tensor(labels),
    )
    assert mmce_weighted(logits, y).item() == 0.0
    total = mmce_loss(logits, y)
    ce_mean = F.cross_entropy(logits, y)
    torch.testing.assert_close(total, ce_mean)
    torch.testing.assert_close(
        torch.autograd.grad(total, logits)[0], torch.autograd.grad(ce_mean, logits)[0]
    )
    torch.testing.assert_close(mmce_loss(logits, y, reduction="sum"), 3 * ce_mean)


@pytest.mark.parametrize("normalization", ["reference", "textbook"])
def test_mmce_loss_total_and_gradient(normalization):
    z, y = make_batch(22, n=16)
    logits, labels = as_torch(z, y)
    p = softmax_np(z)
    r, correct = p.max(1), p.argmax(1) == y
    mmce = mmce_by_pairs(r, correct, normalization)
    expected_mean = ce_np(z, y).mean() + 2.0 * mmce
    loss = MMCELoss(normalization=normalization, reduction="sum")  # the reference loop's
    assert loss(logits, labels).item() == pytest.approx(16 * expected_mean, rel=1e-10)
    mean = mmce_loss(logits, labels, normalization=normalization)  # the default
    assert mean.item() == pytest.approx(expected_mean, rel=1e-10)
    # gradient: autograd of an independent torch pair-loop implementation
    (ours,) = torch.autograd.grad(loss(logits, labels), logits)
    (expected,) = torch.autograd.grad(16 * torch_mmce_total(logits, labels, normalization), logits)
    torch.testing.assert_close(ours, expected, rtol=1e-9, atol=1e-12)


def torch_mmce_total(logits, labels, normalization, lam=2.0, width=0.4):
    probs = torch.softmax(logits, 1)
    r, pred = probs.max(1)
    idx_c = [i for i in range(len(labels)) if pred[i] == labels[i]]
    idx_i = [i for i in range(len(labels)) if pred[i] != labels[i]]
    m, n = len(idx_c), len(idx_i)

    def pair_sum(rows, cols, wa, wb):
        return sum(
            wa(r[a]) * wb(r[b]) * torch.exp(-(r[a] - r[b]).abs() / width)
            for a in rows
            for b in cols
        )

    s_cc = pair_sum(idx_c, idx_c, lambda v: 1 - v, lambda v: 1 - v)
    s_ii = pair_sum(idx_i, idx_i, lambda v: v, lambda v: v)
    s_ci = pair_sum(idx_c, idx_i, lambda v: 1 - v, lambda v: v)
    if normalization == "textbook":
        mmd2 = s_cc / m**2 + s_ii / n**2 - 2 * s_ci / (m * n)
    else:
        mmd2 = (
            s_cc / m**2 / (m**2 + 1e-5)
            + s_ii / n**2 / (n**2 + 1e-5)
            - 2 * s_ci / (m * n) / (m * n + 1e-5)
        )
    return F.cross_entropy(logits, labels) + lam * torch.sqrt(mmd2 + 1e-10)


def test_mmce_rejects_bad_arguments():
    logits, y = torch.randn(4, 3), torch.tensor([0, 1, 2, 0])
    with pytest.raises(ValueError, match="batch statistic"):
        mmce_loss(logits, y, reduction="none")
    with pytest.raises(ValueError, match="normalization"):
        MMCELoss(normalization="kumar")
    with pytest.raises(ValueError, match="width"):
        mmce_weighted(logits, y, width=0.0)
    with pytest.raises(ValueError, match="lam"):
        MMCELoss(lam=-1.0)


# ------------------------------------------------------------------------- label smoothing


@pytest.mark.parametrize("eps", [0.0, 0.05, 0.1, 0.5])
def test_label_smoothing_equals_soft_target_cross_entropy(eps):
    z, y = make_batch(23)
    logits, labels = as_torch(z, y)
    c = z.shape[1]
    targets = (1 - eps) * np.eye(c)[y] + eps / c
    soft_ce = -(targets * np.log(softmax_np(z))).sum(axis=1)
    np.testing.assert_allclose(
        label_smoothing_loss(logits, labels, eps, reduction="none").detach().numpy(),
        soft_ce,
        rtol=1e-12,
    )
    torch.testing.assert_close(
        LabelSmoothingLoss(eps)(logits, labels),
        F.cross_entropy(logits, labels, label_smoothing=eps),
    )
    (ours,) = torch.autograd.grad(LabelSmoothingLoss(eps, reduction="sum")(logits, labels), logits)
    soft = torch.tensor(targets)
    (expected,) = torch.autograd.grad(-(soft * torch.log_softmax(logits, 1)).sum(), logits)
    torch.testing.assert_close(ours, expected, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("eps", [-0.1, 1.0, float("nan"), "0.1"])
def test_label_smoothing_rejects_bad_eps(eps):
    with pytest.raises(ValueError, match="eps"):
        LabelSmoothingLoss(eps)


# ------------------------------------------------------------------------------------ mixup


def test_mixup_with_lambda_one_is_identity():
    x, y = torch.randn(8, 3), torch.arange(8)
    x_mixed, y_a, y_b, lam = mixup_batch(x, y, alpha=0.0, generator=torch.Generator())
    assert lam == 1.0 and torch.equal(x_mixed, x) and torch.equal(y_a, y)
    logits = torch.randn(8, 8)
    assert torch.equal(
        mixup_loss(F.cross_entropy, logits, y_a, y_b, lam), F.cross_entropy(logits, y)
    )


def test_mixup_batch_mixes_pairs_and_is_seeded():
    x, y = torch.randn(10, 4, dtype=torch.float64), torch.arange(10)
    first = mixup_batch(x, y, 1.0, torch.Generator().manual_seed(3))
    second = mixup_batch(x, y, 1.0, torch.Generator().manual_seed(3))
    x_mixed, y_a, y_b, lam = first
    assert torch.equal(x_mixed, second[0]) and lam == second[3] and 0 < lam < 1
    assert sorted(y_b.tolist()) == list(range(10))  # a permutation of the batch
    torch.testing.assert_close(x_mixed, lam * x + (1 - lam) * x[y_b])  # labels = row indices


def test_mixup_loss_is_the_convex_combination():
    logits, y_a, y_b = torch.randn(6, 4), torch.tensor([0, 1, 2, 3, 0, 1]), torch.arange(6) % 4
    expected = 0.3 * F.cross_entropy(logits, y_a) + 0.7 * F.cross_entropy(logits, y_b)
    torch.testing.assert_close(mixup_loss(F.cross_entropy, logits, y_a, y_b, 0.3), expected)
    with pytest.raises(ValueError, match="lam"):
        mixup_loss(F.cross_entropy, logits, y_a, y_b, 1.5)


@pytest.mark.parametrize("alpha", [0.2, 1.0, 2.0])
def test_mixup_lambda_follows_beta_alpha_alpha(alpha):
    gen = torch.Generator().manual_seed(0)
    draws = [sample_mixup_lambda(alpha, gen) for _ in range(2000)]
    assert scipy.stats.kstest(draws, scipy.stats.beta(alpha, alpha).cdf).pvalue > 1e-3


def test_mixup_rejects_bad_input():
    with pytest.raises(ValueError, match="alpha"):
        mixup_batch(torch.randn(3, 2), torch.arange(3), -1.0)
    with pytest.raises(ValueError, match="same N"):
        mixup_batch(torch.randn(3, 2), torch.arange(4), 1.0)
    with pytest.raises(ValueError, match="floating"):
        mixup_batch(torch.ones(3, 2, dtype=torch.long), torch.arange(3), 1.0)


# ------------------------------------------------------------------ focal gradient factor


@pytest.mark.parametrize("gamma", [0.0, 1.0, 2.0, 3.0, 5.0])
def test_focal_gradient_factor_matches_autograd(gamma):
    """dFL/dz = g(p_y, gamma) * dCE/dz per sample ([GRA] §4.1)."""
    z, y = make_batch(24)
    logits, labels = as_torch(z, y)
    (fl_grad,) = torch.autograd.grad(focal_loss(logits, labels, gamma, reduction="sum"), logits)
    (ce_grad,) = torch.autograd.grad(F.cross_entropy(logits, labels, reduction="sum"), logits)
    p_y = torch.softmax(logits.detach(), 1)[torch.arange(len(y)), labels]
    g = focal_gradient_factor(p_y, gamma)
    torch.testing.assert_close(fl_grad, g[:, None] * ce_grad, rtol=1e-9, atol=1e-13)


def test_focal_gradient_factor_limits_and_shape():
    assert focal_gradient_factor([0.0, 1.0], 3.0).tolist() == [1.0, 0.0]
    assert focal_gradient_factor(1.0, 0.0).item() == 1.0
    assert focal_gradient_factor(1.0, 0.5).item() == 0.0
    g = focal_gradient_factor(np.array([0.01, 0.2, 0.9]), 3.0)
    assert g[1] > g[0] and g[1] > g[2]  # rises, then falls ([GRA] Fig. 1)
    p = 0.3
    closed = (1 - p) ** 2 - 2 * p * (1 - p) * np.log(p)
    assert focal_gradient_factor(p, 2.0).item() == pytest.approx(closed, rel=1e-14)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        focal_gradient_factor([1.5], 2.0)
    with pytest.raises(ValueError, match="gamma"):
        focal_gradient_factor([0.5], -1.0)
