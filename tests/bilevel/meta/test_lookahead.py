"""The meta step's bilevel problem and hypergradient (methods §5.2, §6.4): hypergradients
against float64 central finite differences of an independent plain-autograd lookahead, the
autograd fast path against the torch.func engine, the reference-code backbone leak, and the
meta-objectives."""

import pytest
import torch
import torch.nn.functional as F
from helpers.bilevel import META_LR_STEP as LR
from helpers.bilevel import meta_batch_for, tiny_meta_setup

from selfcal.bilevel import (
    AutogradLookahead,
    GammaNet,
    MetaLookahead,
    OneStepLookahead,
    meta_hypergradient,
    meta_objective,
)
from selfcal.bilevel._tree import tree_leaves
from selfcal.bilevel.meta import lookahead as lookahead_module
from selfcal.losses import focal_loss


def reference_meta_loss(model, meta, train, meta_val, objective, *, whole=False, backbone=None):
    """F = objective(meta-val logits at theta' = theta - LR grad g) by plain torch.autograd
    (create_graph), independent of torch.func and the engine; ``backbone`` overrides the
    body's parameters (for the leak)."""
    params = {k: p.detach().clone() for k, p in model.named_parameters()}
    if backbone is not None:
        params.update(backbone)
    names = list(params) if whole else ["head.weight", "head.bias"]
    for k in names:
        params[k].requires_grad_(True)

    def forward(x, p):
        h = torch.tanh(x @ p["body.0.weight"].T + p["body.0.bias"])
        return h, h @ p["head.weight"].T + p["head.bias"]

    feats, logits = forward(train[0], params)
    fixed_feats = model.features(train[0]).detach()
    if isinstance(meta, GammaNet):
        loss = focal_loss(logits, train[1], meta(fixed_feats), reduction="sum")
    else:
        loss = F.cross_entropy(logits, train[1], reduction="sum") + sum(
            (lam * params[f"head.{k}"] ** 2).sum() for k, lam in meta.named_parameters()
        )
    grads = torch.autograd.grad(loss, [params[k] for k in names], create_graph=True)
    stepped = dict(params)
    stepped.update({k: params[k] - LR * g for k, g in zip(names, grads)})
    return objective(forward(meta_val[0], stepped)[1], meta_val[1])


def central_differences(fn, tensors, eps=1e-6):
    """d fn / d t for every element of every tensor in ``tensors`` (perturbed in place)."""
    out = []
    for t in tensors:
        g = torch.zeros_like(t)
        flat, gflat = t.data.view(-1), g.view(-1)
        for i in range(flat.numel()):
            old = flat[i].item()
            flat[i] = old + eps
            up = float(fn().detach())
            flat[i] = old - eps
            down = float(fn().detach())
            flat[i] = old
            gflat[i] = (up - down) / (2 * eps)
        out.append(g)
    return out


