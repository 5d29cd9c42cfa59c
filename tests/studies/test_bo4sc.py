"""The BO4SC study: its trainers and the selection's independence from the test set."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from selfcal.selection import Grid
from selfcal.studies.bo4sc import execute
from selfcal.studies.bo4sc.protocol import QUICK, Bo4scProtocol, regimes


def test_checkpoint_scores_are_the_validation_nll_and_accuracy_of_each_snapshot():
    from selfcal.data import load_dataset
    from selfcal.models import build_model
    from selfcal.training import fit_batched

    data = load_dataset("blobs-1.7", 3)
    make = dict(n_features=2, n_classes=5, hidden=(16, 16))
    model = build_model("mlp", seed=3, **make)
    params = {k: v.detach().clone().unsqueeze(0) for k, v in model.named_parameters()}
    template = build_model("mlp", seed=0, **make).to("meta")
    x, y = data.train.x.unsqueeze(0), data.train.y.unsqueeze(0)
    snaps = fit_batched(template, params, x, y, torch.tensor([1e-2]), epochs=30, every=15)
    scores = execute.checkpoint_scores(
        template, snaps, data.val.x.unsqueeze(0), data.val.y.unsqueeze(0)
    )
    for k, snapshot in enumerate(snaps):
        model.load_state_dict({name: t[0] for name, t in snapshot.items()})
        with torch.no_grad():
            z = model(data.val.x)
        nll = torch.nn.functional.cross_entropy(z, data.val.y)
        assert scores["val_nll"][0, k] == pytest.approx(float(nll), rel=1e-5)
        accuracy = (z.argmax(1) == data.val.y).double().mean()
        assert scores["val_accuracy"][0, k] == pytest.approx(float(accuracy))


def test_each_regime_picks_its_checkpoint_by_its_rule():
    scores = {
        "val_nll": np.array([[0.5, 0.3, 0.4]]),
        "val_accuracy": np.array([[0.8, 0.9, 0.9]]),
        "val_bce": np.array([[0.2, 0.6, np.nan]]),
    }
    nll, accuracy, overfit = regimes(Grid("bo4sc", T=(10,)), Grid("bo4sc", T=(10,)))
    assert execute.pick(nll, "standard", scores, 0) == 1
    assert execute.pick(nll, "bo4sc", scores, 0) == 0  # its own objective; NaN never chosen
    assert execute.pick(accuracy, "standard", scores, 0) == 1  # the first of equal accuracies
    assert execute.pick(overfit, "bo4sc", scores, 0) == 2  # no early stopping: the last


def test_selection_never_reads_the_test_set(monkeypatch):
    """Shuffling the test labels changes test metrics but no validation score and no chosen
    checkpoint of any candidate -- everything selection reads."""
    from selfcal.data import load_dataset

    grid = Grid("bo4sc", T=(10,), lr=(1e-2,), weight_lr=(30.0, 3000.0), beta=(10.0,))
    protocol = dataclasses.replace(
        QUICK,
        seeds=(0,),
        datasets=("blobs-1.3",),
        regimes=tuple(
            dataclasses.replace(r, epochs=40, standard_lrs=(3e-3, 3e-2), grid=grid, hidden=(8,))
            for r in regimes(grid, grid)
        ),
        checkpoint_every=20,
    )

    def shuffled(members):
        out = {}
        for dataset, seed in members:
            d = load_dataset(dataset, seed)
            perm = torch.randperm(len(d.test.y), generator=torch.Generator().manual_seed(1))
            out[(dataset, seed)] = type(d)(
                **{**d.__dict__, "test": type(d.test)(d.test.x, d.test.y[perm])}
            )
        return out

    def everything():
        out = {}
        for runner in (execute.standard_runs, execute.bo4sc_runs):
            out.update(runner(protocol, [("blobs-1.3", 0)], list(protocol.regimes)))
        return out

    honest = everything()
    monkeypatch.setattr(execute, "load", shuffled)
    blind = everything()
    assert honest.keys() == blind.keys() and len(honest) == 2 * 3 * 3 + 2 * 3
    for key, result in honest.items():
        read = {k: v for k, v in result.metrics.items() if k.startswith(("val_", "hp."))}
        assert read == {
            k: v for k, v in blind[key].metrics.items() if k.startswith(("val_", "hp."))
        }
        assert result.metrics["accuracy"] != blind[key].metrics["accuracy"]


def test_same_shape_datasets_share_a_batch_and_others_are_refused():
    from selfcal.experiments import RunSpec

    spec = RunSpec("bo4sc", "spiral-3.5", "bo4sc", 0, {"regime": "nll"})
    other = spec.replace(dataset="spiral-2.5")
    assert execute.group_of(QUICK, spec) == execute.group_of(QUICK, other)
    assert execute.group_of(QUICK, spec) != execute.group_of(QUICK, spec.replace(dataset="bac"))
    with pytest.raises(ValueError, match="one shape"):
        execute.load([("spiral-2.5", 0), ("blobs-1.3", 0)])


def test_protocol_validation():
    small = Grid("bo4sc", T=(20,))
    with pytest.raises(ValueError, match="multiple of every T"):
        Bo4scProtocol("x", checkpoint_every=50, regimes=regimes(small, small))
    with pytest.raises(ValueError, match="multiple of checkpoint_every"):
        Bo4scProtocol(
            "x",
            checkpoint_every=70,
            regimes=regimes(Grid("bo4sc", T=(10,)), Grid("bo4sc", T=(10,))),
        )
