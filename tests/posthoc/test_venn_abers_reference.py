"""Venn-Abers against its peers: the ``venn-abers`` package (1.5.4: ``VennAbers``,
``VennAbersCV``, ``predict_proba_prefitted_va``) and MAPIE (1.6: ``VennAbersCalibrator`` in
its prefit mode, and the one-vs-rest function its prefit path calls), with ``precision=None``
(no rounding of the scores). Both ends of every interval and the merged probability must agree
to 1e-10 -- on shared real prediction sets (ResNet-56 on CIFAR-10 and CIFAR-100, Llama-3.1-8B-
Instruct on MMLU; skipped where absent) and on synthetic scores with heavy ties (scores on a
grid, test scores equal to calibration scores). Where the peers do something else, a test pins
the difference: MAPIE's prefit class is one-vs-one beyond two classes, the peers drop classes
absent from the calibration labels, and neither has the top-label form (which is their binary
predictor on confidence and correctness).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from selfcal.posthoc import TopLabelVennAbers, VennAbers

pytestmark = pytest.mark.reference

TOL = 1e-10
SETS = {
    "chenyaofo_resnet56_cifar10": 5000,
    "chenyaofo_resnet56_cifar100": 2000,
    "mmlu_llama31_8b_instruct": 7021,
}
"""Shared sets and the validation / test rows used of each (the peers' one-vs-rest loops take
a few seconds at 2,000 rows of 100 classes)."""


def shared(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    root = os.environ.get("SELFCAL_PREDICTIONS")
    base = Path(root) if root else Path(__file__).parents[3] / "shared" / "prediction-sets"
    folder = base / name
    if not (folder / "val.npz").exists():
        pytest.skip(f"shared prediction set {name} not found")
    n = SETS[name]
    val, test = np.load(folder / "val.npz"), np.load(folder / "test.npz")
    return (
        softmax(val["logits"][:n]),
        val["labels"][:n],
        softmax(test["logits"][:n]),
        test["labels"][:n],
    )


def softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def tied(seed: int, n: int, c: int, grid: int = 20) -> tuple[np.ndarray, ...]:
    """Probabilities on a grid of ``1 / grid`` steps (rows renormalised, then rounded again:
    heavy ties within every column), labels drawn from them, and test rows that are the
    calibration rows shuffled plus fresh ones -- so test scores tie calibration scores."""
    rng = np.random.default_rng(seed)
    raw = rng.dirichlet(np.full(c, 0.7), size=2 * n)
    p = np.round(raw * grid) / grid + 1e-3
    p /= p.sum(1, keepdims=True)
    y = np.array([rng.choice(c, p=row) for row in raw])
    test = np.concatenate([p[rng.permutation(n)[: n // 2]], p[n : n + n // 2]])
    return p[:n], y[:n], test


def binary(p: np.ndarray) -> np.ndarray:
    return np.stack([1 - p[:, 1], p[:, 1]], 1) if p.shape[1] == 2 else p


def _exists(name: str) -> bool:
    root = os.environ.get("SELFCAL_PREDICTIONS")
    base = Path(root) if root else Path(__file__).parents[3] / "shared" / "prediction-sets"
    return (base / name / "val.npz").exists()


CASES = {
    "tied-binary": lambda: tied(1, 400, 2),
    "tied-4": lambda: tied(2, 600, 4),
    "tied-7": lambda: tied(3, 300, 7, grid=8),
    **{name: (lambda name=name: shared(name)[:3]) for name in SETS if _exists(name)},
}
"""Calibration probabilities, labels and test probabilities of each case, loaded when used."""


@pytest.fixture(scope="module", params=list(CASES))
def case(request: pytest.FixtureRequest) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return CASES[request.param]()


def test_one_vs_rest_equals_venn_abers(case):
    va = pytest.importorskip("venn_abers.venn_abers")
    p, y, pt = case
    ours = VennAbers().fit(probs=p, labels=y)
    low, high = ours.predict_interval(probs=pt)
    merged = ours.predict_proba(probs=pt)
    if p.shape[1] == 2:
        peer = va.VennAbers().fit(p, y)
        theirs, pairs = peer.predict_proba(pt)
        pairs = [None, pairs]
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs, pairs = va.predict_proba_prefitted_va(p, y, pt, va_tpe="one_vs_rest")
    np.testing.assert_allclose(merged, theirs, rtol=0, atol=TOL)
    for j in range(1 if p.shape[1] == 2 else 0, p.shape[1]):
        np.testing.assert_allclose(low[:, j], pairs[j][:, 0], rtol=0, atol=TOL)
        np.testing.assert_allclose(high[:, j], pairs[j][:, 1], rtol=0, atol=TOL)


def test_one_vs_rest_equals_mapie(case):
    """Equal to MAPIE's one-vs-rest function, but for ``p1`` where a test score lies above
    every calibration score of its class (and the merged probabilities of those rows):
    :func:`test_mapies_p1_above_every_calibration_score_is_not_isotonic`."""
    pytest.importorskip("mapie")
    from mapie._venn_abers import predict_proba_prefitted_va

    p, y, pt = case
    if p.shape[1] == 2:
        pytest.skip("binary: test_binary_equals_mapies_prefit_calibrator")
    ours = VennAbers().fit(probs=p, labels=y)
    low, high = ours.predict_interval(probs=pt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs, pairs = predict_proba_prefitted_va(p, y, pt, va_tpe="one_vs_all")
    inside = pt <= p.max(0)
    rows = inside.all(1)
    assert rows.mean() > 0.9
    merged = ours.predict_proba(probs=pt)
    np.testing.assert_allclose(merged[rows], theirs[rows], rtol=0, atol=TOL)
    for j in range(p.shape[1]):
        np.testing.assert_allclose(low[:, j], pairs[j][:, 0], rtol=0, atol=TOL)
        within = inside[:, j]
        np.testing.assert_allclose(high[within, j], pairs[j][within, 1], rtol=0, atol=TOL)
        np.testing.assert_array_equal(high[~within, j], 1.0)


class Scores:
    """A "model" whose features are its probabilities: what a prefit peer calibrates."""

    def __init__(self, n_classes: int = 2) -> None:
        self.classes_ = np.arange(n_classes)

    def fit(self, X: np.ndarray, y: np.ndarray, **_: object) -> Scores:
        self.classes_ = np.unique(y)
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(X)

    def get_params(self, deep: bool = True) -> dict[str, object]:
        return {}

    def set_params(self, **_: object) -> Scores:
        return self


def binary_cases(case) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each case as a binary problem: is the label class 0?"""
    p, y, pt = case
    to_binary = lambda q: np.stack([1 - q[:, 0], q[:, 0]], 1)  # noqa: E731
    return to_binary(p), (y == 0).astype(np.int64), to_binary(pt)