def assert_matches_fd(grads, params, fn):
    expected = central_differences(fn, params)
    flat = torch.cat([g.reshape(-1) for g in grads])
    flat_fd = torch.cat([g.reshape(-1) for g in expected])
    assert flat.abs().max() > 1e-6, "the hypergradient must not be zero"
    torch.testing.assert_close(flat, flat_fd, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize(
    "method,objective",
    [("gamma-net", "sece"), ("gamma-net", "dece"), ("unit-l2", "dece"), ("unit-l2", "ce+dece")],
)
@pytest.mark.parametrize("lookahead", ["head", "all"])
def test_hypergradient_matches_finite_differences(method, objective, lookahead):
    model, meta, train, meta_val = tiny_meta_setup(method)
    fn = meta_objective(objective)
    batch = meta_batch_for(model, train, meta_val, with_meta_features=lookahead == "head")
    result = meta_hypergradient(model, meta, batch, MetaLookahead(LR, fn, lookahead))
    names = [k for k, _ in meta.named_parameters()]
    assert_matches_fd(
        [result.grad[k] for k in names],
        list(meta.parameters()),
        lambda: reference_meta_loss(model, meta, train, meta_val, fn, whole=lookahead == "all"),
    )
    torch.testing.assert_close(
        result.outer_loss,
        reference_meta_loss(model, meta, train, meta_val, fn, whole=lookahead == "all").detach(),
    )


def test_whole_network_and_head_lookahead_differ():
    model, meta, train, meta_val = tiny_meta_setup("gamma-net")
    fn = meta_objective("sece")
    batch = meta_batch_for(model, train, meta_val)
    head = meta_hypergradient(model, meta, batch, MetaLookahead(LR, fn, "head"))
    batch = meta_batch_for(model, train, meta_val, False)
    whole = meta_hypergradient(model, meta, batch, MetaLookahead(LR, fn, "all"))
    diff = (head.grad["readout.weight"] - whole.grad["readout.weight"]).abs().max()
    assert diff > 1e-6 * head.grad["readout.weight"].abs().max()


def test_backbone_leak_equals_finite_differences_of_meta_loss_in_backbone():
    model, meta, train, meta_val = tiny_meta_setup("unit-l2")
    fn = meta_objective("dece")
    batch = meta_batch_for(model, train, meta_val, False)
    result = meta_hypergradient(model, meta, batch, MetaLookahead(LR, fn, backbone_leak=True))
    backbone = {
        k: p.detach().clone() for k, p in model.named_parameters() if not k.startswith("head.")
    }
    assert_matches_fd(
        [result.grad["backbone"][k] for k in backbone],
        list(backbone.values()),
        lambda: reference_meta_loss(model, meta, train, meta_val, fn, backbone=backbone),
    )
    batch = meta_batch_for(model, train, meta_val)
    plain = meta_hypergradient(model, meta, batch, MetaLookahead(LR, fn))
    torch.testing.assert_close(result.grad["meta"], plain.grad)


@pytest.mark.parametrize(
    "method,objective",
    [("gamma-net", "sece"), ("gamma-net", "dece"), ("unit-l2", "dece"), ("unit-l2", "ce+dece")],
)
@pytest.mark.parametrize("leak", [False, True], ids=["plain", "leak"])
def test_autograd_fast_path_equals_the_engine(method, objective, leak):
    """The head lookahead's fast path (plain autograd) against the engine's torch.func
    OneStepLookahead, float64, with and without the reference-code backbone leak."""
    model, meta, train, meta_val = tiny_meta_setup(method)
    batch = meta_batch_for(model, train, meta_val, with_meta_features=not leak)
    lookahead = MetaLookahead(LR, meta_objective(objective), backbone_leak=leak)
    fast = meta_hypergradient(model, meta, batch, lookahead, estimator=AutogradLookahead())
    engine = meta_hypergradient(model, meta, batch, lookahead, estimator=OneStepLookahead())
    assert float(max(g.abs().max() for g in tree_leaves(fast.grad))) > 1e-6
    if leak:
        assert set(fast.grad) == {"meta", "backbone"}
    for got, want in zip(tree_leaves(tuple(fast)), tree_leaves(tuple(engine)), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_head_lookahead_defaults_to_the_fast_path_and_whole_network_to_the_engine(monkeypatch):
    calls = []

    class Spy(AutogradLookahead):
        def __call__(self, *args):
            calls.append(args)
            return super().__call__(*args)

    monkeypatch.setattr(lookahead_module, "AutogradLookahead", Spy)
    model, meta, train, meta_val = tiny_meta_setup("gamma-net")
    fn = meta_objective("sece")
    with_features, without = (
        meta_batch_for(model, train, meta_val),
        meta_batch_for(model, train, meta_val, False),
    )
    meta_hypergradient(model, meta, with_features, MetaLookahead(LR, fn))
    meta_hypergradient(model, meta, without, MetaLookahead(LR, fn, backbone_leak=True))
    assert len(calls) == 2
    meta_hypergradient(model, meta, without, MetaLookahead(LR, fn, "all"))
    assert len(calls) == 2


def test_ce_objective_is_mean_cross_entropy_in_float64():
    """The "FLγ" ablation's meta-objective: mean CE alone, float64, differentiable."""
    g = torch.Generator().manual_seed(0)
    logits, labels = 3 * torch.randn(16, 5, generator=g), torch.randint(0, 5, (16,), generator=g)
    logits.requires_grad_(True)
    value = meta_objective("ce")(logits, labels)
    assert value.dtype == torch.float64
    torch.testing.assert_close(value, F.cross_entropy(logits.double(), labels))
    torch.testing.assert_close(value.float(), F.cross_entropy(logits, labels))
    (grad,) = torch.autograd.grad(value, logits)
    expected = (logits.double().softmax(1) - F.one_hot(labels, 5)) / 16  # d mean CE / d z
    torch.testing.assert_close(grad, expected.float())


def test_lookahead_options_are_checked():
    fn = meta_objective("sece")
    with pytest.raises(ValueError, match="lookahead must be one of"):
        MetaLookahead(LR, fn, "body")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="head lookahead only"):
        MetaLookahead(LR, fn, "all", backbone_leak=True)
