"""Format version 1 (selfcal 0.1.0, before the checksum) still reads; a file claiming it while
being a later selfcal's is refused.

The fixtures (``fixtures/version1``, written by selfcal 0.1.0 itself at four revisions: see
``make_fixtures.py``) load and predict exactly what 0.1.0 predicted -- including files from
before ``prob_floor_`` and before some hyperparameters existed. A version-1 file is read
without a checksum, so the reliability audit set ``format_version`` to 1, dropped the
checksum, edited a temperature, and the file loaded. What tells the versions apart: a version-1
file has no ``checksum`` and names selfcal 0.1.0 as its writer; its classes and fields are the
same as version 2's, so the content alone cannot.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from selfcal.conformal import SplitConformal
from selfcal.estimator.persistence import checksum
from selfcal.posthoc import Calibrator, build_calibrator

FIXTURES = Path(__file__).parent / "fixtures" / "version1"
FILES = sorted(FIXTURES.glob("*.json"))
PROBE = np.load(FIXTURES / "probe.npz")["logits"]


def loader(path: Path) -> type:
    return SplitConformal if path.name.startswith("conformal") else Calibrator


def predicted(estimator: object, path: Path) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if isinstance(estimator, SplitConformal):
            return np.asarray(estimator.predict_set(logits=PROBE))
        return np.asarray(estimator.predict_proba(logits=PROBE))  # type: ignore[attr-defined]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_a_file_of_selfcal_0_1_reads_and_predicts_as_it_did(path):
    doc = json.loads(path.read_text())
    assert doc["format_version"] == 1 and doc["selfcal_version"] == "0.1.0"
    assert "checksum" not in doc
    name, rev = path.stem.rsplit("-", 1)
    expected = np.load(FIXTURES / f"expected-{rev}.npz")[name]
    estimator = loader(path).load(path)
    np.testing.assert_array_equal(predicted(estimator, path), expected)


def written(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("path", FILES[:3], ids=lambda p: p.stem)
def test_a_version_1_file_with_a_checksum_or_another_writer_is_refused(path, tmp_path):
    doc = json.loads(path.read_text())
    signed = {**doc, "checksum": checksum(doc)}
    with pytest.raises(ValueError, match="claims calibrator format version 1 but carries a "):
        loader(path).load(written(tmp_path, signed))
    later = {**doc, "selfcal_version": "0.2.0"}
    with pytest.raises(ValueError, match=r"which only selfcal 0\.1\.0 wrote, but names selfcal"):
        loader(path).load(written(tmp_path, later))


def test_a_version_2_file_downgraded_to_version_1_is_refused(tmp_path):
    """The audit's case: format_version 1, no checksum, temperature 2.0 -- loaded and
    predicted with the edited temperature."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 300)
    z = rng.normal(size=(300, 4)) * 3
    path = tmp_path / "ts.json"
    build_calibrator("ts").fit(logits=z, labels=y).save(path)
    doc = json.loads(path.read_text())
    doc["format_version"] = 1
    del doc["checksum"]
    doc["fitted"]["temperature_"] = 2.0
    edited = written(tmp_path, doc)
    with pytest.raises(ValueError) as error:
        Calibrator.load(edited)
    message = str(error.value)
    assert (
        message.startswith(f"{edited} claims calibrator format version 1") and "\n" not in message
    )
    # what cannot be told apart: its writer also set to 0.1.0, it reads as version 1 -- and
    # its values are still checked against the schema
    doc["selfcal_version"] = "0.1.0"
    assert Calibrator.load(written(tmp_path, doc)).temperature_ == 2.0
    doc["fitted"]["temperature_"] = -1.0
    with pytest.raises(ValueError, match=r"fitted\.temperature_ must be in \(0, inf\]"):
        Calibrator.load(written(tmp_path, doc))


@pytest.mark.parametrize("version", [True, "1", 1.0, 3, None])
def test_a_format_version_that_is_not_1_or_2_is_refused(tmp_path, version):
    """``true == 1.0 == 1`` in Python: a JSON ``true`` or ``1.0`` was read as version 1,
    skipping the checksum. A version is an integer."""
    doc = json.loads(FILES[0].read_text())
    doc["format_version"] = version
    with pytest.raises(ValueError, match="has calibrator format version"):
        loader(FILES[0]).load(written(tmp_path, doc))


def test_a_version_1_file_may_lack_only_the_hyperparameters_added_while_it_was_written(tmp_path):
    """``vector-c6fb9e3`` predates ``diagonal_l2`` and ``bias_l2`` (both act on the fit only):
    it reads with their defaults. A hyperparameter 0.1.0 always wrote, deleted, is refused."""
    doc = json.loads((FIXTURES / "vector-c6fb9e3.json").read_text())
    assert "bias_l2" not in doc["params"]
    assert Calibrator.load(written(tmp_path, doc)).bias_l2 == 1.0
    del doc["params"]["max_iter"]
    with pytest.raises(ValueError, match=r"params\.max_iter is missing"):
        Calibrator.load(written(tmp_path, doc))


def test_a_nan_or_infinity_literal_is_refused(tmp_path):
    """Python's json reads ``Infinity``, which selfcal never writes: in a version-1 file (no
    checksum) a conformal threshold of ``Infinity`` loaded, and every set held every label."""
    doc = json.loads((FIXTURES / "conformal-de4ffcd.json").read_text())
    doc["fitted"]["threshold_"]["data"][0] = "LITERAL"
    edited = tmp_path / "conformal.json"
    edited.write_text(json.dumps(doc).replace('"LITERAL"', "Infinity"))
    with pytest.raises(ValueError) as error:
        SplitConformal.load(edited)
    assert str(error.value) == (
        f"{edited} is not a calibrator file: it holds Infinity, which selfcal never writes "
        "(JSON has no such number)"
    )