def test_binary_equals_mapies_prefit_calibrator(case):
    """Equal to MAPIE's prefit ``VennAbersCalibrator``, but for ``p1`` (and the merged
    probability) where a test score lies above every calibration score."""
    pytest.importorskip("mapie")
    from mapie.calibration import VennAbersCalibrator

    p, y, pt = binary_cases(case)
    ours = VennAbers().fit(probs=p, labels=y)
    peer = VennAbersCalibrator(estimator=Scores(), cv="prefit").fit(p, y)
    theirs, pairs = peer.predict_proba(pt, p0_p1_output=True)
    low, high = ours.predict_interval(probs=pt)
    rows = pt[:, 1] <= p[:, 1].max()
    np.testing.assert_allclose(ours.predict_proba(probs=pt)[rows], theirs[rows], rtol=0, atol=TOL)
    np.testing.assert_allclose(low[:, 1], pairs[:, 0], rtol=0, atol=TOL)
    np.testing.assert_allclose(high[rows, 1], pairs[rows, 1], rtol=0, atol=TOL)
    np.testing.assert_allclose(low[:, 0], 1 - high[:, 1], rtol=0, atol=0)


@pytest.mark.parametrize("merge", ["log", "brier"])
def test_cross_venn_abers_equals_venn_abers_cv(case, merge, monkeypatch):
    """CVAP: ``venn-abers``'s ``VennAbersCV`` with a prefit "model" calibrates one IVAP on
    each stratified fold; given the same folds, ours merges the same pairs the same way."""
    va = pytest.importorskip("venn_abers.venn_abers")
    from sklearn.model_selection import StratifiedKFold

    import selfcal.posthoc.venn_abers as module

    p, y, pt = binary_cases(case)
    peer = va.VennAbersCV(
        Scores(), inductive=False, n_splits=4, shuffle=True, random_state=7, cv_ensemble=False
    )
    peer.fit(p, y)  # returns None
    theirs, pairs = peer.predict_proba(pt, loss=merge, p0_p1_output=True)
    folds = StratifiedKFold(4, shuffle=True, random_state=7).split(p, y)
    held = [test for _, test in folds]
    monkeypatch.setattr(module, "stratified_folds", lambda labels, k, seed: held)
    ours = VennAbers(folds=4, merge=merge).fit(probs=p, labels=y)
    np.testing.assert_allclose(ours.predict_proba(probs=pt), theirs, rtol=0, atol=TOL)
    low, high = ours.predict_interval(probs=pt)  # the envelope of the folds' pairs
    np.testing.assert_allclose(low[:, 1], pairs[:, :4].min(1), rtol=0, atol=TOL)
    np.testing.assert_allclose(high[:, 1], pairs[:, 4:].max(1), rtol=0, atol=TOL)


