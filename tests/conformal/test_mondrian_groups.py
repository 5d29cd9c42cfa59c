"""SplitConformal(mondrian="group"): one threshold per group of rows (issue 50, item 4).

Coverage per group over many random splits of a synthetic whose groups differ in difficulty
(the marginal predictor under-covers the hard one; Mondrian by group covers both), the same
thresholds and sets as a numpy transcription of the group quantile rule and as crepes'
Mondrian classifier, the small-group and unseen-group rules, files, and one-line errors."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import torch

from selfcal.conformal import SplitConformal, conformity_scores
from selfcal.exceptions import DegenerateCalibration

ALPHA = 0.1


def _two_groups(n_per_group: int = 1500, c: int = 5, seed: int = 0):
    """Logits, labels and groups: ``"easy"`` rows, whose model is right 97% of the time, and
    ``"hard"`` rows, right half the time (and as confident when wrong)."""
    rng = np.random.default_rng(seed)
    n = 2 * n_per_group
    groups = np.repeat(np.array(["easy", "hard"]), n_per_group)
    labels = rng.integers(0, c, n)
    right = np.where(groups == "easy", 0.97, 0.5)
    guess = np.where(rng.random(n) < right, labels, rng.integers(0, c, n))
    logits = rng.normal(size=(n, c))
    logits[np.arange(n), guess] += 3.0
    return logits, labels, groups


def _coverage(sets: np.ndarray, labels: np.ndarray) -> float:
    return float(sets[np.arange(len(labels)), labels].mean())


def test_group_coverage_over_random_splits_holds_where_the_marginal_under_covers():
    """Over random halvings of one pool the calibration and test rows are exchangeable within
    each group, so each group's mean coverage is at least ``1 - alpha`` for Mondrian by group;
    the marginal predictor covers on average but the hard group well below ``1 - alpha``.
    Tolerance: 3 standard errors of the mean over splits."""
    logits, labels, groups = _two_groups()
    n, n_splits = len(labels), 100
    rng = np.random.default_rng(1)
    cover = {m: {"easy": [], "hard": []} for m in ("group", "marginal")}
    for _ in range(n_splits):
        perm = rng.permutation(n)
        cal, test = perm[: n // 2], perm[n // 2 :]
        by_group = SplitConformal(alpha=ALPHA, nonconformity="lac", mondrian="group").fit(
            logits=logits[cal], labels=labels[cal], groups=groups[cal]
        )
        marginal = SplitConformal(alpha=ALPHA, nonconformity="lac").fit(
            logits=logits[cal], labels=labels[cal]
        )
        sets = {
            "group": by_group.predict_set(logits=logits[test], groups=groups[test]),
            "marginal": marginal.predict_set(logits=logits[test]),
        }
        for m, s in sets.items():
            for g in ("easy", "hard"):
                rows = groups[test] == g
                cover[m][g].append(_coverage(s[rows], labels[test][rows]))
    mean = {m: {g: float(np.mean(v)) for g, v in d.items()} for m, d in cover.items()}
    se = {
        m: {g: float(np.std(v) / math.sqrt(n_splits)) for g, v in d.items()}
        for m, d in cover.items()
    }
    print("mean coverage per group over splits:", mean, "standard errors:", se)
    for g in ("easy", "hard"):
        assert mean["group"][g] >= 1 - ALPHA - 3 * se["group"][g], (g, mean, se)
        assert mean["group"][g] <= 1 - ALPHA + 0.02, (g, mean)  # not trivially full sets
    assert mean["marginal"]["hard"] < 1 - ALPHA - 0.05, mean  # the gap Mondrian closes
    assert mean["marginal"]["easy"] > 1 - ALPHA, mean


def _group_thresholds(scores: np.ndarray, groups: np.ndarray, alpha: float) -> dict[str, float]:
    """The group quantile rule, transcribed: the ``ceil((n_g + 1)(1 - alpha))``-th smallest
    of the group's ``n_g`` scores, ``+inf`` when that rank exceeds ``n_g``."""
    out = {}
    for g in np.unique(groups):
        s = np.sort(scores[groups == g])
        k = math.ceil(round((len(s) + 1) * (1 - alpha), 9))
        out[str(g)] = float(s[k - 1]) if k <= len(s) else math.inf
    return out


