"""The lowest-validation-NLL checkpoint kept beside a run
(:class:`selfcal.training.BestCheckpoint`)."""

from __future__ import annotations

import pytest
import torch

from selfcal.training import BestCheckpoint


def test_best_checkpoint_keeps_the_lowest_finite_validation_nll():
    torch.manual_seed(0)
    x, y = torch.randn(40, 2), torch.randint(0, 3, (40,))
    model = torch.nn.Linear(2, 3)
    checkpoint = BestCheckpoint(x, y)
    states, nlls = [], []
    for epoch in range(4):
        with torch.no_grad():
            model.weight.mul_(3.0 if epoch == 2 else 0.5)  # epoch 2 is a bad one
        checkpoint.after_epoch(epoch, model)
        states.append({k: v.clone() for k, v in model.state_dict().items()})
        with torch.no_grad():
            nlls.append(float(torch.nn.functional.cross_entropy(model(x).double(), y)))
    best = min(range(4), key=nlls.__getitem__)
    assert checkpoint.epoch == best and checkpoint.nll == pytest.approx(nlls[best])
    with torch.no_grad():
        model.weight.fill_(float("nan"))
    checkpoint.after_epoch(4, model)  # a NaN NLL is never kept
    checkpoint.restore(model)
    assert all(torch.equal(model.state_dict()[k], states[best][k]) for k in states[best])
    params = {k: v + 1.0 for k, v in model.state_dict().items()}  # functional parameters
    shifted = BestCheckpoint(x, y)
    shifted.offer(0, model, params)
    assert shifted.nll == pytest.approx(
        float(
            torch.nn.functional.cross_entropy(
                torch.func.functional_call(model, params, (x,)).double(), y
            )
        )
    )
    with pytest.raises(RuntimeError, match="no checkpoint"):
        BestCheckpoint(x, y).restore(model)


def test_the_refinement_criterion_keeps_the_lowest_nll_after_temperature_scaling():
    """A run whose logits only grow in scale (a temperature) has one refinement loss at every
    epoch after the first sharpening, while its NLL moves: the two criteria keep different
    epochs, each the lowest of its own score, from one forward pass per offer."""
    from selfcal.recalibration import refinement_loss

    torch.manual_seed(1)
    x, y = torch.randn(300, 2), torch.randint(0, 3, (300,))
    model = torch.nn.Linear(2, 3)
    checkpoint = BestCheckpoint(x, y, criteria=("nll", "refinement"))
    scores = {"nll": [], "refinement": []}
    for epoch in range(6):
        with torch.no_grad():
            model.weight.add_(0.3 * torch.randn_like(model.weight))
            model.weight.mul_(1.6)
        checkpoint.offer(epoch, model)
        with torch.no_grad():
            z = model(x).double()
        scores["nll"].append(float(torch.nn.functional.cross_entropy(z, y)))
        scores["refinement"].append(float(refinement_loss(logits=z, labels=y)))
    for criterion, values in scores.items():
        best = min(range(6), key=values.__getitem__)
        assert checkpoint.kept[criterion].epoch == best
        assert checkpoint.kept[criterion].score == pytest.approx(values[best])
    assert checkpoint.kept["nll"].epoch != checkpoint.kept["refinement"].epoch
    assert checkpoint.epoch == checkpoint.kept["nll"].epoch  # the first criterion's
    restored = torch.nn.Linear(2, 3)
    checkpoint.restore(restored, "refinement")
    assert torch.equal(restored.weight, checkpoint.kept["refinement"].state["weight"])
    with pytest.raises(ValueError, match="criteria must be some of"):
        BestCheckpoint(x, y, criteria=("ece",))