def test_top_label_is_the_binary_predictor_of_correctness(case):
    """The peers have no top-label form; it is their binary predictor on the confidence
    against correctness, which ours equals."""
    va = pytest.importorskip("venn_abers.venn_abers")
    p, y, pt = case
    conf, correct = p.max(1), (p.argmax(1) == y).astype(np.int64)
    peer = va.VennAbers().fit(np.stack([1 - conf, conf], 1), correct)
    t = pt.max(1)
    theirs, pairs = peer.predict_proba(np.stack([1 - t, t], 1))
    ours = TopLabelVennAbers(mix=0).fit(probs=p, labels=y)
    low, high = ours.predict_interval(probs=pt)
    np.testing.assert_allclose(ours.predict_confidence(probs=pt), theirs[:, 1], rtol=0, atol=TOL)
    np.testing.assert_allclose(low, pairs[:, 0], rtol=0, atol=TOL)
    np.testing.assert_allclose(high, pairs[:, 1], rtol=0, atol=TOL)


# -------------------------------------------------------------------- pinned differences
def test_mapies_prefit_calibrator_is_one_vs_one_beyond_two_classes():
    """MAPIE's ``VennAbersCalibrator(cv="prefit")`` couples one-vs-one predictors for three or
    more classes (``va_tpe="one_vs_one"``, fixed); ours is one-vs-rest -- equal to MAPIE's
    ``one_vs_all`` function, not to its class."""
    pytest.importorskip("mapie")
    from mapie._venn_abers import predict_proba_prefitted_va
    from mapie.calibration import VennAbersCalibrator

    p, y, pt = tied(5, 300, 4)
    ours = VennAbers().fit(probs=p, labels=y).predict_proba(probs=pt)
    peer = VennAbersCalibrator(estimator=Scores(4), cv="prefit").fit(p, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = peer.predict_proba(pt)
        one_vs_one, _ = predict_proba_prefitted_va(p, y, pt, va_tpe="one_vs_one")
    np.testing.assert_allclose(theirs, one_vs_one, rtol=0, atol=TOL)
    assert np.abs(ours - theirs).max() > 0.01


def test_mapies_p1_above_every_calibration_score_is_not_isotonic():
    """A test score above every calibration score: the isotonic fit of the calibration rows
    plus ``(s, 1)`` keeps the new row at 1 (it is last, and nothing above it can pull it down)
    -- scikit-learn's refit says so, ``venn-abers`` sets ``p1 = 1`` there, and so does ours.
    MAPIE 1.6's copy of the algorithm lacks that line and returns the slope its loop last
    computed, which can be far below 1."""
    pytest.importorskip("mapie")
    va = pytest.importorskip("venn_abers.venn_abers")
    from mapie._venn_abers import VennAbers as MapieVennAbers
    from sklearn.isotonic import IsotonicRegression

    s = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    y = np.array([0, 1, 0, 1, 1, 0])
    p, test = np.stack([1 - s, s], 1), np.array([[0.1, 0.9]])
    refit = IsotonicRegression().fit(np.r_[s, 0.9], np.r_[y, 1]).predict([0.9])[0]
    ours = VennAbers().fit(probs=p, labels=y).predict_interval(probs=test)[1][0, 1]
    mapie = MapieVennAbers()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its divisions by zero
        mapie.fit(p, y)
    theirs = mapie.predict_proba(test)[1][0, 1]
    assert refit == ours == va.VennAbers().fit(p, y).predict_proba(test)[1][0, 1] == 1.0
    assert theirs < 0.8


def test_the_peers_drop_a_class_absent_from_the_calibration_labels():
    """A class no calibration row has: the peers return one column fewer; ours keeps every
    class (its map fitted to all-zero targets) and warns."""
    va = pytest.importorskip("venn_abers.venn_abers")
    from selfcal.exceptions import DegenerateCalibration

    p, y, pt = tied(6, 300, 4)
    keep = y != 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs, _ = va.predict_proba_prefitted_va(p[keep], y[keep], pt, va_tpe="one_vs_rest")
    assert theirs.shape[1] == 3
    with pytest.warns(DegenerateCalibration, match="none of class 2"):
        ours = VennAbers().fit(probs=p[keep], labels=y[keep])
    assert ours.predict_proba(probs=pt).shape == (len(pt), 4)
