"""The uncertainty-weighted CE family (FL, FLSD-53, DFL, BSCE and their GRA variants) against
independent formulas: values (numpy), gradients (autograd of a plain torch formula) and the GRA
identity dL/dtheta = u * dCE/dtheta."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers.losses import (
    as_torch,
    brier_weight_np,
    ce_np,
    dfl_weight_np,
    flsd53_weight_np,
    focal_weight_np,
    make_batch,
    reduce_np,
)

from selfcal.losses import (
    BrierWeight,
    BSCELoss,
    CrossEntropy,
    DualFocalLoss,
    DualFocalWeight,
    FLSD53Loss,
    FLSD53Weight,
    FocalLoss,
    FocalWeight,
    bsce_loss,
    cross_entropy,
    dual_focal_loss,
    flsd53_loss,
    focal_loss,
    runner_up_probability,
    uncertainty_weighted_ce,
)

# (name, module factory taking gra, numpy weight formula)
FAMILY = [
    ("focal-0.5", lambda gra: FocalLoss(0.5, gra=gra), lambda z, y: focal_weight_np(z, y, 0.5)),
    ("focal-3", lambda gra: FocalLoss(3, gra=gra), lambda z, y: focal_weight_np(z, y, 3)),
    ("flsd53", lambda gra: FLSD53Loss(gra=gra), flsd53_weight_np),
    ("dfl-5", lambda gra: DualFocalLoss(5, gra=gra), lambda z, y: dfl_weight_np(z, y, 5)),
    ("dfl-2.5", lambda gra: DualFocalLoss(2.5, gra=gra), lambda z, y: dfl_weight_np(z, y, 2.5)),
    ("bsce-4-2", lambda gra: BSCELoss(4, 2, gra=gra), lambda z, y: brier_weight_np(z, y, 4, 2)),
    ("bsce-3-1", lambda gra: BSCELoss(3, 1, gra=gra), lambda z, y: brier_weight_np(z, y, 3, 1)),
    ("bsce-2-3", lambda gra: BSCELoss(2, 3, gra=gra), lambda z, y: brier_weight_np(z, y, 2, 3)),
    (
        "bsce-1.5-inf",
        lambda gra: BSCELoss(1.5, float("inf"), gra=gra),
        lambda z, y: brier_weight_np(z, y, 1.5, np.inf),
    ),
]
IDS = [f[0] for f in FAMILY]


def torch_weight(name: str, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The weight written directly in torch (differentiable), independently of selfcal."""
    p = torch.softmax(logits, dim=1)
    rows = torch.arange(len(y))
    p_y = p[rows, y]
    if name.startswith("focal"):
        return (1 - p_y) ** float(name.split("-")[1])
    if name == "flsd53":
        gamma = torch.tensor([5.0 if v < 0.2 else 3.0 for v in p_y.tolist()], dtype=p.dtype)
        return (1 - p_y) ** gamma
    if name.startswith("dfl"):
        p_np, y_np = p.detach().numpy(), y.numpy()
        picked = []
        for i in range(len(y)):
            below = [k for k in range(p.shape[1]) if p_np[i, k] < p_np[i, y_np[i]]]
            picked.append(p[i, max(below, key=lambda k: p_np[i, k])] if below else p.new_zeros(()))
        return (1 - p_y + torch.stack(picked)) ** float(name.split("-")[1])
    _, gamma, norm = name.split("-")
    residual = p - F.one_hot(y, p.shape[1]).to(p.dtype)
    return torch.linalg.vector_norm(residual, ord=float(norm), dim=1) ** float(gamma)


@pytest.mark.parametrize("gra", [False, True])
@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
@pytest.mark.parametrize(("name", "factory", "weight_np"), FAMILY, ids=IDS)
def test_value_equals_numpy_formula(name, factory, weight_np, reduction, gra):
    z, y = make_batch(IDS.index(name))
    loss = factory(gra)
    loss.reduction = reduction
    logits, labels = as_torch(z, y)
    expected = reduce_np(weight_np(z, y) * ce_np(z, y), reduction)
    np.testing.assert_allclose(loss(logits, labels).detach().numpy(), expected, rtol=1e-10)


@pytest.mark.parametrize(("name", "factory", "weight_np"), FAMILY, ids=IDS)
def test_loss_mode_gradient_equals_autograd_of_formula(name, factory, weight_np):
    z, y = make_batch(1 + IDS.index(name))
    logits, labels = as_torch(z, y)
    loss = factory(False)
    loss.reduction = "sum"
    (ours,) = torch.autograd.grad(loss(logits, labels), logits)
    u = torch_weight(name, logits, labels)
    formula = -(u * torch.log_softmax(logits, 1)[torch.arange(len(y)), labels]).sum()
    (expected,) = torch.autograd.grad(formula, logits)
    torch.testing.assert_close(ours, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("name", "factory", "weight_np"), FAMILY, ids=IDS)
