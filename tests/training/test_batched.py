"""fit_batched, the vmapped fast path, takes the same steps as the training loop."""

from __future__ import annotations

import pytest
import torch

from selfcal.data import load_dataset
from selfcal.models import build_model, stack_models
from selfcal.training import TrainConfig, fit, fit_batched

MLP = dict(n_features=2, n_classes=5, hidden=(16, 16))


def test_every_problem_and_every_snapshot_equals_fit():
    """Three problems (two seeds' data and initialisations, two learning rates) trained at
    once; each snapshot equals selfcal.training.fit run for that many epochs on that problem."""
    problems = [(3, 1e-2), (4, 1e-2), (3, 3e-3)]
    data = {s: load_dataset("blobs-1.7", s).train for s in (3, 4)}
    models = [build_model("mlp", seed=s, **MLP) for s, _ in problems]
    params, _ = stack_models(models)
    params = {k: v.detach() for k, v in params.items()}
    x = torch.stack([data[s].x for s, _ in problems])
    y = torch.stack([data[s].y for s, _ in problems])
    lr = torch.tensor([lr for _, lr in problems])
    template = build_model("mlp", seed=0, **MLP).to("meta")
    snaps = fit_batched(template, params, x, y, lr, epochs=30, every=15)
    assert len(snaps) == 2
    for p, (seed, rate) in enumerate(problems):
        for k, epochs in enumerate((15, 30)):
            model = build_model("mlp", seed=seed, **MLP)
            fit(model, (data[seed].x, data[seed].y), config=TrainConfig(epochs=epochs, lr=rate))
            for name, value in model.named_parameters():
                torch.testing.assert_close(snaps[k][name][p], value.detach(), rtol=1e-5, atol=1e-6)


def test_inputs_are_checked():
    template = build_model("mlp", seed=0, **MLP).to("meta")
    params, _ = stack_models([build_model("mlp", seed=0, **MLP)])
    x, y = torch.zeros(1, 4, 2), torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="epochs must be an integer >= 1"):
        fit_batched(template, params, x, y, torch.tensor([1e-2]), epochs=0)
    with pytest.raises(ValueError, match="first \\(problem\\) dimension"):
        fit_batched(template, params, x, y, torch.tensor([1e-2, 1e-3]), epochs=1)
