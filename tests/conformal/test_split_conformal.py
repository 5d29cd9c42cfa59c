"""SplitConformal's estimator face: the calibrators' contract (clone, parameters, files,
numpy/torch in and out, explicit kinds), one-line errors for bad input, warnings for fits
the data cannot identify, and the scores' formulas on hand-checked rows."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import selfcal
from selfcal.conformal import SCORES, SplitConformal, conformal_quantile, conformity_scores
from selfcal.exceptions import DegenerateCalibration, NotFittedError
from selfcal.posthoc import Calibrator, TemperatureScaling


def _data(n: int = 300, c: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, c)) * 2
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    labels = np.array([rng.choice(c, p=row) for row in p])
    return logits, labels


# ------------------------------------------------------------------------ the formulas
P = torch.tensor([[0.5, 0.2, 0.3], [0.25, 0.5, 0.25]], dtype=torch.float64)


def test_deterministic_scores_by_hand():
    lac = conformity_scores(P, score="lac")
    torch.testing.assert_close(lac, 1 - P)
    torch.testing.assert_close(conformity_scores(P, score="thr"), lac)
    aps = conformity_scores(P, score="aps", randomized=False)  # ties: smaller index first
    torch.testing.assert_close(aps, torch.tensor([[0.5, 1.0, 0.8], [0.75, 0.5, 1.0]]).double())
    raps = conformity_scores(P, score="raps", randomized=False, penalty=0.1, k_reg=1)
    torch.testing.assert_close(raps, aps + torch.tensor([[0.0, 0.2, 0.1], [0.1, 0.0, 0.2]]))
    saps = conformity_scores(P, score="saps", randomized=False, weight=0.2)
    torch.testing.assert_close(saps, torch.tensor([[0.5, 0.9, 0.7], [0.7, 0.5, 0.9]]).double())


def test_randomised_scores_lie_between_the_mass_above_and_the_deterministic_score():
    gen = torch.Generator().manual_seed(0)
    for score in ("aps", "raps", "saps"):
        det = conformity_scores(P, score=score, randomized=False)
        rnd = conformity_scores(P, score=score, generator=gen)
        low = det - (P if score != "saps" else torch.where(det == P.amax(1, keepdim=True), P, 0.2))
        assert bool((rnd <= det).all() and (rnd >= low - 1e-15).all()), score


def test_true_label_scores_are_the_labels_column_and_reproducible():
    y = torch.tensor([2, 0])
    for score in SCORES:
        every = conformity_scores(P, score=score, randomized=False)
        torch.testing.assert_close(
            conformity_scores(P, y, score=score, randomized=False), every[[0, 1], y]
        )
    a = conformity_scores(P, y, generator=torch.Generator().manual_seed(3))
    b = conformity_scores(P, y, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(a, b)


def test_conformal_quantile_is_the_order_statistic_and_warns_when_too_few():
    s = np.arange(1.0, 20.0)  # 19 scores: ceil(20 * 0.9) = 18th smallest
    assert conformal_quantile(s, 0.1) == 18.0
    assert conformal_quantile(torch.arange(1.0, 101.0), 0.1) == 91.0  # ceil(101 * 0.9) = 91
    with pytest.warns(DegenerateCalibration, match="at least 9 calibration rows"):
        assert conformal_quantile(s[:8], 0.1) == math.inf
    with pytest.raises(ValueError, match="alpha must be"):
        conformal_quantile(s, 1.0)
    with pytest.raises(ValueError, match="empty"):
        conformal_quantile([], 0.1)


# ------------------------------------------------------------------------ the estimator
def test_fit_forms_agree_and_sets_follow_the_threshold():
    z, y = _data()
    a = SplitConformal(nonconformity="lac").fit(logits=z, labels=y)
    b = SplitConformal(nonconformity="lac", kind="logits").fit(z, y)
    c = SplitConformal(nonconformity="lac").fit(selfcal.Predictions.from_logits(z, y))
    assert a.threshold_ == b.threshold_ == c.threshold_
    assert a.n_calibration_ == 300 and a.n_classes_ == 5 and a.class_counts_.sum() == 300
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    d = SplitConformal(nonconformity="lac", kind="probs").fit(p, y)
    assert d.threshold_ == pytest.approx(a.threshold_, abs=1e-12)
    sets = a.predict_set(logits=z)
    assert sets.dtype == np.bool_ and sets.shape == (300, 5)
    np.testing.assert_array_equal(sets, a.conformity_scores(logits=z) <= a.threshold_)
    np.testing.assert_array_equal(a.predict(logits=z), sets)  # scikit-learn's name
    np.testing.assert_array_equal(b.predict(z), sets)


def test_numpy_in_numpy_out_torch_in_torch_out():
    z, y = _data()
    model = SplitConformal().fit(logits=z, labels=y)
    out_np = model.predict_set(logits=z)
    out_t = model.predict_set(logits=torch.as_tensor(z))
    assert isinstance(out_np, np.ndarray) and isinstance(out_t, torch.Tensor)
    assert out_t.dtype == torch.bool
    np.testing.assert_array_equal(out_np, out_t.numpy())
    scores = model.conformity_scores(logits=torch.as_tensor(z))
    assert scores.dtype == torch.float64
    np.testing.assert_array_equal(model.predict_set(logits=z), model.predict_set(logits=z))


def test_mondrian_thresholds_are_per_class_quantiles():
    z, y = _data(n=600)
    model = SplitConformal(nonconformity="aps", randomized=False, mondrian=True).fit(
        logits=z, labels=y
    )
    assert model.threshold_.shape == (5,) and model.threshold_.dtype == np.float64
    scores = conformity_scores(torch.softmax(torch.as_tensor(z), 1), y, randomized=False)
    for k in range(5):
        assert model.threshold_[k] == conformal_quantile(scores[torch.as_tensor(y) == k], 0.1)
    np.testing.assert_array_equal(model.class_counts_, np.bincount(y, minlength=5))
    every = model.conformity_scores(logits=z)
    np.testing.assert_array_equal(model.predict_set(logits=z), every <= model.threshold_)


def test_mondrian_class_with_too_few_rows_warns_and_is_in_every_set():
    z, y = _data(n=200, c=3)
    y[y == 2] = 0
    y[:5] = 2  # class 2: five rows, nine needed at alpha = 0.1
    with pytest.warns(DegenerateCalibration, match=r"class\(es\) 2 \(5 rows\).*at least 9"):
        model = SplitConformal(mondrian=True).fit(logits=z, labels=y)
    assert model.threshold_[2] == math.inf and np.isfinite(model.threshold_[:2]).all()
    assert model.predict_set(logits=z)[:, 2].all()


def test_too_few_rows_for_the_marginal_quantile_warns():
    z, y = _data(n=8)
    with pytest.warns(DegenerateCalibration, match="8 calibration rows are too few"):
        model = SplitConformal(alpha=0.1).fit(logits=z, labels=y)
    assert model.threshold_ == math.inf and model.predict_set(logits=z).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SplitConformal(alpha=0.2).fit(logits=z, labels=y)  # 4 rows suffice


def test_clone_params_and_repr():
    sklearn_base = pytest.importorskip("sklearn.base")
    model = SplitConformal(
        alpha=0.05, nonconformity="raps", penalty=0.1, k_reg=2, seed=3, kind="probs"
    )
    copy = sklearn_base.clone(model)
    assert copy.get_params() == model.get_params() and copy is not model
    assert list(model.get_params())[-1] == "kind"
    assert model.set_params(alpha=0.2) is model and model.alpha == 0.2
    with pytest.raises(ValueError, match="has no hyperparameter 'beta'"):
        model.set_params(beta=1)
    assert repr(copy).startswith("SplitConformal(alpha=0.05, nonconformity='raps'")


@pytest.mark.parametrize("mondrian", [False, True])
def test_save_load_round_trip(tmp_path, mondrian):
    z, y = _data(n=100)
    y[:3] = 4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateCalibration)
        model = SplitConformal(alpha=0.05, nonconformity="saps", mondrian=mondrian, seed=4).fit(
            logits=z, labels=y
        )
    model.save(tmp_path / "cp.json")
    back = SplitConformal.load(tmp_path / "cp.json")
    assert back.get_params() == model.get_params()
    np.testing.assert_array_equal(np.asarray(back.threshold_), np.asarray(model.threshold_))
    np.testing.assert_array_equal(back.predict_set(logits=z), model.predict_set(logits=z))
    TemperatureScaling().fit(logits=z, labels=y).save(tmp_path / "ts.json")
    with pytest.raises(ValueError, match="unknown conformal predictor class 'TemperatureScaling'"):
        SplitConformal.load(tmp_path / "ts.json")
    with pytest.raises(ValueError, match="unknown calibrator class 'SplitConformal'"):
        Calibrator.load(tmp_path / "cp.json")


def test_score_is_the_deprecated_name_of_nonconformity():
    """``score=`` (the name up to selfcal 0.2, which shadows scikit-learn's ``score`` method)
    still sets ``nonconformity``, with a FutureWarning, in the constructor and in
    ``set_params``; both names with different values is an error."""
    with pytest.warns(FutureWarning, match=r"use SplitConformal\(nonconformity='lac'\)"):
        model = SplitConformal(alpha=0.2, score="lac")
    assert model.nonconformity == "lac" and "score" not in model.get_params()
    assert not hasattr(model, "score")
    with pytest.warns(FutureWarning, match="deprecated"):
        assert model.set_params(score="raps").nonconformity == "raps"
    with pytest.raises(ValueError, match="pass the non-conformity score once"):
        SplitConformal(nonconformity="saps", score="lac")


def test_files_keep_storing_the_score_name_and_read_without_a_warning(tmp_path):
    """A file stores ``nonconformity`` as ``params.score``, as every file written before the
    rename does (the same bytes), and reads back without the deprecation warning."""
    import json

    z, y = _data(n=100)
    path = tmp_path / "cp.json"
    SplitConformal(alpha=0.2, nonconformity="raps").fit(logits=z, labels=y).save(path)
    params = json.loads(path.read_text())["params"]
    assert params["score"] == "raps" and "nonconformity" not in params
    assert list(params)[:2] == ["alpha", "score"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = SplitConformal.load(path)
    assert back.nonconformity == "raps"


def test_grid_search_needs_scoring_and_works_with_it():
    """``GridSearchCV`` over a set predictor: no ``score`` method (a set predictor has no one
    quality to maximise), so without ``scoring=`` scikit-learn says so instead of calling the
    old ``score`` string; with a ``scoring=`` it searches as for any estimator."""
    model_selection = pytest.importorskip("sklearn.model_selection")
    z, y = _data(n=200)
    grid = {"alpha": [0.1, 0.3], "nonconformity": ["lac", "aps"]}
    with pytest.raises(TypeError, match="should have a 'score' method"):
        model_selection.GridSearchCV(SplitConformal(kind="logits"), grid, cv=2).fit(z, y)

    def small_sets(estimator, X, labels):
        return -float(np.asarray(estimator.predict_set(X)).sum(axis=1).mean())

    search = model_selection.GridSearchCV(
        SplitConformal(kind="logits"), grid, cv=2, scoring=small_sets
    ).fit(z, y)
    assert search.best_params_["alpha"] == 0.3
    assert isinstance(search.best_estimator_, SplitConformal)


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_module_equals_predict_set(score, kind):
    z, y = _data()
    model = SplitConformal(nonconformity=score, mondrian=score == "aps").fit(logits=z, labels=y)
    x = torch.as_tensor(z) if kind == "logits" else torch.softmax(torch.as_tensor(z), 1)
    module = model.to_module(kind)
    assert torch.equal(module(x), model.predict_set(**{kind: x}))
    if score != "lac":  # a generator of one's own draws other u, hence other sets
        other = module(x, torch.Generator().manual_seed(123))
        assert other.shape == x.shape and other.dtype == torch.bool


# ------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"alpha": 0.0}, "alpha must be a finite number in (0, 1)"),
        ({"alpha": 1.5}, "alpha must be a finite number in (0, 1)"),
        ({"nonconformity": "hinge"}, "nonconformity must be one of"),
        ({"penalty": -1}, "penalty must be"),
        ({"k_reg": -1}, "k_reg must be an integer"),
        ({"weight": 0}, "weight must be"),
        ({"randomized": "yes"}, "randomized must be True or False"),
        ({"seed": -1}, "seed must be an integer"),
        ({"kind": "scores"}, "kind must be one of"),
    ],
)
def test_bad_hyperparameters_are_one_line_errors(params, message):
    z, y = _data(n=50)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        SplitConformal(**params).fit(logits=z, labels=y)
    assert "\n" not in str(err.value)


def test_bad_inputs_are_one_line_errors():
    z, y = _data(n=50)
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    bad_nan = z.copy()
    bad_nan[3, 1] = np.nan
    cases = [
        (lambda: SplitConformal().fit(logits=bad_nan, labels=y), "row 3"),
        (lambda: SplitConformal().fit(logits=z, labels=y[:-1]), "labels has length 49"),
        (lambda: SplitConformal().fit(logits=z, labels=y + 5), r"labels must lie in \[0, 5\)"),
        (lambda: SplitConformal().fit(probs=p * 0.9, labels=y), "sum"),
        (lambda: SplitConformal().fit(z, y), "no kind"),
        (lambda: SplitConformal().fit(logits=z), "labels are required"),
        (lambda: SplitConformal().predict_set(logits=z), "not fitted yet"),
        (lambda: SplitConformal().fit(logits=z, labels=y).predict_set(logits=z[:, :3]), "5 cl"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message) as err:
            call()
        assert "\n" not in str(err.value), str(err.value)
    with pytest.raises(NotFittedError):
        SplitConformal().to_module()


def test_selfcal_exports_the_conformal_names():
    import selfcal.conformal as conformal

    for name in ("SCORES", "SplitConformal", "conformal_quantile", "conformity_scores"):
        assert getattr(selfcal, name) is getattr(conformal, name)