@pytest.mark.parametrize("score", ["lac", "aps"])
def test_thresholds_and_sets_equal_a_transcription_and_crepes_mondrian(score):
    """Groups of 101, 57, 230 and 5 rows (none with an integer ``(n_g + 1)(1 - alpha)``,
    where crepes also takes the next score: see test_reference); the 5-row group is too
    small (``+inf``)."""
    rng = np.random.default_rng(7)
    sizes = {"north": 101, "south": 57, "west": 230, "tiny": 5}
    groups = np.concatenate([np.full(k, g) for g, k in sizes.items()])
    rng.shuffle(groups)
    n, c = len(groups), 4
    p = torch.softmax(torch.from_numpy(rng.normal(size=(n, c)) * 2), dim=1)
    y = torch.multinomial(p, 1, generator=torch.Generator().manual_seed(7)).squeeze(1)
    q = torch.softmax(torch.from_numpy(rng.normal(size=(300, c)) * 2), dim=1)
    test_groups = rng.choice(list(sizes), 300)
    with pytest.warns(DegenerateCalibration, match=r"group\(s\) 'tiny' \(5 rows\)"):
        mine = SplitConformal(alpha=ALPHA, nonconformity=score, randomized=False, mondrian="group")
        mine.fit(probs=p.numpy(), labels=y.numpy(), groups=groups)
    cal = conformity_scores(p, y, score=score, randomized=False).numpy()
    expected = _group_thresholds(cal, groups, ALPHA)
    assert mine.group_names_ == sorted(sizes)
    assert dict(zip(mine.group_names_, mine.threshold_.tolist(), strict=True)) == expected
    assert dict(zip(mine.group_names_, mine.group_counts_.tolist(), strict=True)) == sizes
    ours = mine.predict_set(probs=q.numpy(), groups=test_groups)
    test = conformity_scores(q, score=score, randomized=False).numpy()
    transcribed = test <= np.array([expected[g] for g in test_groups])[:, None]
    np.testing.assert_array_equal(ours, transcribed)
    assert ours[test_groups == "tiny"].all()

    crepes = pytest.importorskip("crepes").ConformalClassifier
    cc = crepes().fit(cal, bins=groups)
    theirs = np.stack(
        [
            cc.predict_set(test[:, [k]], bins=test_groups, confidence=1 - ALPHA, smoothing=False)[
                :, 0
            ]
            for k in range(c)
        ],
        axis=1,
    ).astype(bool)
    np.testing.assert_array_equal(ours, theirs)


def test_mondrian_true_is_mondrian_class_and_unchanged():
    logits, labels, _ = _two_groups(200)
    a = SplitConformal(mondrian=True).fit(logits=logits, labels=labels)
    b = SplitConformal(mondrian="class").fit(logits=logits, labels=labels)
    np.testing.assert_array_equal(a.threshold_, b.threshold_)
    assert a.group_names_ == [] and a.group_counts_.shape == (0,)
    np.testing.assert_array_equal(a.predict_set(logits=logits), b.predict_set(logits=logits))


def test_small_group_gets_every_label_and_a_warning_naming_it():
    logits, labels, groups = _two_groups(200)
    groups = groups.astype(object)
    groups[:7] = "rare"
    with pytest.warns(DegenerateCalibration) as caught:
        model = SplitConformal(alpha=ALPHA, mondrian="group").fit(
            logits=logits, labels=labels, groups=groups
        )
    message = str(caught[0].message)
    assert "'rare' (7 rows)" in message and "per group" in message and "9 calibration" in message
    j = model.group_names_.index("rare")
    assert math.isinf(model.threshold_[j]) and np.isfinite(np.delete(model.threshold_, j)).all()
    sets = model.predict_set(logits=logits, groups=groups)
    assert sets[:7].all() and not sets[7:].all()
    # 9 rows is enough at alpha = 0.1: ceil(10 * 0.9) = 9
    groups[:9] = "rare"
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateCalibration)
        model.fit(logits=logits, labels=labels, groups=groups)
    assert np.isfinite(model.threshold_).all()


