"""The BO4SC-on-images study: BO4SC's inner steps are the image recipe's, its epoch budget and
schedule, and the weight record of a run."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from selfcal.methods.recipe import mean_loss_sgd
from selfcal.models import build_model
from selfcal.studies import _images
from selfcal.studies.bo4sc_images import execute
from selfcal.studies.bo4sc_images.protocol import QUICK


def test_inner_steps_on_the_mean_equal_the_recipe_on_the_sum():
    """``mean_loss_sgd``'s equivalence (used by bo4sc-images and the benchmark): torch's SGD on
    the summed CE with lr, wd and clipping at c equals our SGD on the mean CE with B lr, wd / B
    and c / B, step after step."""
    data, (x, y), _ = _images.load_splits(QUICK, "digits-images", 0)
    batch = QUICK.batch_size
    model = build_model("cnn2d", seed=0, n_classes=10).double()
    theirs = torch.optim.SGD(
        model.parameters(), lr=QUICK.lr, momentum=QUICK.momentum, weight_decay=QUICK.weight_decay
    )
    ours = mean_loss_sgd(QUICK.lr, QUICK.momentum, QUICK.weight_decay, QUICK.grad_clip, batch)
    params = {k: p.detach().clone() for k, p in model.named_parameters()}
    state = ours.init(params)

    def mean_ce(p, xb, yb):
        return F.cross_entropy(torch.func.functional_call(model, p, (xb,)), yb)

    for step in range(4):
        xb, yb = x[step * batch : (step + 1) * batch].double(), y[step * batch : (step + 1) * batch]
        theirs.zero_grad()
        F.cross_entropy(model(xb), yb, reduction="sum").backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), QUICK.grad_clip)
        theirs.step()
        params, state = ours.step(params, torch.func.grad(mean_ce)(params, xb, yb), state)
        for key, value in model.named_parameters():
            gap = float((params[key] - value.detach()).norm() / value.detach().norm())
            assert gap < 1e-5, (step, key, gap)


def test_a_bo4sc_run_spends_the_epoch_budget_and_records_every_row():
    regime = _images.Regime("short", 4, (2,))
    data, train, meta_val = _images.load_splits(QUICK, "digits-images", 0)
    model = build_model("cnn2d", seed=0, n_classes=data.n_classes)
    fitted = execute.train_bo4sc(
        QUICK,
        regime,
        0,
        model,
        train,
        meta_val,
        {"weight_lr": 30.0, "inner_steps": 2, "beta": 20.0},
        None,
    )
    per_epoch = len(train[0]) // QUICK.batch_size
    assert fitted.outer_losses_.shape == (4 * per_epoch // 2,)
    artefacts, metrics = execute.weight_record(model, fitted, train)
    assert artefacts["train_weight"].shape == artefacts["train_loss"].shape == (len(train[0]),)
    assert 0.0 <= metrics["weight_mean"] <= 1.0 and metrics["weight_mean"] < 1.0
    wrong = int((~torch.as_tensor(artefacts["train_correct"])).sum())
    assert ("weight_mean_wrong" in metrics) == (wrong > 0)
    assert all(np.isfinite(v) for v in metrics.values())
