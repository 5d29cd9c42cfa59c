"""Abstention with a certified threshold on the command line: ``selfcal predict --target-risk
EPS --delta D`` certifies on the validation rows ``selfcal train --conformal-split`` held out
(:mod:`selfcal.pipeline.guarantee`), and ``selfcal evaluate --target-risk`` certifies on a
stated half of a file's rows and scores the other half. Tiny data, as the other CLI tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import TINY, blobs_csvs, run

from selfcal.abstention import GuaranteedAbstention, certify_threshold
from selfcal.cli import main
from selfcal.cli._abstention import split_rows
from selfcal.predictions import Predictions


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return blobs_csvs(tmp_path_factory.mktemp("blobs"))


def _train(files: dict[str, Path], out: Path, *extra: str) -> Path:
    args = ["train", files["train"], "--val", files["val"], "--method", "ce", "--out", out]
    assert main([str(a) for a in [*args, "--overwrite", *TINY, *extra]]) == 0
    return out


@pytest.fixture(scope="module")
def model(files, tmp_path_factory) -> Path:
    return _train(files, tmp_path_factory.mktemp("model"), "--conformal-split", "0.4")


def _held_out_certificate(model: Path, **kwargs):
    with np.load(model / "conformal.npz") as stored:
        probs, labels = stored["probs"], stored["labels"]
    return certify_threshold(probs.max(1), probs.argmax(1) == labels, **kwargs)


@pytest.mark.parametrize("rule", ["ltt", "crc"])
def test_predict_abstains_by_the_threshold_certified_on_the_held_out_rows(
    capsys, files, model, tmp_path, rule
):
    out = tmp_path / "p.npz"
    code, stdout, err = run(
        capsys, "predict", model, files["test"], "--out", out, "--target-risk", "0.2",
        "--delta", "0.1", "--rule", rule, "--json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(stdout)
    expected = _held_out_certificate(model, target_risk=0.2, delta=0.1, rule=rule)
    assert doc["certificate"] == expected.to_json()
    with np.load(out) as written:
        assert (written["abstain"] == expected.abstain(written["confidence"])).all()
        assert doc["abstained"] == int(written["abstain"].sum())
    assert expected.n_rows == 120  # the held-out rows, not the validation rows


def test_predict_states_the_promise_and_the_rows_answered(capsys, files, model, tmp_path):
    code, stdout, err = run(
        capsys, "predict", model, files["test"], "--out", tmp_path / "p.csv",
        "--target-risk", "0.5", "--delta", "0.05",
    )  # fmt: skip
    assert code == 0, err
    said = " ".join(stdout.split())
    assert "with probability at least 0.95 over the draw of the certifying rows" in said
    assert "answering" in said and "Learn-then-Test" in said


def test_nothing_certifiable_abstains_on_every_row_and_says_how_many_rows(
    capsys, files, model, tmp_path
):
    out = tmp_path / "p.npz"
    code, stdout, err = run(
        capsys, "predict", model, files["test"], "--out", out, "--target-risk", "0.001"
    )
    assert code == 0, err
    said = " ".join(stdout.split())
    assert "abstain on every row" in said and "would be needed" in said
    with np.load(out) as written:
        assert written["abstain"].all()


def test_a_folder_without_held_out_rows_is_a_one_line_error(capsys, files, tmp_path):
    plain = _train(files, tmp_path / "plain")
    code, _, err = run(
        capsys, "predict", plain, files["test"], "--out", tmp_path / "p.csv", "--target-risk",
        "0.1",
    )  # fmt: skip
    assert code != 0
    assert "--conformal-split" in err and len(err.strip().splitlines()) == 1
    # the empirical rule needs no held-out rows, and says it promises nothing
    code, stdout, err = run(
        capsys, "predict", plain, files["test"], "--out", tmp_path / "p.csv",
        "--target-risk", "0.1", "--rule", "empirical",
    )  # fmt: skip
    assert code == 0, err
    assert "no promise for new rows" in " ".join(stdout.split())


def test_one_target_at_a_time(capsys, files, model, tmp_path):
    code, _, err = run(
        capsys, "predict", model, files["test"], "--out", tmp_path / "p.csv",
        "--target-risk", "0.1", "--target-accuracy", "0.9",
    )  # fmt: skip
    assert code != 0 and "one of --target-risk" in err


def _predictions_file(tmp_path: Path, groups: bool) -> tuple[Path, Predictions]:
    rng = np.random.default_rng(0)
    n = 2000
    logits = rng.normal(size=(n, 4)) * 2.0
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    labels = np.array([rng.choice(4, p=p) for p in probs])
    arrays = {"probs": probs, "labels": labels}
    if groups:
        arrays["groups"] = np.array(["a", "b", "c"])[rng.integers(0, 3, n)]
    path = tmp_path / "preds.npz"
    np.savez(path, **arrays)
    pred = Predictions.from_probs(probs, labels, groups=arrays.get("groups"))
    return path, pred


@pytest.mark.parametrize("groups", [False, True])
def test_evaluate_certifies_on_one_half_and_scores_the_other(capsys, tmp_path, groups):
    path, pred = _predictions_file(tmp_path, groups)
    code, stdout, err = run(
        capsys, "evaluate", path, "--target-risk", "0.3", "--delta", "0.1", "--json",
        "--resamples", "20",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(stdout)["abstention"]
    cert_rows, scored, _ = split_rows(pred, 0)
    pooled = GuaranteedAbstention(0.3, 0.1).fit(cert_rows.with_groups(None))
    abstain = pooled.predict(scored.with_groups(None))
    first = doc["certificates"][0]
    assert first["group"] is None and first["threshold"] == pooled.certificates_[None].threshold
    assert first["scored"] == scored.n_samples == 1000
    assert first["answered"] == int((~abstain).sum())
    wrong = scored.correct.numpy() < 0.5
    assert first["risk"] == pytest.approx(wrong[~abstain].mean())
    names = {c["group"] for c in doc["certificates"][1:]}
    assert names == ({"a", "b", "c"} if groups else set())


def test_evaluate_rule_options_need_a_target(capsys, tmp_path):
    path, _ = _predictions_file(tmp_path, False)
    code, _, err = run(capsys, "evaluate", path, "--rule", "crc")
    assert code != 0 and "--target-risk" in err
    code, _, err = run(capsys, "evaluate", path, "--target-risk", "0.1", "--rule", "nope")
    assert code != 0 and "--rule" in err


def test_train_keeps_the_guarantee_and_predict_applies_it(capsys, files, tmp_path):
    """``train --target-risk`` keeps the guarantee in the folder (config, report); ``predict``
    given no target applies it, and a target given on the command line replaces it."""
    kept = _train(
        files, tmp_path / "kept", "--conformal-split", "0.4", "--target-risk", "0.5",
        "--rule", "crc",
    )  # fmt: skip
    capsys.readouterr()  # train's own output
    config = json.loads((kept / "config.json").read_text())
    assert config["abstention"] == {"target_risk": 0.5, "delta": 0.05, "rule": "crc"}
    expected = _held_out_certificate(kept, target_risk=0.5, rule="crc")
    report = json.loads((kept / "report.json").read_text())
    assert {k: report["abstention"][k] for k in expected.to_json()} == expected.to_json()
    assert report["abstention"]["promise"] in " ".join((kept / "report.md").read_text().split())
    out = tmp_path / "p.npz"
    code, stdout, err = run(capsys, "predict", kept, files["test"], "--out", out, "--json")
    assert code == 0, err
    assert json.loads(stdout)["certificate"] == expected.to_json()
    with np.load(out) as written:
        assert (written["abstain"] == expected.abstain(written["confidence"])).all()
    code, stdout, err = run(
        capsys, "predict", kept, files["test"], "--out", out, "--target-coverage", "0.5",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["certificate"] is None and doc["threshold"]["kind"] == "coverage"


def test_train_refuses_a_guarantee_without_held_out_rows(capsys, files, tmp_path):
    args = ["train", files["train"], "--val", files["val"], "--method", "ce"]
    code, _, err = run(capsys, *args, "--out", tmp_path / "m", "--target-risk", "0.1", *TINY)
    assert code != 0 and "--conformal-split" in err and len(err.strip().splitlines()) == 1
