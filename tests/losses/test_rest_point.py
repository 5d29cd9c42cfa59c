"""The population rest point of gradient-weighted CE (BSCE-GRA's under-confidence)."""

from __future__ import annotations

import pytest
import torch

from selfcal.losses import (
    BrierWeight,
    DualFocalWeight,
    FocalWeight,
    build_loss,
    gra_rest_point,
    label_weights,
)


@pytest.mark.parametrize("gamma", [0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize(
    "weight", [FocalWeight, lambda g: BrierWeight(g, 2), lambda g: BrierWeight(g, 1)]
)
def test_binary_rest_point_is_logit_eta_over_one_plus_gamma(gamma, weight):
    eta = torch.linspace(0.02, 0.98, 49, dtype=torch.float64)
    p = gra_rest_point(torch.stack([1 - eta, eta], 1), weight(gamma))[:, 1]
    expected = torch.sigmoid(torch.logit(eta) / (1 + gamma))
    torch.testing.assert_close(p, expected, rtol=0, atol=1e-10)


def test_zero_exponent_and_one_hot_labels_rest_at_eta():
    eta = torch.softmax(
        torch.randn(20, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0)), 1
    )
    torch.testing.assert_close(gra_rest_point(eta, BrierWeight(0.0, 2)), eta, rtol=0, atol=1e-12)
    one_hot = torch.eye(4, dtype=torch.float64)
    p = gra_rest_point(one_hot, BrierWeight(4.0, 2))
    assert torch.allclose(p.argmax(1), torch.arange(4)) and bool((p.amax(1) > 1 - 1e-9).all())


@pytest.mark.parametrize(
    "weight", [BrierWeight(4.0, 2), BrierWeight(1.0, 1), FocalWeight(3.0), DualFocalWeight(2.0)]
)
def test_the_expected_gra_gradient_vanishes_there(weight):
    """Independent check with the losses themselves: at p*, the eta-weighted sum over labels
    of autograd's logit gradient of the GRA loss is zero; at eta it is not."""
    gen = torch.Generator().manual_seed(1)
    eta = torch.softmax(2 * torch.randn(16, 10, dtype=torch.float64, generator=gen), 1)
    p_star = gra_rest_point(eta, weight)
    from selfcal.losses import uncertainty_weighted_ce

    def expected_gradient(p):
        z = p.log().requires_grad_(True)
        total = 0
        for k in range(10):
            labels = torch.full((16,), k)
            loss = uncertainty_weighted_ce(z, labels, weight, mode="gradient", reduction="none")
            total = total + (eta[:, k] * loss).sum()
        return torch.autograd.grad(total, z)[0]

    assert float(expected_gradient(p_star).abs().max()) < 1e-9
    assert float(expected_gradient(eta).abs().max()) > 1e-3
    # and the fixed-point equation itself
    u = label_weights(weight, p_star)
    torch.testing.assert_close(p_star, eta * u / (eta * u).sum(1, keepdim=True), rtol=0, atol=1e-10)


def test_bsce_gra_loss_is_the_brier_weight_in_gradient_mode():
    """The function's ``weight`` is the one the registered BSCE-GRA loss uses."""
    loss = build_loss("bsce-gra", gamma=4.0, norm=2)
    assert loss.weight == BrierWeight(4.0, 2) and loss.gra


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="probability vector"):
        gra_rest_point(torch.tensor([[0.5, 0.6]]), FocalWeight(1.0))
    with pytest.raises(ValueError, match="shape"):
        gra_rest_point(torch.tensor([0.5, 0.5]), FocalWeight(1.0))
    with pytest.raises(ValueError, match="did not converge"):
        gra_rest_point(torch.tensor([[0.3, 0.7]]), FocalWeight(4.0), damping=1.0, max_iter=50)
