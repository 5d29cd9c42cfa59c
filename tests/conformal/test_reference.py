"""selfcal.conformal against independent implementations (test-only peers): TorchCP's score
functions, MAPIE's SplitConformalClassifier and crepes' ConformalClassifier, on shared
inputs. Where a convention differs, a test pins the documented difference (methods §10.6)."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from selfcal.conformal import SplitConformal, conformal_quantile, conformity_scores
from selfcal.conformal.scores import quantile_rank, scores_given_u

pytestmark = pytest.mark.reference

N, C = 400, 6


def _probs(seed: int, n: int = N, c: int = C) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2 * torch.randn(n, c, generator=g, dtype=torch.float64), dim=1)


def _labels(p: torch.Tensor, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.multinomial(p, 1, generator=g).squeeze(1)


def _torchcp_score(name: str):
    """TorchCP's score class ``name``, its modules loaded without running ``torchcp``'s package
    ``__init__`` (which imports torchvision, transformers and torch_geometric, not installed:
    torchcp is installed with ``--no-deps``)."""
    root = _torchcp_root()
    if root is None:
        pytest.skip("torchcp is not installed")
    for package in ("torchcp", "torchcp.classification", "torchcp.classification.score"):
        if package not in sys.modules or not hasattr(sys.modules[package], "__path__"):
            module = types.ModuleType(package)
            module.__path__ = [str(root.joinpath(*package.split(".")[1:]))]
            sys.modules[package] = module
    return getattr(importlib.import_module(f"torchcp.classification.score.{name.lower()}"), name)


@functools.cache
def _torchcp_root() -> Path | None:
    """The folder of the installed ``torchcp`` package (found, not imported)."""
    if "torchcp" in sys.modules:
        return Path(sys.modules["torchcp"].__path__[0])
    spec = importlib.util.find_spec("torchcp")
    if spec is None or spec.submodule_search_locations is None:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


# ---------------------------------------------------------------------------- TorchCP
# SAPS's weight is 0.25, a float32 number: TorchCP writes it into the float64 sorted
# probabilities through a float32 scalar (0.3 arrives as 0.30000001192...).
@pytest.mark.parametrize(
    ("name", "ours", "options"),
    [
        ("LAC", "lac", {}),
        ("APS", "aps", {}),
        ("RAPS", "raps", {"penalty": 0.05, "kreg": 2}),
        ("SAPS", "saps", {"weight": 0.25}),
    ],
)
def test_deterministic_scores_of_every_label_equal_torchcp(name, ours, options):
    p = _probs(0)
    kwargs = {} if name == "LAC" else {"randomized": False}
    theirs = _torchcp_score(name)(score_type="identity", **kwargs, **options)(p)
    mine = conformity_scores(
        p,
        score=ours,
        randomized=False,
        penalty=options.get("penalty", 0.01),
        k_reg=options.get("kreg", 1),
        weight=options.get("weight", 0.2),
    )
    torch.testing.assert_close(mine, theirs.double(), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("name", "ours", "options"),
    [("APS", "aps", {}), ("RAPS", "raps", {"penalty": 0.05, "kreg": 2})],
)
def test_deterministic_true_label_scores_equal_torchcp(name, ours, options):
    p = _probs(1)
    y = _labels(p, 1)
    theirs = _torchcp_score(name)(score_type="identity", randomized=False, **options)(p, y)
    mine = conformity_scores(
        p, y, score=ours, randomized=False, penalty=options.get("penalty", 0.01),
        k_reg=options.get("kreg", 1),
    )  # fmt: skip
    torch.testing.assert_close(mine, theirs.double(), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("name", "ours", "options"),
    [
        ("APS", "aps", {}),
        ("RAPS", "raps", {"penalty": 0.05, "kreg": 2}),
        ("SAPS", "saps", {"weight": 0.25}),
    ],
)
def test_randomised_scores_equal_torchcp_with_u_replaced_by_one_minus_u(name, ours, options):
    """TorchCP computes ``cumsum - U p`` (APS, RAPS; SAPS likewise for every label) with ``U``
    drawn per rank: our ``u`` of label ``k`` is its ``1 - U`` at ``k``'s rank, the same
    distribution. Its draw is replayed from the seed."""
    p = _probs(2)
    torch.manual_seed(7)
    theirs = _torchcp_score(name)(score_type="identity", randomized=True, **options)(p)
    torch.manual_seed(7)
    big_u = torch.rand(p.shape).double()  # TorchCP draws float32 uniforms, one per rank:
    order = torch.sort(p, dim=1, descending=True, stable=True).indices
    big_u = torch.empty_like(big_u).scatter_(1, order, big_u)  # ... as one per label
    penalty, k_reg = options.get("penalty", 0.01), options.get("kreg", 1)
    mine = scores_given_u(p, 1 - big_u, ours, penalty, k_reg, options.get("weight", 0.2))
    torch.testing.assert_close(mine, theirs.double(), rtol=0, atol=1e-12)


def test_torchcp_saps_true_label_scores_differ_at_rank_one():
    """TorchCP's SAPS scores one label with ``U p_max`` at rank 1 but ``p_max + w (r - 1 - U)``
    below, so its deterministic (``U = 0``) rank-1 score is 0 where every-label scoring (and
    ours) gives ``p_max``; below rank 1 it agrees with ours."""
    p = _probs(3)
    y = _labels(p, 3)
    theirs = _torchcp_score("SAPS")(score_type="identity", randomized=False, weight=0.25)(p, y)
    mine = conformity_scores(p, y, score="saps", randomized=False, weight=0.25)
    top = y == p.argmax(1)
    assert top.any() and (~top).any()
    torch.testing.assert_close(theirs[top].double(), torch.zeros(int(top.sum()), dtype=p.dtype))
    torch.testing.assert_close(mine[top], p.amax(1)[top], rtol=0, atol=1e-15)
    torch.testing.assert_close(mine[~top], theirs[~top].double(), rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------- MAPIE
class _Prefit:
    """A fitted scikit-learn classifier whose features are its probabilities."""

    def __init__(self, n_classes: int) -> None:
        self.classes_ = np.arange(n_classes)
        self.n_features_in_ = n_classes
        self.fitted_ = True

    def fit(self, X, y):  # pragma: no cover - prefit
        return self

    def predict_proba(self, X):
        return np.asarray(X, dtype=np.float64)

    def predict(self, X):
        return np.asarray(X).argmax(1)

    def get_params(self, deep=True):
        return {"n_classes": len(self.classes_)}

    def __sklearn_tags__(self):
        from sklearn.utils import ClassifierTags, Tags, TargetTags

        return Tags(
            estimator_type="classifier",
            target_tags=TargetTags(required=True),
            classifier_tags=ClassifierTags(),
        )


def _mapie(score: str, p: np.ndarray, y: np.ndarray, alpha: float, seed: int | None = None):
    mapie = pytest.importorskip("mapie.classification")
    kwargs = {} if seed is None else {"random_state": seed}
    return mapie.SplitConformalClassifier(
        estimator=_Prefit(p.shape[1]),
        confidence_level=1 - alpha,
        conformity_score=score,
        prefit=True,
        **kwargs,
    ).conformalize(p, y)


def _mapie_threshold(fitted) -> float:
    """The quantile a conformalized MAPIE classifier used in its last prediction."""
    return float(np.ravel(fitted._mapie_classifier.quantiles_)[0])


def test_lac_threshold_and_sets_equal_mapie():
    p, q = _probs(4).numpy(), _probs(5).numpy()
    y = _labels(torch.as_tensor(p), 4).numpy()
    fitted = _mapie("lac", p, y, 0.1)
    mine = SplitConformal(alpha=0.1, nonconformity="lac", kind="probs").fit(p, y)
    np.testing.assert_allclose(
        np.ravel(fitted.conformity_scores), 1 - p[np.arange(N), y], rtol=0, atol=1e-15
    )
    _, sets = fitted.predict_set(q)
    assert mine.threshold_ == pytest.approx(_mapie_threshold(fitted), abs=1e-15)
    np.testing.assert_array_equal(mine.predict_set(q), sets[:, :, 0])


def test_aps_scores_and_threshold_equal_mapie_with_u_replaced_by_one_minus_u():
    """MAPIE's APS calibration score is always randomised, ``cumsum - u p_y`` with ``u`` drawn
    by ``RandomState(random_state).uniform(size=n)``; ours with ``1 - u`` is equal."""
    p = _probs(6).numpy()
    y = _labels(torch.as_tensor(p), 6).numpy()
    fitted = _mapie("aps", p, y, 0.1, seed=11)
    u = np.random.RandomState(11).uniform(size=N)
    mine = scores_given_u(torch.as_tensor(p), torch.as_tensor(1 - u).unsqueeze(1), "aps")
    mine_y = mine.gather(1, torch.as_tensor(y).unsqueeze(1)).squeeze(1).numpy()
    np.testing.assert_allclose(np.ravel(fitted.conformity_scores), mine_y, rtol=0, atol=1e-12)
    fitted.predict_set(p[:5])  # MAPIE computes its quantile at prediction time
    assert conformal_quantile(mine_y, 0.1) == pytest.approx(_mapie_threshold(fitted), abs=1e-12)


def test_aps_sets_without_the_last_label_equal_mapie_except_its_forced_top_label():
    """MAPIE's ``include_last_label=False`` keeps the labels whose cumulative mass is at most
    the threshold -- our deterministic APS sets at MAPIE's threshold -- but never returns an
    empty set (it keeps the top label); ``include_last_label=True`` adds one label more."""
    p, q = _probs(7).numpy(), _probs(8).numpy()
    y = _labels(torch.as_tensor(p), 7).numpy()
    fitted = _mapie("aps", p, y, 0.1, seed=3)
    _, without = fitted.predict_set(q, conformity_score_params={"include_last_label": False})
    mine = conformity_scores(q, score="aps", randomized=False) <= _mapie_threshold(fitted)
    mine = mine.numpy()
    _, with_last = fitted.predict_set(q, conformity_score_params={"include_last_label": True})
    empty = mine.sum(1) == 0
    np.testing.assert_array_equal(mine[~empty], without[~empty, :, 0])
    assert (without[empty, :, 0].sum(1) == 1).all()
    assert (without[empty, :, 0].argmax(1) == q[empty].argmax(1)).all()
    grown = with_last[:, :, 0].sum(1) - without[:, :, 0].sum(1)
    assert set(np.unique(grown)) <= {0, 1} and grown.sum() > 0


# ---------------------------------------------------------------------------- crepes
def _crepes():
    return pytest.importorskip("crepes").ConformalClassifier


@pytest.mark.parametrize("score", ["lac", "aps", "raps", "saps"])
def test_marginal_sets_equal_crepes(score):
    """crepes (``smoothing=False``; its default smooths the p-values with a random tie-break)
    includes a label iff its p-value ``(#{cal >= s} + 1) / (n + 1) >= alpha``, the same sets
    as ``s <=`` our quantile when ``(n + 1)(1 - alpha)`` is not an integer."""
    p, q = _probs(9), _probs(10)
    y = _labels(p, 9)
    gen = torch.Generator().manual_seed(0)
    cal = conformity_scores(p, y, score=score, generator=gen).numpy()
    test = conformity_scores(q, score=score, generator=gen).numpy()
    cc = _crepes()().fit(cal)
    theirs = cc.predict_set(test, confidence=0.9, smoothing=False).astype(bool)
    assert N * 0.1 != int(N * 0.1) or (N + 1) * 0.9 != int((N + 1) * 0.9)
    np.testing.assert_array_equal(test <= conformal_quantile(cal, 0.1), theirs)


def test_crepes_includes_one_more_order_statistic_when_the_level_is_an_integer():
    """With ``(n + 1)(1 - alpha)`` an integer (n = 499, alpha = 0.1: 450), crepes' p-value of a
    score above the 450th smallest up to the 451st is exactly ``alpha`` (``50 / 500``), which it
    includes; our threshold (the 450th) excludes it."""
    n, alpha = 499, 0.1
    cal = np.sort(_probs(11, n=n).numpy()[:, 0])
    between = np.array([(cal[449] + cal[450]) / 2, cal[449], cal[450]])
    theirs = (
        _crepes()().fit(cal).predict_set(between[:, None], confidence=1 - alpha, smoothing=False)
    )
    assert conformal_quantile(cal, alpha) == cal[449]
    np.testing.assert_array_equal(theirs[:, 0].astype(bool), [True, True, True])
    np.testing.assert_array_equal(between <= conformal_quantile(cal, alpha), [False, True, False])


@pytest.mark.parametrize("score", ["lac", "aps"])
def test_mondrian_sets_equal_crepes_class_conditional(score):
    """Label-conditional (Mondrian) sets: crepes with the calibration labels as bins, each test
    label's score in that label's bin. Equal, but for a class whose ``(n_c + 1)(1 - alpha)`` is
    an integer (here class 0, 159 rows: 144), where crepes also includes the scores above our
    threshold up to the next calibration score (the difference pinned above)."""
    p, q = _probs(12, n=600, c=4), _probs(13, n=200, c=4)
    y = _labels(p, 12).numpy()
    mine = SplitConformal(alpha=0.1, nonconformity=score, mondrian=True, randomized=False)
    mine.fit(probs=p.numpy(), labels=y)
    cal = conformity_scores(p, y, score=score, randomized=False).numpy()
    test = conformity_scores(q, score=score, randomized=False).numpy()
    cc = _crepes()().fit(cal, bins=y)
    theirs = np.stack(
        [
            cc.predict_set(
                test[:, [k]], bins=np.full(len(test), k), confidence=0.9, smoothing=False
            )[:, 0]
            for k in range(4)
        ],
        axis=1,
    ).astype(bool)
    ours = mine.predict_set(probs=q.numpy())
    expected = ours.copy()
    integer = [k for k in range(4) if ((y == k).sum() + 1) * 9 % 10 == 0]
    assert integer == [0]
    for k in integer:
        above = np.sort(cal[y == k])[quantile_rank(int((y == k).sum()), 0.1)]  # the next one
        expected[:, k] |= (test[:, k] > mine.threshold_[k]) & (test[:, k] <= above)
    np.testing.assert_array_equal(theirs, expected)