def test_unseen_group_gets_every_label_with_a_warning():
    logits, labels, groups = _two_groups(200)
    model = SplitConformal(mondrian="group", randomized=False)  # the same sets row by row
    model.fit(logits=logits, labels=labels, groups=groups)
    new = groups.copy().astype(object)
    new[:3] = "elsewhere"
    with pytest.warns(UserWarning, match="group\\(s\\) 'elsewhere' were not seen at fit time"):
        sets = model.predict_set(logits=logits, groups=new)
    assert sets[:3].all()
    np.testing.assert_array_equal(sets[3:], model.predict_set(logits=logits[3:], groups=groups[3:]))


def test_groups_from_predictions_and_torch_in_torch_out():
    from selfcal.predictions import Predictions

    logits, labels, groups = _two_groups(200)
    pred = Predictions.from_logits(logits, labels, groups)
    a = SplitConformal(mondrian="group").fit(pred)
    b = SplitConformal(mondrian="group").fit(logits=logits, labels=labels, groups=groups)
    np.testing.assert_array_equal(a.threshold_, b.threshold_)
    np.testing.assert_array_equal(a.predict_set(pred), b.predict(logits=logits, groups=groups))
    out = a.predict_set(logits=torch.from_numpy(logits), groups=groups)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bool


def test_save_load_round_trip_and_strict_schema(tmp_path):
    logits, labels, groups = _two_groups(200)
    groups = groups.astype(object)
    groups[:4] = "rare"
    with pytest.warns(DegenerateCalibration):
        model = SplitConformal(alpha=0.05, nonconformity="raps", mondrian="group", seed=3).fit(
            logits=logits, labels=labels, groups=groups
        )
    path = tmp_path / "cp.json"
    model.save(path)
    back = SplitConformal.load(path)
    assert back.get_params() == model.get_params() and back.mondrian == "group"
    assert back.group_names_ == model.group_names_
    np.testing.assert_array_equal(back.threshold_, model.threshold_)
    np.testing.assert_array_equal(back.group_counts_, model.group_counts_)
    np.testing.assert_array_equal(
        back.predict_set(logits=logits, groups=groups),
        model.predict_set(logits=logits, groups=groups),
    )
    # a marginal predictor's file round-trips with empty groups
    SplitConformal().fit(logits=logits, labels=labels).save(tmp_path / "m.json")
    assert SplitConformal.load(tmp_path / "m.json").group_names_ == []
    # a file whose group names repeat is refused (checksum recomputed: the schema refuses)
    from selfcal.estimator.persistence import checksum

    doc = json.loads(path.read_text())
    doc["fitted"]["group_names_"][1] = doc["fitted"]["group_names_"][0]
    doc["checksum"] = checksum(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="group_names_ must be a list of distinct non-empty"):
        SplitConformal.load(path)


def test_one_line_errors():
    logits, labels, groups = _two_groups(100)
    group_model = SplitConformal(mondrian="group")
    with pytest.raises(ValueError, match="mondrian='group' needs each row's group"):
        group_model.fit(logits=logits, labels=labels)
    with pytest.raises(ValueError, match="groups has length 10; expected one group per row"):
        group_model.fit(logits=logits, labels=labels, groups=groups[:10])
    bad = groups.astype(object)
    bad[5] = None
    with pytest.raises(ValueError, match="groups must name a group in every row; row 5 has None"):
        group_model.fit(logits=logits, labels=labels, groups=bad)
    with pytest.raises(ValueError, match="row 2 has NaN"):
        group_model.fit(logits=logits, labels=labels, groups=np.r_[1.0, 2.0, np.nan, [1.0] * 197])
    membership = np.stack([groups == "easy", np.ones(len(groups), bool)], 1)
    with pytest.raises(ValueError) as err:
        group_model.fit(logits=logits, labels=labels, groups=membership)
    assert str(err.value) == (
        "Mondrian needs one group per row; for overlapping groups (membership columns) use "
        "ConditionalConformal"
    )
    group_model.fit(logits=logits, labels=labels, groups=groups)
    with pytest.raises(ValueError, match="mondrian='group' needs each row's group"):
        group_model.predict_set(logits=logits)
    with pytest.raises(ValueError, match="to_module: a Mondrian-by-group predictor"):
        group_model.to_module()
    with pytest.raises(ValueError, match="groups= is used only by mondrian='group'"):
        SplitConformal().fit(logits=logits, labels=labels, groups=groups)
    with pytest.raises(ValueError, match="mondrian must be False, True, 'class' or 'group'"):
        SplitConformal(mondrian="groups").fit(logits=logits, labels=labels)
