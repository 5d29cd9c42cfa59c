"""The tamper battery: a calibrator or conformal file that loads is valid.

Every registered calibrator and the split-conformal predictor is saved, and each field of its
file -- every hyperparameter and fitted value, an element of every array -- is replaced in
turn by a wrong type, NaN, infinity, zero, a negative or huge number, null, an inconsistent
array, or deleted (and a key is added). Each tampered file must either

* be refused with one line that names the file (a ``ValueError``; no ``KeyError``,
  ``RecursionError`` or ``AttributeError`` from inside), or
* load and then work: finite probabilities in ``[0, 1]`` whose rows sum to 1 (sets of the
  right shape for the conformal predictor) -- never a crash after loading.

As written, every tampered file is refused by its checksum; re-signed (what a deliberate
editor would do), the schema alone must keep the promise.
"""

from __future__ import annotations

import copy
import json
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.posthoc import group_kwargs, groupless_names

from selfcal.conformal import SplitConformal
from selfcal.estimator.persistence import checksum
from selfcal.posthoc import CALIBRATORS, Calibrator

RNG = np.random.default_rng(0)
MUTATIONS: list[Any] = [
    "a string",
    None,
    True,
    [],
    {},
    {"dtype": "float64", "shape": [5], "data": [1.0]},
    {"float": "nan"},
    {"float": "inf"},
    0,
    -1,
    1e308,
    -1e308,
]
ELEMENT_MUTATIONS: list[Any] = ["nan", "inf", "-inf", -1.0, 1e308, "x", None]


def data(n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    y = RNG.integers(0, n_classes, 400)
    z = RNG.normal(size=(400, n_classes)) + 2.5 * np.eye(n_classes)[y]
    return z, y


def fitted(name: str) -> Any:
    binary = name in ("platt", "quadratic")
    z, y = data(2 if binary else 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "conformal":
            return SplitConformal(alpha=0.1, mondrian=True).fit(logits=z, labels=y), z
        calibrator = CALIBRATORS[name]()
        return calibrator.fit(logits=z, labels=y, **group_kwargs(calibrator, len(y))), z


def tampered(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(what, document)`` for every mutation of every field of ``doc``."""
    out = []
    for block in ("params", "fitted"):
        for key, value in doc[block].items():
            for mutation in MUTATIONS:
                if json.dumps(mutation) == json.dumps(value):
                    continue  # not a change
                changed = copy.deepcopy(doc)
                changed[block][key] = mutation
                out.append((f"{block}.{key} = {mutation!r}", changed))
            removed = copy.deepcopy(doc)
            del removed[block][key]
            out.append((f"{block}.{key} deleted", removed))
            if isinstance(value, dict) and isinstance(value.get("data"), list) and value["data"]:
                for mutation in ELEMENT_MUTATIONS:
                    changed = copy.deepcopy(doc)
                    changed[block][key]["data"][0] = mutation
                    out.append((f"{block}.{key}[0] = {mutation!r}", changed))
                changed = copy.deepcopy(doc)
                changed[block][key]["shape"] = [len(value["data"]) + 1]
                out.append((f"{block}.{key} shape off by one", changed))
        extra = copy.deepcopy(doc)
        extra[block]["zz_extra_"] = 1.0
        out.append((f"{block} with an extra key", extra))
    return out


def outcome(load: Any, path: Path, z: np.ndarray) -> str:
    """``"refused"`` (one line naming the file) or ``"works"``; anything else fails."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            estimator = load(path)
    except ValueError as error:
        message = str(error)
        assert message.startswith(str(path)) and "\n" not in message, message
        return "refused"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if isinstance(estimator, SplitConformal):
            sets = np.asarray(estimator.predict_set(logits=z))
            assert sets.shape == z.shape and sets.dtype == bool
            return "works"
        p = np.asarray(estimator.predict_proba(logits=z, **group_kwargs(estimator, len(z))))
    assert np.isfinite(p).all() and (p >= 0).all() and (p <= 1 + 1e-12).all()
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-6)
    return "works"


@pytest.mark.parametrize("name", [*groupless_names(), "conformal"])
def test_a_tampered_file_is_refused_in_one_line_or_still_works(name: str, tmp_path: Path):
    estimator, z = fitted(name)
    path = tmp_path / f"{name}.json"
    estimator.save(path)
    doc = json.loads(path.read_text())
    load = SplitConformal.load if name == "conformal" else Calibrator.load
    counts: Counter[str] = Counter()
    for what, changed in tampered(doc):
        path.write_text(json.dumps(changed))
        with pytest.raises(ValueError, match="does not match the checksum"):
            load(path)  # as written: the checksum refuses every edit
        changed["checksum"] = checksum(changed)
        path.write_text(json.dumps(changed))
        try:
            counts[outcome(load, path, z)] += 1
        except (AssertionError, ValueError) as failure:  # a ValueError here: after loading
            raise AssertionError(f"{name}: {what}: {failure}") from None
    assert counts["refused"] > 0 and sum(counts.values()) == len(tampered(doc))
    print(f"\n{name}: {dict(counts)}")  # pytest -s shows the battery's outcomes


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("temperature_", 0.0, "fitted.temperature_ must be in (0, inf]"),
        ("temperature_", -1.0, "fitted.temperature_ must be in (0, inf]"),
        ("temperature_", {"float": "nan"}, "fitted.temperature_ must be finite"),
        ("temperature_", None, "fitted.temperature_ must be a number, got NoneType"),
    ],
)
def test_the_issues_examples_name_the_field(tmp_path, field, value, message):
    """The reliability audit's cases: a temperature of 0, NaN or -1 loaded and predicted NaN
    rows or inverted the ranking."""
    estimator, _ = fitted("ts")
    path = tmp_path / "ts.json"
    estimator.save(path)
    doc = json.loads(path.read_text())
    doc["fitted"][field] = value
    doc["checksum"] = checksum(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError) as error:
        Calibrator.load(path)
    assert str(error.value) == f"{path}: {message}"


