"""Prediction sets (:mod:`selfcal.io._sets`): the two layouts read alike, a folder of sets is
listed, and every malformed set is a one-line error naming the file."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.sets import write_file_set, write_folder_set

from selfcal.io import (
    PREDICTIONS_ENV,
    default_sets_root,
    find_prediction_sets,
    load_prediction_set,
)


def test_a_folder_set_and_a_one_file_set_are_read_with_their_names_and_groups(tmp_path):
    folder = load_prediction_set(write_folder_set(tmp_path / "resnet", 0, groups=5))
    assert folder.name == "resnet" and folder.kind == "logits" and folder.n_classes == 4
    assert folder.val.shape == (400, 4) and folder.test_labels.dtype == np.int64
    assert folder.val_groups is not None and len(set(folder.test_groups)) == 5
    single = load_prediction_set(write_file_set(tmp_path / "llm.npz", 1))
    assert single.name == "llm" and single.kind == "probs" and single.n_classes == 3
    assert single.val_groups is None and single.test_groups is None
    pred = single.predictions("test")
    assert pred.kind == "probs" and pred.n_samples == 400


def test_a_folder_of_sets_lists_folders_and_files_by_name(tmp_path):
    write_folder_set(tmp_path / "b_model", 0)
    write_file_set(tmp_path / "a_model.npz", 1)
    (tmp_path / "notes").mkdir()  # a folder without val.npz is not a set
    found = find_prediction_sets(tmp_path)
    assert [p.name for p in found] == ["a_model.npz", "b_model"]
    assert find_prediction_sets(tmp_path / "b_model") == [tmp_path / "b_model"]
    assert find_prediction_sets(tmp_path / "a_model.npz") == [tmp_path / "a_model.npz"]
    with pytest.raises(ValueError, match="no prediction sets here"):
        find_prediction_sets(tmp_path / "notes")
    with pytest.raises(FileNotFoundError, match="no such folder"):
        find_prediction_sets(tmp_path / "missing")


def test_the_default_folder_is_the_environment_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(PREDICTIONS_ENV, raising=False)
    with pytest.raises(ValueError, match=f"set \\${PREDICTIONS_ENV}"):
        default_sets_root()
    monkeypatch.setenv(PREDICTIONS_ENV, str(tmp_path))
    assert default_sets_root() == tmp_path


def _rewrite(path, **changes):
    arrays = dict(np.load(path))
    for key, value in changes.items():
        if value is None:
            arrays.pop(key)
        else:
            arrays[key] = value
    np.savez(path, **arrays)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda f: (f / "test.npz").unlink(), "test.npz: no such file"),
        (lambda f: _rewrite(f / "val.npz", labels=None), "no array 'labels'"),
        (
            lambda f: _rewrite(f / "val.npz", probs=np.full((400, 4), 0.25)),
            "exactly one of the arrays 'logits' or 'probs', found both",
        ),
        (lambda f: _rewrite(f / "val.npz", logits=None), "found neither"),
        (
            lambda f: _rewrite(f / "test.npz", logits=np.full((400, 4), np.nan, np.float32)),
            "test.npz: .*NaN",
        ),
        (lambda f: _rewrite(f / "val.npz", labels=np.full(400, 9)), "val.npz: .*label"),
        (
            lambda f: _rewrite(f / "test.npz", logits=np.zeros((400, 5), np.float32)),
            "test split has 5 classes, the validation split 4",
        ),
        (
            lambda f: _rewrite(f / "test.npz", logits=None, probs=np.full((400, 4), 0.25)),
            "test split holds probs, the validation split logits",
        ),
        (lambda f: _rewrite(f / "val.npz", groups=np.arange(3)), "'groups' must hold one value"),
        (lambda f: _rewrite(f / "val.npz", groups=np.arange(400)), "groups .*one split only"),
        (lambda f: _rewrite(f / "val.npz", logits=np.zeros(400, np.float32)), "must be \\(N, C\\)"),
        (lambda f: (f / "val.npz").write_bytes(b""), "val.npz: the file is empty"),
    ],
)
def test_a_malformed_set_is_one_line_naming_the_file(tmp_path, change, message):
    folder = write_folder_set(tmp_path / "model", 0)
    change(folder)
    with pytest.raises((ValueError, FileNotFoundError), match=message) as caught:
        load_prediction_set(folder)
    assert "\n" not in str(caught.value) and "model" in str(caught.value)


def test_a_file_that_is_not_a_set_says_what_a_set_is(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="a set is a folder with val.npz"):
        load_prediction_set(tmp_path / "x.csv")
    with pytest.raises(FileNotFoundError, match="no such prediction set"):
        load_prediction_set(tmp_path / "missing")
    np.savez(tmp_path / "half.npz", logits_val=np.zeros((3, 2)), labels_val=np.arange(3) % 2)
    with pytest.raises(ValueError, match="'logits_test' or 'probs_test', found neither"):
        load_prediction_set(tmp_path / "half.npz")


def _softmax(z):
    p = np.exp(z - z.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True)


def test_probabilities_named_logits_are_refused_with_evaluates_message_unless_kind_says_logits(
    tmp_path,
):
    """The one kind rule (:func:`selfcal.io.check_named_kind`): the set reader says what
    ``selfcal evaluate`` says of the same array, naming it, and ``kind="logits"`` overrides."""
    folder = write_folder_set(tmp_path / "m", 0)
    for split in ("val", "test"):
        arrays = dict(np.load(folder / f"{split}.npz"))
        _rewrite(folder / f"{split}.npz", logits=_softmax(arrays["logits"]))
    with pytest.raises(ValueError) as caught:
        load_prediction_set(folder)
    message = str(caught.value)
    assert message.startswith(f"{folder / 'val.npz'}: the array 'logits' holds probabilities")
    assert "rename it 'probs', or pass --kind logits" in message
    from selfcal.io import load_predictions

    with pytest.raises(ValueError) as single:
        load_predictions(folder / "val.npz")
    assert str(single.value) == message  # evaluate / calibrate's words, exactly
    assert load_prediction_set(folder, kind="logits").kind == "logits"

    one = tmp_path / "one.npz"
    z, y = np.random.default_rng(0).normal(size=(50, 3)), np.arange(50) % 3
    np.savez(one, logits_val=_softmax(z), labels_val=y, logits_test=_softmax(z), labels_test=y)
    with pytest.raises(ValueError, match="the array 'logits_val' holds .*rename it 'probs_val'"):
        load_prediction_set(one)


def test_kind_picks_one_of_two_arrays_and_names_a_missing_one(tmp_path):
    folder = write_folder_set(tmp_path / "m", 0)
    for split in ("val", "test"):
        arrays = dict(np.load(folder / f"{split}.npz"))
        _rewrite(folder / f"{split}.npz", probs=_softmax(arrays["logits"].astype(np.float64)))
    with pytest.raises(ValueError, match="found both .*; pass --kind to choose"):
        load_prediction_set(folder)
    assert load_prediction_set(folder, kind="probs").kind == "probs"
    assert load_prediction_set(folder, kind="logits").kind == "logits"
    only = write_folder_set(tmp_path / "n", 0)
    with pytest.raises(ValueError, match="val.npz: no array 'probs' \\(arrays: logits, labels\\)"):
        load_prediction_set(only, kind="probs")
    with pytest.raises(ValueError, match="kind must be one of"):
        load_prediction_set(only, kind="scores")
