"""``selfcal evaluate --conformal ALPHA --conformal-groups``: group-conditional sets (Mondrian by
group, conditional conformal over overlapping groups) scored beside the marginal ones, each
group's coverage equal to the library's on the same split; the choice that the rows cannot
take is one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.cli import run

from selfcal import Predictions
from selfcal.conformal import ConditionalConformal, SplitConformal
from selfcal.io import load_predictions, write_table

N = 600
RNG = np.random.default_rng(3)
Y = RNG.integers(0, 4, N)
SUBJECT = RNG.choice(["law", "math", "virology"], N, p=[0.5, 0.3, 0.2])
SITE = RNG.choice(["a", "b"], N)
VIROLOGY, SITE_B = SUBJECT == "virology", SITE == "b"
RIGHT = np.select([VIROLOGY & SITE_B, VIROLOGY, SITE_B], [0.4, 0.5, 0.85], 0.97)
GUESS = np.where(RNG.random(N) < RIGHT, Y, RNG.integers(0, 4, N))
Z = RNG.normal(size=(N, 4))
Z[np.arange(N), GUESS] += 3.0


def _split(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The CLI's split without --conformal-calibration: a seeded random half calibrates."""
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[: n // 2]), np.sort(order[n // 2 :])


def _per_group(sets: np.ndarray, labels: np.ndarray, member: dict[str, np.ndarray]) -> dict:
    return {
        g: (sets[rows, labels[rows]].mean(), sets[rows].sum(1).mean()) for g, rows in member.items()
    }


def _check(got: list[dict], expected: dict) -> None:
    assert sorted(g["name"] for g in got) == sorted(expected)
    for row in got:
        coverage, size = expected[row["name"]]
        assert row["coverage"] == pytest.approx(coverage) and row["set_size"] == pytest.approx(size)


def test_default_with_one_group_a_row_is_mondrian_beside_the_marginal(tmp_path, capsys):
    np.savez(tmp_path / "a.npz", logits=Z, labels=Y, groups=SUBJECT)
    args = ("evaluate", tmp_path / "a.npz", "--conformal", "0.1", "--resamples", 20)
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    conformal = json.loads(out)["conformal"]
    extra = conformal["group_conditional"]
    assert extra["method"] == "mondrian"
    cal, test = _split(N)
    probs = Predictions.from_logits(Z, Y).probs.numpy()
    model = SplitConformal(alpha=0.1, nonconformity="aps", mondrian="group", seed=0)
    model.fit(probs=probs[cal], labels=Y[cal], groups=SUBJECT[cal])
    sets = model.predict_set(probs=probs[test], groups=SUBJECT[test])
    member = {g: SUBJECT[test] == g for g in ("law", "math", "virology")}
    _check(extra["groups"], _per_group(sets, Y[test], member))
    coverage = sets[np.arange(len(test)), Y[test]].mean()
    assert extra["metrics"]["coverage"]["value"] == pytest.approx(coverage)
    # the marginal sets under-cover the hard group; Mondrian's do not (here)
    marginal = {g["name"]: g["coverage"] for g in conformal["groups"]}
    mondrian = {g["name"]: g["coverage"] for g in extra["groups"]}
    assert marginal["virology"] < 0.85 <= mondrian["virology"]
    code, out, err = run(capsys, *args)
    assert code == 0, err
    words = " ".join(out.split())
    assert "(marginal and mondrian sets)" in words
    assert "the 3 least covered of 3 groups (by the marginal sets)" in words
    code, out, err = run(capsys, *args, "--json", "--conformal-groups", "none")
    assert code == 0 and "group_conditional" not in json.loads(out)["conformal"]
    code, out, err = run(capsys, *args, "--json", "--conformal-groups", "conditional")
    assert code == 0, err
    same = json.loads(out)["conformal"]["group_conditional"]  # a partition: the same sets
    assert same["method"] == "conditional" and same["groups"] == extra["groups"]


def test_overlapping_table_groups_get_conditional_sets(tmp_path, capsys):
    """Two ``--groups`` columns: overlapping groups (one per value of each column), so the
    default is conditional conformal; each group's coverage equals ConditionalConformal's on
    the same split of the same rows."""
    columns = {f"logit_{j}": Z[:, j] for j in range(4)} | {"label": Y}
    path = write_table(tmp_path / "a.csv", columns | {"subject": SUBJECT, "site": SITE})
    args = ("evaluate", path, "--conformal", "0.1", "--resamples", 20, "--seed", 2)
    groups = ("--groups", "subject", "--groups", "site")
    code, out, err = run(capsys, *args, *groups, "--json")
    assert code == 0, err
    extra = json.loads(out)["conformal"]["group_conditional"]
    assert extra["method"] == "conditional"
    pred = load_predictions(path, group_columns=("subject", "site"))
    assert pred.groups is not None and pred.groups.overlapping
    cal, test = _split(N, seed=2)
    model = ConditionalConformal(alpha=0.1, nonconformity="aps", seed=2)
    model.fit(probs=pred.probs[cal], labels=Y[cal], groups=pred.groups[cal])
    sets = model.predict_set(probs=pred.probs[test], groups=pred.groups[test]).numpy()
    membership = pred.groups.membership.numpy()[test]
    member = {g: membership[:, j] for j, g in enumerate(pred.groups.names)}
    _check(extra["groups"], _per_group(sets, Y[test], member))
    code, out, err = run(capsys, *args, *groups, "--conformal-groups", "mondrian")
    assert code == 2 and err.count("\n") == 1
    assert "--conformal-groups mondrian needs one group a row; these groups overlap" in err


def test_conformal_calibration_file_needs_groups_too(tmp_path, capsys):
    np.savez(tmp_path / "a.npz", logits=Z[300:], labels=Y[300:], groups=SUBJECT[300:])
    np.savez(tmp_path / "cal.npz", logits=Z[:300], labels=Y[:300], groups=SUBJECT[:300])
    np.savez(tmp_path / "bare.npz", logits=Z[:300], labels=Y[:300])
    args = ("evaluate", tmp_path / "a.npz", "--conformal", "0.1", "--resamples", 20, "--json")
    code, out, err = run(capsys, *args, "--conformal-calibration", tmp_path / "cal.npz")
    assert code == 0, err
    extra = json.loads(out)["conformal"]["group_conditional"]
    probs = Predictions.from_logits(Z, Y).probs.numpy()
    model = SplitConformal(alpha=0.1, nonconformity="aps", mondrian="group", seed=0)
    model.fit(probs=probs[:300], labels=Y[:300], groups=SUBJECT[:300])
    sets = model.predict_set(probs=probs[300:], groups=SUBJECT[300:])
    member = {g: SUBJECT[300:] == g for g in ("law", "math", "virology")}
    _check(extra["groups"], _per_group(sets, Y[300:], member))
    bare = ("--conformal-calibration", tmp_path / "bare.npz")
    code, out, err = run(capsys, *args, *bare)  # auto: no group sets without groups
    assert code == 0 and "group_conditional" not in json.loads(out)["conformal"]
    code, out, err = run(capsys, *args, *bare, "--conformal-groups", "mondrian")
    assert code == 2 and err.count("\n") == 1
    assert "--conformal-groups mondrian needs each row's groups; --conformal-calibration" in err


def test_bad_choices_are_one_line(tmp_path, capsys):
    np.savez(tmp_path / "a.npz", logits=Z, labels=Y, groups=SUBJECT)
    np.savez(tmp_path / "b.npz", logits=Z, labels=Y)
    code, out, err = run(capsys, "evaluate", tmp_path / "a.npz", "--conformal-groups", "none")
    assert code == 2 and err.count("\n") == 1 and "--conformal-groups needs --conformal" in err
    args = ("--conformal", "0.1", "--resamples", 10)
    code, out, err = run(
        capsys, "evaluate", tmp_path / "a.npz", *args, "--conformal-groups", "crepes"
    )
    assert code == 2 and err.count("\n") == 1 and "--conformal-groups must be one of" in err
    code, out, err = run(
        capsys, "evaluate", tmp_path / "b.npz", *args, "--conformal-groups", "conditional"
    )
    assert code == 2 and err.count("\n") == 1
    assert "--conformal-groups conditional needs each row's groups; the scored rows" in err


def test_calibrate_conformal_scores_the_calibrated_rows_sets(tmp_path, capsys):
    """``selfcal calibrate --conformal``: sets of the calibrated ``--apply`` probabilities
    (the written ones), a seeded random half of ``--apply`` calibrating them; the marginal
    and Mondrian coverage in the table equal the library's on that split."""
    np.savez(tmp_path / "fit.npz", logits=Z[:300], labels=Y[:300], groups=SUBJECT[:300])
    np.savez(tmp_path / "apply.npz", logits=Z[300:], labels=Y[300:], groups=SUBJECT[300:])
    np.savez(tmp_path / "nolabels.npz", logits=Z[300:])
    out_file = tmp_path / "out.npz"
    args = ("calibrate", "--fit", tmp_path / "fit.npz", "--out", out_file, "--conformal", "0.1")
    code, out, err = run(capsys, *args, "--apply", tmp_path / "apply.npz", "--conformal-seed", 4)
    assert code == 0, err
    probs = np.load(out_file)["probs"]
    labels, groups = Y[300:], SUBJECT[300:]
    cal, test = _split(300, seed=4)
    coverage = []
    for mondrian in (False, "group"):
        model = SplitConformal(alpha=0.1, nonconformity="aps", mondrian=mondrian, seed=4)
        kw = {"groups": groups[cal]} if mondrian else {}
        model.fit(probs=probs[cal], labels=labels[cal], **kw)
        kw = {"groups": groups[test]} if mondrian else {}
        sets = model.predict_set(probs=probs[test], **kw)
        coverage.append(f"{sets[np.arange(len(test)), labels[test]].mean():.4f}")
    row = next(line for line in out.splitlines() if "│ coverage " in line)
    assert row.split("│")[2].strip() == coverage[0] and row.split("│")[4].strip() == coverage[1]
    words = " ".join(out.split())
    assert "(marginal and mondrian sets)" in words and "--json" not in words
    code, out, err = run(capsys, *args, "--apply", tmp_path / "nolabels.npz")
    assert code == 2 and err.count("\n") == 1 and "--conformal needs labels in --apply" in err
    code, out, err = run(
        capsys, *args, "--apply", tmp_path / "apply.npz", "--conformal-groups", "every"
    )
    assert code == 2 and err.count("\n") == 1 and "--conformal-groups must be one of" in err
