"""RunSpec keys (stable, sensitive, canonical), JSON/pickle round trips, validation; RunResult
validation and the divergence check."""

from __future__ import annotations

import hashlib
import json
import math
import pickle

import numpy as np
import pytest
import torch

from selfcal.experiments import RunResult, RunSpec

BASE = RunSpec(
    "bo4sc",
    "blobs-1.3",
    "bo4sc",
    3,
    {"lr": 0.01, "T": 5, "iso": False, "tag": None},
    {"name": "mlp", "hidden": [64, 64], "act": {"kind": "relu"}},
)


def test_key_is_truncated_sha256_of_sorted_compact_json() -> None:
    text = json.dumps(
        {
            "study": "bo4sc",
            "dataset": "blobs-1.3",
            "method": "bo4sc",
            "seed": 3,
            "hparams": {"T": 5, "iso": False, "lr": 0.01, "tag": None},
            "model": {"act": {"kind": "relu"}, "hidden": [64, 64], "name": "mlp"},
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    assert BASE.key == hashlib.sha256(text.encode()).hexdigest()[:16]
    assert BASE.to_json() == text


def test_key_is_stable_across_versions() -> None:
    # Pinned: a changed value would orphan every stored result of every user.
    assert (
        RunSpec("s", "d", "m", 0).key
        == hashlib.sha256(
            b'{"dataset":"d","hparams":{},"method":"m","model":{},"seed":0,"study":"s"}'
        ).hexdigest()[:16]
        == "050eb6ee47fcfcaa"
    )


def test_key_ignores_insertion_order_and_numpy_scalar_types() -> None:
    reordered = RunSpec(
        "bo4sc",
        "blobs-1.3",
        "bo4sc",
        np.int64(3),
        {"tag": None, "iso": np.bool_(False), "T": np.int32(5), "lr": np.float64(0.01)},
        {"act": {"kind": "relu"}, "hidden": (64, 64), "name": "mlp"},
    )
    assert reordered.key == BASE.key and reordered == BASE and hash(reordered) == hash(BASE)


@pytest.mark.parametrize(
    "change",
    [
        {"study": "other"},
        {"dataset": "blobs-1.7"},
        {"method": "ce"},
        {"seed": 4},
        {"hparams": {"lr": 0.010000000000000002, "T": 5, "iso": False, "tag": None}},
        {"hparams": {"lr": 0.01, "T": 5.0, "iso": False, "tag": None}},  # int vs float
        {"hparams": {"lr": 0.01, "T": 5, "iso": 0, "tag": None}},  # bool vs int
        {"hparams": {"lr": 0.01, "T": 5, "iso": False}},  # a missing None entry
        {"model": {"name": "mlp", "hidden": [64, 65], "act": {"kind": "relu"}}},
        {"model": {"name": "mlp", "hidden": [64, 64], "act": {"kind": "gelu"}}},
    ],
)
def test_key_changes_with_every_field(change: dict) -> None:
    changed = BASE.replace(**change)
    assert changed.key != BASE.key and changed != BASE


def test_json_and_pickle_round_trips() -> None:
    for copy in (RunSpec.from_json(BASE.to_json()), pickle.loads(pickle.dumps(BASE))):
        assert copy == BASE and copy.key == BASE.key
        assert copy.to_dict() == BASE.to_dict()
    assert len({BASE, pickle.loads(pickle.dumps(BASE)), BASE.replace(seed=9)}) == 2


def test_spec_is_immutable() -> None:
    with pytest.raises(TypeError):
        BASE.hparams["lr"] = 1.0  # type: ignore[index]
    with pytest.raises(AttributeError):
        BASE.seed = 1  # type: ignore[misc]
    source = {"lr": 0.1}
    spec = RunSpec("s", "d", "m", 0, source)
    source["lr"] = 0.2
    assert spec.hparams["lr"] == 0.1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"hparams": {"lr": float("nan")}}, "NaN and infinity"),
        ({"hparams": {"lr": float("inf")}}, "NaN and infinity"),
        ({"hparams": {"sizes": [1, 2]}}, "JSON scalar"),
        ({"hparams": {"arr": np.zeros(2)}}, "JSON scalar"),
        ({"hparams": {1: 2}}, "keys must be strings"),
        ({"model": {"f": object()}}, "JSON scalar"),
        ({"model": {"s": {1, 2}}}, "JSON scalar"),
        ({"model": {"nested": {"x": float("nan")}}}, "NaN"),
        ({"seed": True}, "seed must be an int"),
        ({"seed": 1.0}, "seed must be an int"),
        ({"seed": -1}, "seed must be an integer >= 0"),
        ({"study": ""}, "study must be a non-empty string"),
        ({"method": None}, "method must be a non-empty string"),
    ],
)
def test_invalid_specs_are_rejected(kwargs: dict, match: str) -> None:
    fields = {"study": "s", "dataset": "d", "method": "m", "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=match):
        RunSpec(**fields)


def test_from_json_rejects_other_objects() -> None:
    with pytest.raises(ValueError, match="not a RunSpec"):
        RunSpec.from_json('{"study": "s", "dataset": "d", "method": "m", "seed": 0, "x": 1}')
    with pytest.raises(ValueError, match="not a RunSpec"):
        RunSpec.from_json("[1, 2]")


def test_done_result_with_nonfinite_metric_becomes_failed_naming_it() -> None:
    result = RunResult({"ece": 0.1, "nll": float("nan"), "loss": -float("inf")})
    checked = result.checked()
    assert checked.status == "failed"
    assert "nll=nan" in checked.reason and "loss=-inf" in checked.reason
    assert "ece" not in checked.reason
    fine = RunResult({"ece": 0.1})
    assert fine.checked() is fine


def test_result_converts_numbers_and_tensors() -> None:
    weights = torch.arange(6, dtype=torch.float32, requires_grad=True).reshape(2, 3)
    result = RunResult({"ece": torch.tensor(0.25), "n": np.int64(3)}, {"w": weights * 2})
    assert result.metrics == {"ece": 0.25, "n": 3.0}
    assert all(type(v) is float for v in result.metrics.values())
    np.testing.assert_array_equal(result.artefacts["w"], np.arange(6).reshape(2, 3) * 2.0)
    assert result.artefacts["w"].dtype == np.float32


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"status": "ok"}, "'done' or 'failed'"),
        ({"status": "failed"}, "needs a reason"),
        ({"reason": "why"}, "no reason"),
        ({"metrics": {"ece": "high"}}, "not a number"),
        ({"metrics": {"": 1.0}}, "non-empty strings"),
        ({"artefacts": {"a": np.array([{"x": 1}], dtype=object)}}, "no pickle"),
        ({"artefacts": {"a": ["x", "y"]}}, "only numeric"),
        ({"artefacts": {"a\x1fb": np.ones(1)}}, "printable"),
        ({"seconds": -1.0}, "seconds"),
        ({"seconds": math.nan}, "seconds"),
    ],
)
def test_invalid_results_are_rejected(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RunResult(**kwargs)