@pytest.mark.parametrize("threshold", [None, -1.0, {"float": "nan"}])
def test_a_conformal_file_with_a_broken_threshold_is_refused(tmp_path, threshold):
    """``threshold_ = null`` or ``-1`` loaded and returned empty sets for every row."""
    z, y = data(3)
    path = tmp_path / "cp.json"
    SplitConformal().fit(logits=z, labels=y).save(path)
    doc = json.loads(path.read_text())
    doc["fitted"]["threshold_"] = threshold
    doc["checksum"] = checksum(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"fitted.threshold_ must"):
        SplitConformal.load(path)


def test_a_file_nested_past_parsing_or_too_large_is_one_line(tmp_path, monkeypatch):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        Calibrator.load(path)
    from selfcal.estimator import persistence as _persistence

    monkeypatch.setattr(_persistence, "MAX_BYTES", 10)
    path.write_text("{}" * 10)
    with pytest.raises(ValueError, match="more than a calibrator file holds"):
        Calibrator.load(path)


def edited(tmp_path: Path, name: str, edit: Any, z: np.ndarray | None = None) -> Path:
    """A file of the calibrator ``name`` (``conformal``: LAC split conformal) with ``edit``
    applied to its document, re-signed."""
    y = RNG.integers(0, 4, 300)
    z = RNG.normal(size=(300, 4)) * 3 if z is None else z
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "conformal":
            estimator: Any = SplitConformal(alpha=0.1, nonconformity="lac")
        else:
            estimator = CALIBRATORS[name]()
        estimator.fit(logits=z, labels=y, **group_kwargs(estimator, len(y)))
    path = tmp_path / f"{name}.json"
    estimator.save(path)
    doc = json.loads(path.read_text())
    edit(doc)
    doc["checksum"] = checksum(doc)
    path.write_text(json.dumps(doc))
    return path


def setter(block: str, key: str, value: Any) -> Any:
    return lambda doc: doc[block].__setitem__(key, value)


def array_edit(key: str, **changes: Any) -> Any:
    def edit(doc: dict[str, Any]) -> None:
        doc["fitted"][key].update(changes)
        if "first" in changes:
            doc["fitted"][key]["data"][0] = changes.pop("first")
            del doc["fitted"][key]["first"]

    return edit


@pytest.mark.parametrize(
    ("name", "edit", "message"),
    [
        (
            "vector",
            setter("fitted", "bias_", True),
            "fitted.bias_ must be a float64 array, got bool",
        ),
        (
            "vector",
            array_edit("weight_", dtype="<U5"),
            "fitted.weight_: array dtype '<U5'; a file holds float64 or int64 arrays",
        ),
        (
            "vector",
            array_edit("weight_", dtype="object"),
            "fitted.weight_: array dtype 'object'; a file holds float64 or int64 arrays",
        ),
        (
            "vector",
            array_edit("weight_", dtype="int8"),
            "fitted.weight_: array dtype 'int8'; a file holds float64 or int64 arrays",
        ),
        ("vector", array_edit("weight_", dtype="int64"), "fitted.weight_: int64 array data must"),
        (
            "vector",
            array_edit("weight_", first=True),
            'fitted.weight_: float64 array data must be numbers (or "inf", "-inf", "nan"), got '
            "True",
        ),
        ("beta", setter("fitted", "c_", "inf"), "fitted.c_ must be a float64 array, got str"),
        ("ts", setter("fitted", "temperature_", {"float": True}), "fitted.temperature_: an obj"),
        ("ts", lambda doc: doc.__setitem__("class", {}), "class must name a calibrator class"),
        ("ts", lambda doc: doc.__setitem__("class", []), "class must name a calibrator class"),
        ("bbq", array_edit("table_sizes_", first=1.5), "fitted.table_sizes_: int64 array data"),
        ("conformal", lambda doc: doc["params"].pop("score"), "params.score is missing"),
        ("ts", lambda doc: doc["params"].pop("mix"), "params.mix is missing"),
        ("ts", setter("params", "zz", 1), "TemperatureScaling has no hyperparameter 'zz'"),
    ],
)
def test_a_wrong_type_or_a_missing_hyperparameter_is_refused_naming_the_field(
    tmp_path, name, edit, message
):
    """The audit's re-signed edits that loaded and predicted differently (a JSON ``true``
    weight, string or int8 dtypes, beta's ``c_ = "inf"``, a conformal ``score`` deleted and
    defaulted to ``aps``) or crashed naming no file (``unhashable type: 'dict'``): each is
    one line naming the file and the field."""
    path = edited(tmp_path, name, edit)
    load = SplitConformal.load if name == "conformal" else Calibrator.load
    with pytest.raises(ValueError) as error:
        load(path)
    text = str(error.value)
    assert text.startswith(f"{path}: {message}") and "\n" not in text, text
