"""ConditionalConformal: conditional conformal sets over overlapping groups (issue 50, item 4).

Coverage per group over many random splits of a synthetic with two overlapping groups where
the marginal predictor under-covers both; equality with Mondrian by group on a partition and
with the marginal predictor for one all-rows group; the same cutoffs and sets as MAPIE's
``ConditionalSplitConformalClassifier`` (Gibbs et al.'s exact method, test-only); files,
small and unseen groups, and one-line errors."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import torch

from selfcal._inputs import as_groups
from selfcal.conformal import ConditionalConformal, SplitConformal
from selfcal.exceptions import DegenerateCalibration

ALPHA = 0.1


def _overlapping(n: int = 4000, c: int = 5, seed: int = 0):
    """Logits, labels and two overlapping membership columns: ``north`` (40% of rows) and
    ``old`` (30%, independent of ``north``). The model is right 97% of the time outside both,
    78% in one, 55% in both (and as confident when wrong), so both groups are harder than
    average."""
    rng = np.random.default_rng(seed)
    north = rng.random(n) < 0.4
    old = rng.random(n) < 0.3
    labels = rng.integers(0, c, n)
    right = np.select([north & old, north | old], [0.55, 0.78], 0.97)
    guess = np.where(rng.random(n) < right, labels, rng.integers(0, c, n))
    logits = rng.normal(size=(n, c))
    logits[np.arange(n), guess] += 3.0
    return logits, labels, {"north": north, "old": old}


def _coverage(sets: np.ndarray, labels: np.ndarray) -> float:
    return float(sets[np.arange(len(labels)), labels].mean())


def _subset(groups: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[rows] for k, v in groups.items()}


def test_every_overlapping_group_is_covered_where_the_marginal_under_covers():
    """Over random halvings of one pool (calibration and test rows i.i.d.), each group's
    mean coverage is at least ``1 - alpha`` minus 3 standard errors of the mean over splits
    for the conditional sets, and the marginal sets cover both groups well below it."""
    logits, labels, groups = _overlapping()
    n, n_splits = len(labels), 60
    rng = np.random.default_rng(1)
    names = ("north", "old", "everyone")
    cover: dict[str, dict[str, list[float]]] = {
        m: {g: [] for g in names} for m in ("conditional", "marginal")
    }
    for _ in range(n_splits):
        perm = rng.permutation(n)
        cal, test = perm[: n // 2], perm[n // 2 :]
        conditional = ConditionalConformal(alpha=ALPHA, nonconformity="lac").fit(
            logits=logits[cal], labels=labels[cal], groups=_subset(groups, cal)
        )
        marginal = SplitConformal(alpha=ALPHA, nonconformity="lac").fit(
            logits=logits[cal], labels=labels[cal]
        )
        sets = {
            "conditional": conditional.predict_set(
                logits=logits[test], groups=_subset(groups, test)
            ),
            "marginal": marginal.predict_set(logits=logits[test]),
        }
        rows = {**_subset(groups, test), "everyone": np.ones(len(test), bool)}
        for m, s in sets.items():
            for g in names:
                cover[m][g].append(_coverage(s[rows[g]], labels[test][rows[g]]))
    mean = {m: {g: float(np.mean(v)) for g, v in d.items()} for m, d in cover.items()}
    se = {
        m: {g: float(np.std(v)) / math.sqrt(n_splits) for g, v in d.items()}
        for m, d in cover.items()
    }
    print("mean coverage over splits:", mean, "standard errors:", se)
    for g in names:
        assert mean["conditional"][g] >= 1 - ALPHA - 3 * se["conditional"][g], (g, mean, se)
        assert mean["conditional"][g] <= 1 - ALPHA + 0.03, (g, mean)  # not trivially full
    for g in ("north", "old"):
        assert mean["marginal"][g] < 1 - ALPHA - 0.03, (g, mean)  # the gap it closes


def _mondrian_data(seed: int = 7):
    rng = np.random.default_rng(seed)
    sizes = {"north": 101, "south": 57, "west": 230, "tiny": 5}
    groups = np.concatenate([np.full(k, g) for g, k in sizes.items()])
    rng.shuffle(groups)
    n, c = len(groups), 4
    logits = rng.normal(size=(n, c)) * 2
    p = torch.softmax(torch.from_numpy(logits), dim=1)
    labels = torch.multinomial(p, 1, generator=torch.Generator().manual_seed(seed)).squeeze(1)
    test = rng.normal(size=(300, c)) * 2
    return logits, labels.numpy(), groups, test, rng.choice(list(sizes), 300)


@pytest.mark.parametrize(("score", "alpha"), [("lac", 0.1), ("aps", 0.1), ("raps", 0.05)])
def test_on_a_partition_it_is_mondrian_by_group(score, alpha):
    """One label a row, or the same partition as membership columns: the cutoffs are
    ``SplitConformal(mondrian="group")``'s thresholds (to 1e-12: the program returns a sum of
    coefficients) and the sets are equal; the 5-row group is too small (``+inf``)."""
    logits, labels, groups, test, test_groups = _mondrian_data()
    common = {"alpha": alpha, "nonconformity": score, "seed": 3}
    with pytest.warns(DegenerateCalibration, match=r"'tiny' \(5 rows\)"):
        mondrian = SplitConformal(mondrian="group", **common).fit(
            logits=logits, labels=labels, groups=groups
        )
    expected = dict(zip(mondrian.group_names_, mondrian.threshold_.tolist(), strict=True))
    names = sorted(expected)
    columns = {g: groups == g for g in names}
    for given in (groups, columns):
        with pytest.warns(DegenerateCalibration, match=r"'tiny' \(5 rows\)"):
            model = ConditionalConformal(**common).fit(logits=logits, labels=labels, groups=given)
        cut = model.row_cutoffs(as_groups(names, len(names)))
        for g, value in zip(names, cut.tolist(), strict=True):
            assert value == pytest.approx(expected[g], abs=1e-12, rel=0), (g, value, expected)
        assert math.isinf(cut[names.index("tiny")])
        np.testing.assert_array_equal(
            model.predict_set(logits=test, groups=test_groups),
            mondrian.predict_set(logits=test, groups=test_groups),
        )


def test_one_group_of_every_row_is_the_marginal_predictor():
    logits, labels, _, test, _ = _mondrian_data(11)
    everyone = np.ones((len(labels), 1), bool)
    model = ConditionalConformal(nonconformity="aps").fit(
        logits=logits, labels=labels, groups=everyone
    )
    marginal = SplitConformal(nonconformity="aps").fit(logits=logits, labels=labels)
    cut = model.row_cutoffs(as_groups(np.ones((1, 1), bool), 1))
    assert cut[0] == pytest.approx(marginal.threshold_, abs=1e-12, rel=0)
    np.testing.assert_array_equal(
        model.predict_set(logits=test, groups=np.ones((len(test), 1), bool)),
        marginal.predict_set(logits=test),
    )


def _mapie_classifier(c: int, m: int):
    """MAPIE's ``ConditionalSplitConformalClassifier`` on features ``[membership, probs]``:
    a prefit estimator reads the probabilities back, the feature map is ``(1, membership)``.
    MAPIE builds a cvxpy problem used only by its (disabled) RKHS path: without cvxpy that
    builder is replaced by a no-op (it is never read for a finite feature map)."""
    mcc = pytest.importorskip("mapie.conditional_conformal_prediction")
    from sklearn.base import BaseEstimator, ClassifierMixin

    class Fixed(ClassifierMixin, BaseEstimator):
        def fit(self, X, y):
            self.classes_ = np.arange(c)
            return self

        def predict_proba(self, X):
            return X[:, m:]

        def predict(self, X):
            return X[:, m:].argmax(1)

    def feature_map(x):
        return np.hstack([np.ones((len(x), 1)), x[:, :m]])

    return mcc, Fixed, feature_map


def test_cutoffs_and_sets_equal_mapie_conditional_conformal(monkeypatch):
    """Three overlapping groups, LAC scores (``1 - p_y`` in both libraries), 400 calibration
    and 40 test rows: every cutoff within 1e-9 of MAPIE's exact conservative cutoff and every
    set equal to MAPIE's public ``predict_set``; the randomised cutoff at the same ``U`` as
    MAPIE's exact computation (its private ``_compute_exact_cutoff``) within 1e-9."""
    m, c = 3, 4
    mcc, fixed, feature_map = _mapie_classifier(c, m)
    try:
        import cvxpy  # noqa: F401
    except ImportError:
        monkeypatch.setattr(mcc, "setup_cvx_problem", lambda *args, **kwargs: None)
    rng = np.random.default_rng(1)

    def draw(n):
        member = rng.random((n, m)) < [0.5, 0.3, 0.2]
        z = rng.normal(size=(n, c)) * (1 + 2 * member[:, 2:3])
        p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
        y = np.array([rng.choice(c, p=row) for row in p])
        q = p ** (1 + 2 * member[:, 1:2])  # the model is over-confident in group 1
        return member, q / q.sum(1, keepdims=True), y

    member, probs, y = draw(400)
    test_member, test_probs, _ = draw(40)
    theirs = mcc.ConditionalSplitConformalClassifier(
        feature_map=feature_map,
        estimator=fixed().fit(None, y),
        confidence_level=1 - ALPHA,
        conformity_score="lac",
        prefit=True,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs.conformalize(np.hstack([member, probs]), y)
        _, their_sets = theirs.predict_set(np.hstack([test_member, test_probs]))
    ours = ConditionalConformal(alpha=ALPHA, nonconformity="lac", randomized=False)
    ours.fit(probs=probs, labels=y, groups=member)
    np.testing.assert_allclose(np.sort(ours.calibration_scores_), np.sort(theirs.scores_calib))
    x_test = np.hstack([test_member, test_probs])
    their_cut = [theirs._predict_conditional_cutoff(1 - ALPHA, x[None]) for x in x_test]
    our_cut = ours.row_cutoffs(as_groups(test_member, 40))
    np.testing.assert_allclose(our_cut, their_cut, atol=1e-9, rtol=0)
    np.testing.assert_array_equal(
        ours.predict_set(probs=test_probs, groups=test_member), their_sets[:, :, 0]
    )
    from selfcal.conformal._conditional import cutoff

    tau = 1 - ALPHA
    quantiles = np.full((len(y) + 1, 1), tau)
    duals, primals = theirs._get_calibration_solution(tau)
    args = (ours.calibration_scores_, ours.calibration_patterns_, ours.patterns_)
    for x in x_test[:15]:
        u = rng.uniform(tau - 1, tau)
        exact = theirs._compute_exact_cutoff(quantiles, primals, duals, feature_map(x[None]), u)
        mine = cutoff(*args, x[:m].astype(np.int64), tau, u)
        assert mine == pytest.approx(float(np.ravel(exact)[0]), abs=1e-9, rel=0)


def test_randomized_cutoff_is_below_the_conservative_one_and_reproducible():
    """``eta_t(S)`` is non-decreasing, so the cutoff at ``U < 1 - alpha`` is at most the
    conservative one, row by row; the same input gives the same sets."""
    logits, labels, groups = _overlapping(600)
    kw = {"alpha": ALPHA, "nonconformity": "lac"}
    conservative = ConditionalConformal(**kw).fit(logits=logits, labels=labels, groups=groups)
    randomized = ConditionalConformal(randomized_cutoff=True, **kw).fit(
        logits=logits, labels=labels, groups=groups
    )
    rows = as_groups(_subset(groups, np.arange(80)), 80)
    low, high = randomized.row_cutoffs(rows), conservative.row_cutoffs(rows)
    assert (low <= high + 1e-12).all() and (low < high - 1e-9).any()
    first = randomized.predict_set(logits=logits[:80], groups=rows)
    np.testing.assert_array_equal(first, randomized.predict_set(logits=logits[:80], groups=rows))


def test_small_and_unseen_groups_get_every_label():
    logits, labels, groups = _overlapping(800)
    rare = np.zeros(len(labels), bool)
    rare[:6] = True
    with pytest.warns(DegenerateCalibration, match=r"'rare' \(6 rows\).*conditional cutoff"):
        model = ConditionalConformal(alpha=ALPHA, randomized=False).fit(
            logits=logits, labels=labels, groups={**groups, "rare": rare}
        )
    sets = model.predict_set(logits=logits, groups={**groups, "rare": rare})
    assert sets[:6].all() and not sets[6:].all()
    new = np.zeros(len(labels), bool)
    new[-3:] = True
    with pytest.warns(UserWarning, match="group\\(s\\) 'elsewhere' were not seen at fit time"):
        sets = model.predict_set(logits=logits, groups={**groups, "rare": rare, "elsewhere": new})
    assert sets[-3:].all()


def test_save_load_round_trip_and_strict_schema(tmp_path):
    logits, labels, groups = _overlapping(500)
    model = ConditionalConformal(alpha=0.2, nonconformity="raps", seed=3).fit(
        logits=logits, labels=labels, groups=groups
    )
    path = tmp_path / "cc.json"
    model.save(path)
    back = SplitConformal.load(path)
    assert type(back) is ConditionalConformal and back.get_params() == model.get_params()
    np.testing.assert_array_equal(
        back.predict_set(logits=logits, groups=groups),
        model.predict_set(logits=logits, groups=groups),
    )
    from selfcal.estimator.persistence import checksum

    doc = json.loads(path.read_text())
    doc["fitted"]["patterns_"]["data"][0] = 2
    doc["checksum"] = checksum(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"patterns_.*\[0, 1\]"):
        ConditionalConformal.load(path)


def test_one_line_errors():
    logits, labels, groups = _overlapping(300)
    model = ConditionalConformal()
    with pytest.raises(ValueError, match="ConditionalConformal needs each row's groups"):
        model.fit(logits=logits, labels=labels)
    short = {"north": groups["north"], "old": groups["old"][:10]}
    with pytest.raises(ValueError, match=r"groups\['old'\] must be one 0/1 .* got \(10,\)"):
        model.fit(logits=logits, labels=labels, groups=short)
    with pytest.raises(ValueError, match="alpha must be"):
        ConditionalConformal(alpha=1.5).fit(logits=logits, labels=labels, groups=groups)
    with pytest.raises(ValueError, match="randomized_cutoff must be True or False"):
        ConditionalConformal(randomized_cutoff="yes").fit(
            logits=logits, labels=labels, groups=groups
        )
    model.fit(logits=logits, labels=labels, groups=groups)
    with pytest.raises(ValueError, match="lacks the membership column 'old'"):
        model.predict_set(logits=logits, groups={"north": groups["north"]})
    with pytest.raises(ValueError, match="to_module: a conditional conformal predictor"):
        model.to_module()
    with pytest.raises(ValueError, match="was fitted on 5 classes"):
        model.predict_set(logits=logits[:, :3], groups=groups)
