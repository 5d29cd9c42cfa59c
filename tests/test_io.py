"""selfcal.io on its own: every reader gives back exactly the arrays written (``.npz`` with logits
or probabilities, the ``.npy`` pair, ``.csv`` with and without pyarrow, ``.parquet``), the label
column option, :func:`~selfcal.io.save_probs` round trips, and the errors name what is wrong."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from selfcal.io import (
    check_probs_output,
    load_predictions,
    read_arrays,
    resolve_path,
    save_probs,
)


def scores(n: int = 40, c: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(logits, probs, labels)``: random logits, their softmax and integer labels."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, c)) * 2
    p = np.exp(z - z.max(1, keepdims=True))
    return z, p / p.sum(1, keepdims=True), rng.integers(0, c, n)


def write_csv(path: Path, columns: dict[str, np.ndarray]) -> Path:
    """A CSV with a header line and ``repr`` floats (exact round trip)."""
    rows = zip(*columns.values())
    lines = [",".join(columns)] + [",".join(repr(v.item()) for v in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def prob_columns(p: np.ndarray, prefix: str = "prob") -> dict[str, np.ndarray]:
    return {f"{prefix}_{j}": p[:, j] for j in range(p.shape[1])}


# ----------------------------------------------------------------------------- .npz
def test_npz_with_logits(tmp_path):
    z, _, y = scores()
    np.savez(tmp_path / "a.npz", logits=z, labels=y)
    pred = load_predictions(tmp_path / "a.npz")
    assert pred.kind == "logits"
    np.testing.assert_array_equal(pred.scores.numpy(), z)
    np.testing.assert_array_equal(pred.labels.numpy(), y)


def test_npz_with_probs(tmp_path):
    _, p, y = scores()
    np.savez(tmp_path / "a.npz", probs=p, labels=y)
    pred = load_predictions(tmp_path / "a.npz")
    assert pred.kind == "probs"
    np.testing.assert_array_equal(pred.scores.numpy(), p)
    np.testing.assert_array_equal(pred.labels.numpy(), y)


def test_npz_with_both_needs_a_kind(tmp_path):
    z, p, y = scores()
    np.savez(tmp_path / "a.npz", logits=z, probs=p, labels=y)
    with pytest.raises(ValueError, match="found both 'logits' and 'probs'.*pass --kind"):
        load_predictions(tmp_path / "a.npz")
    pred = load_predictions(tmp_path / "a.npz", kind="probs")
    assert pred.kind == "probs"
    np.testing.assert_array_equal(pred.scores.numpy(), p)


def test_npz_missing_arrays(tmp_path):
    _, _, y = scores()
    np.savez(tmp_path / "none.npz", labels=y)
    with pytest.raises(ValueError, match="neither 'logits' nor 'probs' \\(arrays: labels\\)"):
        read_arrays(tmp_path / "none.npz")
    z, _, _ = scores()
    np.savez(tmp_path / "logits.npz", logits=z, labels=y)
    with pytest.raises(ValueError, match="no 'probs' array \\(arrays: logits, labels\\)"):
        read_arrays(tmp_path / "logits.npz", kind="probs")
    np.savez(tmp_path / "unlabelled.npz", logits=z)
    with pytest.raises(ValueError, match="unlabelled.npz: no labels \\(array 'labels' not found"):
        load_predictions(tmp_path / "unlabelled.npz")
    pred = load_predictions(tmp_path / "unlabelled.npz", require_labels=False)
    assert pred.labels is None and pred.n_samples == len(z)


# ----------------------------------------------------------------------------- .npy pair
def test_npy_pair_from_either_file(tmp_path):
    z, _, y = scores()
    np.save(tmp_path / "run.logits.npy", z)
    np.save(tmp_path / "run.labels.npy", y)
    for given in ("run.logits.npy", "run.labels.npy"):
        kind, got_scores, got_labels = read_arrays(tmp_path / given)
        assert kind == "logits"
        np.testing.assert_array_equal(got_scores, z)
        np.testing.assert_array_equal(got_labels, y)


def test_npy_pair_errors(tmp_path):
    z, p, y = scores()
    np.save(tmp_path / "run.labels.npy", y)
    with pytest.raises(ValueError, match="exactly one of run.logits.npy / run.probs.npy.*found 0"):
        read_arrays(tmp_path / "run.labels.npy")
    np.save(tmp_path / "run.logits.npy", z)
    np.save(tmp_path / "run.probs.npy", p)
    with pytest.raises(ValueError, match="found 2"):
        read_arrays(tmp_path / "run.labels.npy")
    with pytest.raises(ValueError, match="the file name says 'logits' but --kind is 'probs'"):
        read_arrays(tmp_path / "run.logits.npy", kind="probs")
    np.save(tmp_path / "plain.npy", z)
    with pytest.raises(ValueError, match="must be named NAME.logits.npy or NAME.probs.npy"):
        read_arrays(tmp_path / "plain.npy")
    with pytest.raises(FileNotFoundError, match="other.probs.npy: no such file"):
        read_arrays(tmp_path / "other.probs.npy")


# ----------------------------------------------------------------------------- .csv / .parquet
def test_csv_prob_columns_and_label(tmp_path):
    _, p, y = scores()
    path = write_csv(tmp_path / "a.csv", prob_columns(p) | {"label": y})
    pred = load_predictions(path)
    assert pred.kind == "probs"
    np.testing.assert_array_equal(pred.scores.numpy(), p)
    np.testing.assert_array_equal(pred.labels.numpy(), y)


def test_csv_columns_are_ordered_by_class_index(tmp_path):
    z, _, y = scores(c=12)
    columns = {f"logits_{j}": z[:, j] for j in reversed(range(12))} | {"label": y}
    kind, got, _ = read_arrays(write_csv(tmp_path / "a.csv", columns))
    assert kind == "logits"
    np.testing.assert_array_equal(got, z)  # logits_10 after logits_9, not after logits_1


def test_csv_label_column_option(tmp_path):
    z, _, y = scores()
    path = write_csv(tmp_path / "a.csv", prob_columns(z, "logit") | {"target": y})
    with pytest.raises(ValueError, match="no labels \\(column 'label' not found; columns: logit_0"):
        load_predictions(path)
    pred = load_predictions(path, label_column="target")
    np.testing.assert_array_equal(pred.labels.numpy(), y)
    np.testing.assert_array_equal(pred.scores.numpy(), z)


def test_csv_single_binary_column(tmp_path):
    rng = np.random.default_rng(3)
    s, y = rng.normal(size=30), rng.integers(0, 2, 30)
    kind, got, labels = read_arrays(write_csv(tmp_path / "b.csv", {"logit": s, "label": y}))
    assert kind == "logits" and got.shape == (30, 1)
    np.testing.assert_array_equal(got[:, 0], s)
    np.testing.assert_array_equal(labels, y)


def test_csv_with_kind_uses_every_other_column_in_file_order(tmp_path):
    z, _, y = scores()
    columns = {"b": z[:, 0], "label": y, "a": z[:, 1], "c": z[:, 2]}
    path = write_csv(tmp_path / "a.csv", columns)
    with pytest.raises(ValueError, match="no score columns: name them logit_0"):
        read_arrays(path)
    kind, got, labels = read_arrays(path, kind="logits")
    assert kind == "logits"
    np.testing.assert_array_equal(got, z)
    np.testing.assert_array_equal(labels, y)


@pytest.mark.parametrize(
    ("columns", "match"),
    [
        ({"logit_0": [1.0], "prob_0": [1.0]}, "both logit_\\* and prob_\\* columns"),
        ({"prob_0": [1.0], "prob_2": [0.0]}, "numbered 0..1 without gaps; got indices \\[0, 2\\]"),
        ({"prob": [1.0], "prob_0": [0.0]}, "mix of indexed and unindexed probs columns"),
        ({"label": [1.0]}, "no score columns"),
    ],
)
def test_csv_column_errors(tmp_path, columns, match):
    path = write_csv(tmp_path / "a.csv", {k: np.asarray(v) for k, v in columns.items()})
    with pytest.raises(ValueError, match=match):
        read_arrays(path)


def test_csv_kind_must_match_the_column_names(tmp_path):
    _, p, y = scores()
    path = write_csv(tmp_path / "a.csv", prob_columns(p) | {"label": y})
    with pytest.raises(ValueError, match="--kind is 'logits' but the columns are named probs"):
        read_arrays(path, kind="logits")


def test_csv_without_pyarrow_reads_the_same(tmp_path, monkeypatch):
    _, p, y = scores()
    path = write_csv(tmp_path / "a.csv", prob_columns(p) | {"label": y})
    with_pyarrow = read_arrays(path)
    monkeypatch.setitem(sys.modules, "pyarrow.csv", None)  # import fails -> numpy fallback
    without = read_arrays(path)
    assert without[0] == with_pyarrow[0] == "probs"
    np.testing.assert_array_equal(without[1], p)
    np.testing.assert_array_equal(without[2], y)


def test_parquet_reads_score_and_label_columns(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    z, _, y = scores()
    table = pa.table(prob_columns(z, "logit") | {"y": y})
    pq.write_table(table, tmp_path / "a.parquet")
    pred = load_predictions(tmp_path / "a.parquet", label_column="y")
    assert pred.kind == "logits"
    np.testing.assert_array_equal(pred.scores.numpy(), z)
    np.testing.assert_array_equal(pred.labels.numpy(), y)
    pq.write_table(pa.table({"logit_0": ["a"], "label": [0]}), tmp_path / "text.parquet")
    with pytest.raises(ValueError, match="column 'logit_0' must be numeric"):
        read_arrays(tmp_path / "text.parquet")


# ----------------------------------------------------------------------------- save_probs
@pytest.mark.parametrize("name", ["out.npz", "out.probs.npy", "out.csv", "out.parquet"])
def test_save_probs_round_trip(tmp_path, name):
    if name.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    _, p, y = scores()
    written = save_probs(tmp_path / "sub" / name, torch.from_numpy(p), y)
    assert written == tmp_path / "sub" / name and written.is_file()
    pred = load_predictions(written)
    assert pred.kind == "probs"
    np.testing.assert_array_equal(pred.scores.numpy(), p)
    np.testing.assert_array_equal(pred.labels.numpy(), y)


def test_save_probs_binary_scores_and_no_labels(tmp_path):
    positive = np.array([0.1, 0.8, 0.5])
    kind, got, labels = read_arrays(save_probs(tmp_path / "b.npz", positive))
    assert kind == "probs" and labels is None
    np.testing.assert_array_equal(got, np.stack([1 - positive, positive], axis=1))
    with pytest.raises(ValueError, match="name the output NAME.probs.npy"):
        save_probs(tmp_path / "b.npy", positive)


def test_save_probs_writes_the_name_given(tmp_path):
    """``.NPZ`` is an ``.npz`` file, written under that name (``np.savez`` alone would write
    ``o.NPZ.npz``); what it cannot write is refused by :func:`check_probs_output` first."""
    _, p, y = scores()
    assert save_probs(tmp_path / "o.NPZ", p, y) == tmp_path / "o.NPZ"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["o.NPZ"]
    np.testing.assert_array_equal(load_predictions(tmp_path / "o.NPZ").scores.numpy(), p)
    (tmp_path / "d.npz").mkdir()
    with pytest.raises(ValueError, match="d.npz: is a folder; name an output file"):
        check_probs_output(tmp_path / "d.npz")
    assert check_probs_output(str(tmp_path / "a.probs.npy")) == tmp_path / "a.probs.npy"


# ----------------------------------------------------------------------------- no header
def headerless(path: Path, *columns: np.ndarray, fmt: str = "%.18e") -> Path:
    """What ``np.savetxt`` writes without ``header=``: data from the first line on."""
    np.savetxt(path, np.column_stack(columns), delimiter=",", fmt=fmt)
    return path


def test_a_csv_whose_first_row_is_data_is_named_so(tmp_path):
    z, p, y = scores(c=3)
    data_row = "the first row looks like data, not column names"
    path = headerless(tmp_path / "a.csv", z, y)
    header = re.escape("add a header (logit_0..logit_2, label; prob_* for probabilities)")
    for kind in (None, "logits"):
        with pytest.raises(ValueError, match=f"a.csv: {data_row} \\(.*, …\\): {header}"):
            read_arrays(path, kind=kind)
    unlabelled = headerless(tmp_path / "u.csv", z)  # would lose its first row silently
    with pytest.raises(ValueError, match=f"u.csv: {data_row}"):
        load_predictions(unlabelled, kind="logits", require_labels=False)
    rounded = headerless(tmp_path / "r.csv", np.round(p, 1), y, fmt="%g")  # repeated names
    with pytest.raises(ValueError, match=f"r.csv: {data_row}"):
        read_arrays(rounded)


def test_class_indices_as_column_names_are_still_a_header(tmp_path):
    """``DataFrame(logits).to_csv(index=False)`` names the columns 0 .. C-1: with --kind,
    every row is data and the header a header."""
    z, _, y = scores(c=3)
    path = write_csv(tmp_path / "i.csv", {str(j): z[:, j] for j in range(3)})
    kind, got, labels = read_arrays(path, kind="logits")
    assert kind == "logits" and labels is None
    np.testing.assert_array_equal(got, z)
    with pytest.raises(ValueError, match="no labels \\(column 'label' not found; columns: 0, 1"):
        load_predictions(path, kind="logits")


# ----------------------------------------------------------------------------- paths, kinds
def test_unknown_suffix_missing_file_folder_and_bad_kind(tmp_path):
    (tmp_path / "a.txt").write_text("1,2\n")
    with pytest.raises(ValueError, match="unknown file type '.txt'; use .npz, .npy"):
        read_arrays(tmp_path / "a.txt")
    with pytest.raises(ValueError, match="unknown file type '\\(no extension\\)'"):
        read_arrays(tmp_path / "noext")
    with pytest.raises(ValueError, match="out.txt: unknown output type '.txt'; write .npz, .csv"):
        save_probs(tmp_path / "out.txt", np.eye(2))
    with pytest.raises(FileNotFoundError, match="missing.npz: no such file"):
        read_arrays(tmp_path / "missing.npz")
    (tmp_path / "folder.csv").mkdir()
    with pytest.raises(ValueError, match="is a folder, not a file"):
        read_arrays(tmp_path / "folder.csv")
    with pytest.raises(ValueError, match="kind"):
        read_arrays(tmp_path / "missing.npz", kind="scores")


def test_example_names_resolve_to_bundled_files():
    path = resolve_path("example:digits_test")
    assert path.name == "digits_test.npz" and path.is_file()
    assert resolve_path("plain.npz") == Path("plain.npz")
    pred = load_predictions("example:digits_test")
    assert pred.n_samples > 0 and pred.labels is not None


# ----------------------------------------------------------------------------- new users
def test_a_folder_is_named_a_folder_before_its_suffix_is_judged(tmp_path):
    (tmp_path / "adir").mkdir()
    with pytest.raises(ValueError, match=r"adir: is a folder, not a file; pass one predictions"):
        read_arrays(tmp_path / "adir")


def test_damaged_empty_and_object_files_name_the_problem(tmp_path):
    (tmp_path / "x.npz").write_text("hello")
    (tmp_path / "e.npz").write_bytes(b"")
    np.savez(tmp_path / "o.npz", probs=np.array([[0.5, 0.5]], dtype=object), labels=[0])
    cases = {
        "x.npz": r"x.npz: not a valid \.npz archive \(not a zip file\)$",
        "e.npz": r"e.npz: the file is empty \(0 bytes\)$",
        "o.npz": r"o.npz: the array 'probs' holds non-numeric \(object\) values, which selfcal",
    }
    for name, message in cases.items():
        with pytest.raises(ValueError, match=message):
            load_predictions(tmp_path / name)


def test_probabilities_named_logits_are_refused_unless_kind_says_logits(tmp_path):
    _, p, y = scores()
    np.savez(tmp_path / "f.npz", logits=p, labels=y)
    with pytest.raises(ValueError) as info:
        load_predictions(tmp_path / "f.npz")
    assert str(info.value) == (
        f"{tmp_path / 'f.npz'}: the array 'logits' holds probabilities (every row lies in [0, 1] "
        "and sums to 1); rename it 'probs', or pass --kind logits (kind='logits' in Python) if "
        "these really are logits"
    )
    pred = load_predictions(tmp_path / "f.npz", kind="logits")
    assert pred.kind == "logits"
    np.testing.assert_array_equal(pred.scores.numpy(), p)
    z, _, _ = scores()
    assert load_predictions(write_npz(tmp_path / "z.npz", logits=z, labels=y)).kind == "logits"


def write_npz(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)
    return path


def test_string_labels_in_a_csv_get_the_one_message(tmp_path):
    z, _, y = scores()
    names = np.array(["cat", "dog", "emu"])[y]
    path = tmp_path / "s.csv"
    lines = ["logit_0,logit_1,logit_2,label"]
    lines += [f"{a!r},{b!r},{c!r},{n}" for (a, b, c), n in zip(z.tolist(), names)]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError) as info:
        load_predictions(path)
    assert str(info.value) == (
        f"{path}: labels must be integer class indices in [0, C), got class names (e.g. "
        f"{str(names[0])!r}); map each name to the index of its score column first"
    )
