"""γ-Net (methods §6.1): initial γ ≡ 1, γ ≥ 0, shapes, parameter count, the formula."""

import numpy as np
import pytest
import torch

from selfcal.bilevel import GammaNet


def test_gamma_is_one_at_initialisation():
    torch.manual_seed(0)
    net = GammaNet(7, 4)
    gamma = net(torch.randn(11, 7) * 5)
    assert gamma.shape == (11,)
    torch.testing.assert_close(gamma, torch.ones(11))


def test_parameter_count_is_dk_plus_d_plus_one():
    net = GammaNet(512, 100)
    assert sum(p.numel() for p in net.parameters()) == 512 * 100 + 512 + 1


def test_forward_matches_numpy_formula_and_is_nonnegative():
    torch.manual_seed(1)
    net = GammaNet(6, 3, tau=0.05).double()
    with torch.no_grad():
        net.readout.weight.normal_()
        net.readout.bias.fill_(-0.3)
    x = torch.randn(9, 6, dtype=torch.float64)
    a_mat = net.prototypes.detach().numpy()
    w = net.readout.weight.detach().numpy().ravel()
    logits = x.numpy() @ a_mat
    q = np.exp(logits - logits.max(1, keepdims=True))
    q /= q.sum(1, keepdims=True)
    expected = np.abs(q @ a_mat.T @ w - 0.3) / 0.05
    gamma = net(x)
    np.testing.assert_allclose(gamma.detach().numpy(), expected, rtol=1e-12)
    assert bool((gamma >= 0).all()) and bool((gamma > 0).any())


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(feature_dim=0, n_classes=3),
        dict(feature_dim=4, n_classes=1),
        dict(feature_dim=4, n_classes=3, tau=0.0),
    ],
)
def test_bad_construction_raises(kwargs):
    with pytest.raises(ValueError):
        GammaNet(**kwargs)


def test_wrong_feature_shape_raises():
    with pytest.raises(ValueError, match="features must have shape"):
        GammaNet(4, 3)(torch.randn(5, 3))


def test_gamma_with_given_parameters_equals_a_module_holding_them():
    """``gamma_with(x, params)`` (the meta step's functional form) uses ``params``, not the
    module's own parameters, and is differentiable in them."""
    torch.manual_seed(2)
    net, other = GammaNet(6, 3).double(), GammaNet(6, 3).double()
    with torch.no_grad():
        other.readout.weight.normal_()
        other.prototypes.mul_(4)
    x = torch.randn(9, 6, dtype=torch.float64)
    params = {k: p.detach().clone().requires_grad_() for k, p in other.named_parameters()}
    gamma = net.gamma_with(x, params)
    torch.testing.assert_close(gamma, other(x), rtol=0, atol=0)
    assert not torch.allclose(gamma, net(x))
    grads = torch.autograd.grad(gamma.sum(), list(params.values()))
    assert all(float(g.abs().max()) > 0 for g in grads)