def test_gra_gradient_is_weight_times_ce_gradient(name, factory, weight_np):
    """Per sample (rows of the logits are independent): dL/dz_i = u_i * dCE_i/dz_i."""
    z, y = make_batch(2 + IDS.index(name))
    logits, labels = as_torch(z, y)
    (ours,) = torch.autograd.grad(factory(True)(logits, labels), logits)
    (ce_grad,) = torch.autograd.grad(F.cross_entropy(logits, labels), logits)
    u = torch.tensor(weight_np(z, y))
    torch.testing.assert_close(ours, u[:, None] * ce_grad, rtol=1e-10, atol=1e-13)


def test_gra_parameter_gradient_is_weighted_sum_of_per_sample_ce_gradients():
    """d/dtheta of BSCE-GRA through a small network = sum_i u_i dCE_i/dtheta (per-sample grads)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    net = net.double()
    x, y = torch.randn(10, 3, dtype=torch.float64), torch.randint(0, 4, (10,))
    params = list(net.parameters())
    ours = torch.autograd.grad(BSCELoss(gra=True, reduction="sum")(net(x), y), params)
    z = net(x).detach().numpy()
    u = brier_weight_np(z, y.numpy(), 4, 2)
    expected = [torch.zeros_like(p) for p in params]
    for i in range(len(y)):
        per_sample = torch.autograd.grad(F.cross_entropy(net(x[i : i + 1]), y[i : i + 1]), params)
        expected = [e + u[i] * g for e, g in zip(expected, per_sample)]
    for got, want in zip(ours, expected):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("mode", ["loss", "gradient"])
@pytest.mark.parametrize(
    "weight",
    [
        FocalWeight(0),
        FocalWeight(torch.zeros(24, dtype=torch.float64)),
        DualFocalWeight(0),
        BrierWeight(0, 1),
        BrierWeight(0, 2),
    ],
    ids=["focal", "focal-per-sample", "dfl", "bsce-norm1", "bsce-norm2"],
)
def test_zero_exponent_is_cross_entropy(weight, mode):
    z, y = make_batch(3)
    z[0] = [40.0, -40.0, 0.0, 0.0, 0.0]  # a saturated row, p_y = 1 exactly
    y[0] = 0
    logits, labels = as_torch(z, y)
    value = uncertainty_weighted_ce(logits, labels, weight, mode=mode)
    (grad,) = torch.autograd.grad(value, logits)
    ce = F.cross_entropy(logits, labels)  # both batch means, the default reduction
    (ce_grad,) = torch.autograd.grad(ce, logits)
    torch.testing.assert_close(value, ce, rtol=1e-12, atol=0)
    torch.testing.assert_close(grad, ce_grad, rtol=1e-12, atol=1e-15)


def test_cross_entropy_twins_match_torch():
    z, y = make_batch(4)
    logits, labels = as_torch(z, y)
    for reduction in ("sum", "mean", "none"):
        expected = F.cross_entropy(logits, labels, reduction=reduction)
        torch.testing.assert_close(CrossEntropy(reduction=reduction)(logits, labels), expected)
        torch.testing.assert_close(cross_entropy(logits, labels, reduction=reduction), expected)
    np.testing.assert_allclose(cross_entropy(logits, labels).item(), ce_np(z, y).mean())


def test_functional_twins_equal_modules():
    z, y = make_batch(5)
    logits, labels = as_torch(z, y)
    pairs = [
        (focal_loss(logits, labels, 2.0, gra=True), FocalLoss(2.0, gra=True)(logits, labels)),
        (flsd53_loss(logits, labels), FLSD53Loss()(logits, labels)),
        (
            dual_focal_loss(logits, labels, 5, detach_runner_up=True),
            DualFocalLoss(5, detach_runner_up=True)(logits, labels),
        ),
        (
            bsce_loss(logits, labels, 4, 2, gra=True, reduction="mean"),
            BSCELoss(4, 2, gra=True, reduction="mean")(logits, labels),
        ),
    ]
    for functional, module in pairs:
        assert torch.equal(functional, module)


def test_flsd53_switches_exactly_at_0_2():
    """gamma = 5 strictly below p_y = 0.2, 3 from 0.2 on (also above 0.5)."""
    p_y = torch.tensor([0.05, 0.2 - 1e-12, 0.2, 0.2 + 1e-12, 0.35, 0.5, 0.9], dtype=torch.float64)
    rest = (1 - p_y) / 2
    probs = torch.stack([p_y, rest, rest], dim=1)
    labels = torch.zeros(len(p_y), dtype=torch.long)
    weight = FLSD53Weight()
    assert weight.gammas(p_y).tolist() == [5.0, 5.0, 3.0, 3.0, 3.0, 3.0, 3.0]
    expected = torch.where(p_y < 0.2, (1 - p_y) ** 5, (1 - p_y) ** 3)
    torch.testing.assert_close(weight(probs, labels), expected, rtol=1e-15, atol=0)


def test_dual_focal_runner_up_on_hand_made_rows():
    probs = torch.tensor(
        [
            [0.6, 0.3, 0.1],  # correct: p_j is the second largest
            [0.5, 0.3, 0.2],  # misclassified (y = 1): p_j = 0.2, not the larger 0.5
            [0.5, 0.3, 0.2],  # true class smallest (y = 2): p_j = 0
            [0.4, 0.4, 0.2],  # a tie with p_y does not count: p_j = 0.2
            [1 / 3, 1 / 3, 1 / 3],  # all tied: p_j = 0
            [0.1, 0.2, 0.7],  # correct, true class last: p_j = 0.2
        ],
        dtype=torch.float64,
    )
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    p_y = probs[torch.arange(6), labels]
    expected_p_j = torch.tensor([0.3, 0.2, 0.0, 0.2, 0.0, 0.2], dtype=torch.float64)
    torch.testing.assert_close(runner_up_probability(probs, p_y), expected_p_j)
    weight = DualFocalWeight(gamma=2.0)(probs, labels)
    torch.testing.assert_close(weight, (1 - p_y + expected_p_j) ** 2)


def test_dfl_partial_detach_is_the_reference_quirk():
    """detach_runner_up: the gradient of -(1 - p_y + sg(p_j))^g log p_y, unlike DFL and DFL-GRA."""
    z, y = make_batch(6)
    logits, labels = as_torch(z, y)
    partial_loss = DualFocalLoss(5, detach_runner_up=True, reduction="sum")(logits, labels)
    (partial,) = torch.autograd.grad(partial_loss, logits)
    p = torch.softmax(logits, 1)
    rows = torch.arange(len(y))
    p_j = runner_up_probability(p, p[rows, labels]).detach()
    formula = -((1 - p[rows, labels] + p_j) ** 5 * torch.log(p[rows, labels])).sum()
    (expected,) = torch.autograd.grad(formula, logits)
    torch.testing.assert_close(partial, expected, rtol=1e-9, atol=1e-12)
    for other in (DualFocalLoss(5, reduction="sum"), DualFocalLoss(5, gra=True, reduction="sum")):
        (grad,) = torch.autograd.grad(other(logits, labels), logits)
        assert not torch.allclose(grad, partial)


@pytest.mark.parametrize("gra", [False, True])
@pytest.mark.parametrize("gamma", [1.0, 2.5, 4.0])
def test_bsce_with_norm_1_is_focal_scaled_by_2_to_the_gamma(gamma, gra):
    """||y - p||_1 = 2 (1 - p_y), so BSCE(norm=1) = 2**gamma * FL (values and gradients)."""
    z, y = make_batch(7)
    logits, labels = as_torch(z, y)
    bsce = BSCELoss(gamma, 1, gra=gra)(logits, labels)
    focal = FocalLoss(gamma, gra=gra)(logits, labels)
    torch.testing.assert_close(bsce, 2**gamma * focal, rtol=1e-12, atol=0)
    (g_bsce,) = torch.autograd.grad(bsce, logits)
    (g_focal,) = torch.autograd.grad(focal, logits)
    torch.testing.assert_close(g_bsce, 2**gamma * g_focal, rtol=1e-10, atol=1e-13)


def test_brier_weight_code_form_vs_paper_form():
    """Code form ||y-p||_b^g equals the paper's sum_k |p_k - y_k|^g only when g == b; at
    g = 4, b = 2 it is the squared Brier score."""
    z, y = make_batch(8)
    probs, labels = torch.softmax(torch.tensor(z), 1), torch.tensor(y)
    residual = (probs - F.one_hot(labels, 5)).abs()
    torch.testing.assert_close(BrierWeight(2, 2)(probs, labels), (residual**2).sum(1))
    torch.testing.assert_close(BrierWeight(3, 3)(probs, labels), (residual**3).sum(1))
    brier = (residual**2).sum(1)
    torch.testing.assert_close(BrierWeight(4, 2)(probs, labels), brier**2)
    assert not torch.allclose(BrierWeight(4, 2)(probs, labels), (residual**4).sum(1))


def test_per_sample_gamma_is_the_gamma_net_hook():
    z, y = make_batch(9)
    logits, labels = as_torch(z, y)
    gamma = torch.linspace(0.0, 4.0, len(y), dtype=torch.float64, requires_grad=True)
    value = focal_loss(logits, labels, gamma, reduction="none")
    expected = focal_weight_np(z, y, gamma.detach().numpy()) * ce_np(z, y)
    np.testing.assert_allclose(value.detach().numpy(), expected, rtol=1e-10)
    # d/dgamma_i of -(1 - p)^g log p = -(1 - p)^g log(1 - p) log p
    (d_gamma,) = torch.autograd.grad(value.sum(), gamma)
    p_y = 1 - focal_weight_np(z, y, 1.0)
    analytic = -((1 - p_y) ** gamma.detach().numpy()) * np.log(1 - p_y) * np.log(p_y)
    np.testing.assert_allclose(d_gamma.numpy(), analytic, rtol=1e-9)
    gra = focal_loss(logits, labels, gamma, gra=True)
    assert torch.autograd.grad(gra, gamma, allow_unused=True) == (None,)


def test_float32_and_saturated_logits_stay_finite():
    z, y = make_batch(10)
    z[:4] = 0.0
    z[:4, 0] = 200.0  # p_y = 1 (exactly, in float32) for rows 0-3 ...
    y[:2] = 0
    y[2:4] = 1  # ... and p_y ~ 0 for rows 2-3
    logits = torch.tensor(z, dtype=torch.float32, requires_grad=True)
    labels = torch.tensor(y)
    for loss in (
        FocalLoss(0.5),
        FocalLoss(2),
        DualFocalLoss(0.3),
        BSCELoss(0.5, 2),
        BSCELoss(4, 2, gra=True),
        FLSD53Loss(),
    ):
        value = loss(logits, labels)
        (grad,) = torch.autograd.grad(value, logits)
        assert value.dtype == torch.float32
        assert torch.isfinite(value) and bool(torch.isfinite(grad).all()), loss
    reference = FocalLoss(2)(logits.double(), labels)
    torch.testing.assert_close(FocalLoss(2)(logits, labels).double(), reference, rtol=1e-5, atol=0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda z, y: focal_loss(z, y, -1.0), "gamma"),
        (lambda z, y: focal_loss(z, y, float("nan")), "gamma"),
        (lambda z, y: focal_loss(z, y, torch.tensor([1.0, -1.0])), "gamma"),
        (lambda z, y: focal_loss(z, y, torch.ones(3)), r"shape \(4,\)"),
        (lambda z, y: BSCELoss(4, 0.5), "norm"),
        (lambda z, y: DualFocalLoss(5, gra=True, detach_runner_up=True), "no effect"),
        (lambda z, y: FocalLoss(2, gra=1), "gra"),
        (lambda z, y: cross_entropy(z, y, reduction="avg"), "reduction"),
        (lambda z, y: uncertainty_weighted_ce(z, y, FocalWeight(1), mode="both"), "mode"),
        (lambda z, y: cross_entropy(z[0], y), r"\(N, C\)"),
        (lambda z, y: cross_entropy(z[:, :1], y), r"\(N, C\)"),
        (lambda z, y: cross_entropy(z, y[:3]), "labels has length 3"),
        (lambda z, y: cross_entropy(z, y.double() + 0.5), "integers; row 0"),
        (lambda z, y: cross_entropy(z, y + 3), r"\[0, 3\)"),
        (lambda z, y: cross_entropy(z, y - 1), "has label -1"),
        (lambda z, y: cross_entropy(z.long(), y), "floating"),
        (lambda z, y: cross_entropy(z.numpy(), y), "torch tensors"),
        (lambda z, y: uncertainty_weighted_ce(z, y, lambda p, t: p), "must return shape"),
    ],
)
def test_bad_input_raises_value_error(call, message):
    logits = torch.randn(4, 3)
    labels = torch.tensor([0, 1, 2, 0])
    with pytest.raises(ValueError, match=message):
        call(logits, labels)


def test_non_finite_logits_give_a_non_finite_loss_not_an_error():
    """Divergence is the training loop's business (it raises TrainingDiverged)."""
    logits = torch.tensor([[0.0, float("nan")], [1.0, 2.0]])
    assert torch.isnan(BSCELoss(gra=True)(logits, torch.tensor([0, 1])))
