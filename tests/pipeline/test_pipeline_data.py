"""Reading a user's tables and preparing them (:mod:`selfcal.pipeline.tables`,
:mod:`selfcal.pipeline.prepare`): formats, the label mapping, the feature columns, the
standardisation and the checks, each with the message it gives."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from selfcal.data.core import meta_split_indices as meta_split
from selfcal.io import write_table
from selfcal.pipeline import FeatureTable, LabelMap, prepare, read_table


def table(x, y, columns=None, name="t"):
    return FeatureTable.from_arrays(
        np.asarray(x, dtype=float), np.asarray(y), columns=columns, name=name
    )


def columns_of(n=40, seed=0, labels=None):
    rng = np.random.default_rng(seed)
    y = labels if labels is not None else np.array(["cat", "dog", "emu"])[rng.integers(0, 3, n)]
    return {"a": rng.normal(size=n), "b": rng.integers(0, 5, n).astype(np.int64), "label": y}


# ----------------------------------------------------------------------------- formats
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_tables_read_back_what_was_written(tmp_path, suffix):
    cols = columns_of()
    path = write_table(tmp_path / f"d{suffix}", cols)
    t = read_table(path)
    assert t.columns == ("a", "b")
    assert np.array_equal(t.x, np.column_stack([cols["a"], cols["b"]]))
    assert list(t.labels) == list(cols["label"])


def test_csv_without_pyarrow_reads_the_same(tmp_path, monkeypatch):
    cols = columns_of()
    path = write_table(tmp_path / "d.csv", cols)
    with_arrow = read_table(path)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now fails
    monkeypatch.setitem(sys.modules, "pyarrow.csv", None)
    plain = read_table(path)
    assert plain.columns == with_arrow.columns
    assert np.array_equal(plain.x, with_arrow.x)
    assert list(plain.labels) == list(with_arrow.labels)
    written = write_table(tmp_path / "e.csv", cols)  # the plain writer round-trips too
    assert np.array_equal(read_table(written).x, with_arrow.x)


def test_npz_with_and_without_feature_names(tmp_path):
    x, y = np.arange(12.0).reshape(6, 2), np.array([0, 1, 0, 1, 1, 0])
    np.savez(tmp_path / "a.npz", x=x, y=y)
    np.savez(tmp_path / "b.npz", x=x, y=y, feature_names=np.array(["u", "v"]))
    assert read_table(tmp_path / "a.npz").columns == ("x0", "x1")
    b = read_table(tmp_path / "b.npz")
    assert b.columns == ("u", "v") and np.array_equal(b.x, x) and list(b.labels) == list(y)
    np.savez(tmp_path / "c.npz", features=x)
    with pytest.raises(ValueError, match="needs an array 'x'"):
        read_table(tmp_path / "c.npz")
    np.savez(tmp_path / "d.npz", x=x)
    with pytest.raises(ValueError, match=r"no labels \(array 'y' not found\)"):
        read_table(tmp_path / "d.npz")
    assert read_table(tmp_path / "d.npz", require_labels=False).labels is None


def test_file_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="unknown file type '.txt'"):
        read_table(tmp_path / "d.txt")
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_table(tmp_path / "missing.csv")
    cols = columns_of()
    path = write_table(tmp_path / "d.csv", {k: v for k, v in cols.items() if k != "label"})
    with pytest.raises(ValueError, match="no label column 'label' .*--label-column"):
        read_table(path)
    path = write_table(tmp_path / "s.csv", {**cols, "colour": np.array(["red"] * 40)})
    with pytest.raises(ValueError, match="feature column 'colour' is not numeric"):
        read_table(path)


# ----------------------------------------------------------------------------- labels
def test_integer_classes_sort_numerically_and_strings_lexicographically():
    assert LabelMap.from_tables(np.array([10, 2, 1, 2])).classes == (1, 2, 10)
    assert LabelMap.from_tables(np.array(["b", "a", "c"])).classes == ("a", "b", "c")
    labels = LabelMap.from_tables(np.array([10, 2, 1]))
    assert list(labels.encode(np.array([10, 1, 2]), "x")) == [2, 0, 1]
    assert list(labels.decode(np.array([2, 0]))) == [10, 1]


def test_integers_and_strings_across_files_compare_as_strings():
    labels = LabelMap.from_tables(np.array([3, 1]), [np.array(["1", "3"])])
    assert labels.classes == ("1", "3")
    assert list(labels.encode(np.array(["3", "1"]), "val")) == [1, 0]


def test_a_label_the_training_data_lacks_is_an_error_naming_the_row():
    labels = LabelMap.from_tables(np.array(["a", "b"]))
    with pytest.raises(ValueError, match=r"val: row 2 has label 'z', which the training data"):
        labels.encode(np.array(["a", "b", "z"]), "val")


def test_float_labels_must_be_integral():
    with pytest.raises(ValueError, match="the label of row 1 is not an integer"):
        table([[0.0], [1.0]], [1.0, 1.5])
    assert table([[0.0], [1.0]], [1.0, 2.0]).labels.dtype == np.int64


# ----------------------------------------------------------------------------- prepare
def test_features_are_standardised_with_the_training_statistics_and_columns_reordered():
    rng = np.random.default_rng(2)
    x, y = rng.normal(3, 2, size=(45, 2)), rng.integers(0, 2, 45)
    data = table(x, y, columns=("a", "b"))
    val = table(x[:10, ::-1], y[:10], columns=("b", "a"))  # other column order
    prepared = prepare(data, val, seed=0)
    mean, std = x.mean(0), x.std(0)
    expected = torch.from_numpy((x[:10] - mean) / std).float()
    assert torch.equal(prepared.val[0], expected)
    assert prepared.columns == ("a", "b")
    assert np.array_equal(prepared.standardizer.mean, mean)


def test_one_row_in_nine_is_held_out_stratified_and_seeded():
    y = np.repeat([0, 1, 2], [30, 30, 30])
    kept, held = meta_split(y, seed=4)
    assert len(held) == 10 and len(kept) == 80
    assert sorted(set(kept) | set(held)) == list(range(90))
    assert [int((y[held] == k).sum()) for k in range(3)] in ([4, 3, 3], [3, 4, 3], [3, 3, 4])
    assert np.array_equal(meta_split(y, seed=4)[1], held)
    assert not np.array_equal(meta_split(y, seed=5)[1], held)


def test_mismatched_columns_are_named():
    x, y = np.zeros((20, 2)), np.arange(20) % 2
    data = table(x, y, columns=("a", "b"))
    with pytest.raises(ValueError, match=r"missing 'b'; unexpected 'c'"):
        prepare(data, table(x, y, columns=("a", "c"), name="val"))


def test_non_finite_features_are_named_with_their_row():
    x, y = np.zeros((20, 2)), np.arange(20) % 2
    bad = x.copy()
    bad[7, 1] = np.nan
    with pytest.raises(ValueError, match=r"val: feature 'x1' is not finite in row 7"):
        prepare(table(x, y), table(bad, y, name="val"))


def test_features_too_large_to_standardise_are_named():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 2)), np.arange(40) % 2
    huge = x.copy()
    huge[:, 0] *= 1e160  # the variance overflows float64
    with np.errstate(all="raise"):  # no numpy overflow warning (it would raise here)
        with pytest.raises(ValueError, match=r"^t: feature 'x0' has values too large to standa"):
            prepare(table(huge, y), table(x, y, name="val"))
    far = x.copy()
    far[5, 1] = 1e300  # finite, but infinite once standardised to float32
    with pytest.raises(ValueError, match=r"^val: feature 'x1' in row 5 is 1e\+300, too large"):
        prepare(table(x, y), table(far, y, name="val"))


def test_fewer_than_two_classes_or_rows_are_errors():
    x = np.zeros((20, 1))
    with pytest.raises(ValueError, match="every row has the label 1; a classifier needs"):
        prepare(table(x, np.ones(20, dtype=int)), table(x, np.ones(20, dtype=int)))
    with pytest.raises(ValueError, match="4 rows; training needs at least 5"):
        prepare(table(x[:4], [0, 1, 0, 1]), table(x[:4], [0, 1, 0, 1]))
