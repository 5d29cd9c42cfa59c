from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from helpers.posthoc import (
    bfgs_minimum,
    make_logits,
    softmax,
    structured_objective,
    structured_reference,
    ts_beta,
)

from selfcal.examples import example_path
from selfcal.exceptions import CalibrationNotConverged, DegenerateCalibration
from selfcal.posthoc import (
    DirichletCalibration,
    MatrixScaling,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
)


def nll(p: np.ndarray, y: np.ndarray) -> float:
    return float(-np.mean(np.log(p[np.arange(len(y)), y])))


UNREGULARISED = {"diagonal_l2": 0.0, "bias_l2": 0.0}
"""Vector scaling without its ridge penalty (matrix scaling: with ``off_diagonal_l2=0.0``)."""


def test_nested_models_order_training_nll():
    """Unregularised, each model contains the one before: training NLL TS >= VS >= MS."""
    z, y = make_logits(0, 400, 4)
    models = (
        TemperatureScaling(),
        VectorScaling(**UNREGULARISED),
        MatrixScaling(off_diagonal_l2=0.0, **UNREGULARISED),
    )
    fits = [c.fit(logits=z, labels=y) for c in models]
    ts, vec, mat = (nll(f.predict_proba(logits=z), y) for f in fits)
    assert mat <= vec + 1e-9 <= ts + 2e-9


def test_vector_scaling_is_stationary():
    """Unregularised, the fit zeroes the gradient of the plain cross-entropy (autograd)."""
    z, y = make_logits(1, 300, 3)
    cal = VectorScaling(**UNREGULARISED).fit(logits=z, labels=y)
    w = torch.tensor(np.r_[cal.weight_, cal.bias_], requires_grad=True)
    zt, yt = torch.from_numpy(z), torch.from_numpy(y)
    loss = torch.nn.functional.cross_entropy(zt * w[:3] + w[3:], yt)
    (g,) = torch.autograd.grad(loss, w)
    assert float(g.abs().max()) < 1e-7


def test_matrix_scaling_off_diagonal_penalty_shrinks_off_diagonal():
    z, y = make_logits(2, 300, 4)
    free = MatrixScaling(off_diagonal_l2=0.0, **UNREGULARISED).fit(logits=z, labels=y).weight_
    tied = MatrixScaling(off_diagonal_l2=1e5, bias_l2=1e5).fit(logits=z, labels=y)
    off = ~np.eye(4, dtype=bool)
    assert np.abs(tied.weight_[off]).max() < 1e-3 < np.abs(free[off]).max()
    assert np.abs(tied.bias_).max() < 1e-3


def test_matrix_scaling_can_change_argmax():
    """80% of the rows the logits predict as class 0 are really class 1 (the others are
    right): matrix scaling moves the predicted class on those rows (accuracy 0.72 -> 0.87)."""
    z, _ = make_logits(3, 400, 3)
    relabel = (z.argmax(1) == 0) & (np.random.default_rng(0).random(400) < 0.8)
    y = np.where(relabel, 1, z.argmax(1))
    p = MatrixScaling().fit(logits=z, labels=y).predict_proba(logits=z)
    assert np.mean(p.argmax(1) != z.argmax(1)) > 0.3
    assert np.mean(p.argmax(1) == y) > 0.85 > 0.75 > np.mean(z.argmax(1) == y)


def test_labels_that_temperature_scaling_cannot_fit_give_the_identity():
    """Every label one class "later": temperature scaling's NLL falls all the way to
    ``T = e^10`` (uniform beats the scores), so step 1 is not identified and the structured
    map is the identity, with a warning -- even though a permutation would fit."""
    z, y = make_logits(3, 400, 3)
    y = (z.argmax(1) + 1) % 3
    with pytest.warns(DegenerateCalibration, match="keeps falling as T grows"):
        cal = MatrixScaling().fit(logits=z, labels=y)
    np.testing.assert_array_equal(cal.weight_, np.eye(3))
    np.testing.assert_array_equal(cal.bias_, np.zeros(3))


@pytest.mark.parametrize("cls", [VectorScaling, MatrixScaling, DirichletCalibration])
def test_strong_penalties_give_temperature_scaling(cls):
    """The departure from temperature scaling is what is penalised: with every strength huge
    the fit is ``weight_ = I / T`` (``1 / T`` for vector scaling), ``bias_ = 0``, and the
    probabilities are temperature scaling's."""
    z, y = make_logits(7, 300, 4)
    strengths = {"diagonal_l2": 1e12, "bias_l2": 1e12}
    if cls is not VectorScaling:
        strengths["off_diagonal_l2"] = 1e12
    cal = cls(**strengths).fit(logits=z, labels=y)
    ts = TemperatureScaling().fit(logits=z, labels=y)
    identity = np.ones(4) if cls is VectorScaling else np.eye(4)
    np.testing.assert_allclose(cal.weight_, identity / ts.temperature_, rtol=0, atol=1e-9)
    np.testing.assert_allclose(cal.bias_, 0, atol=1e-9)
    np.testing.assert_allclose(cal.predict_proba(logits=z), ts.predict_proba(logits=z), atol=1e-9)


def test_matrix_scaling_rejects_negative_penalty():
    z, y = make_logits(0, 20, 3)
    with pytest.raises(ValueError, match="off_diagonal_l2"):
        MatrixScaling(off_diagonal_l2=-1).fit(logits=z, labels=y)


# --------------------------------------------- the fits against independent minimisations
def log_softmax_np(u: np.ndarray) -> np.ndarray:
    m = u.max(1, keepdims=True)
    return u - m - np.log(np.exp(u - m).sum(1, keepdims=True))


def vector_objective(z: np.ndarray, y: np.ndarray):
    n, c = z.shape
    onehot = np.eye(c)[y]

    def f(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:c], theta[c:]
        logp = log_softmax_np(z * w + b)
        r = np.exp(logp) - onehot
        return -np.mean(logp[np.arange(n), y]), np.r_[(r * z).mean(0), r.mean(0)]

    return f


def matrix_objective(x: np.ndarray, y: np.ndarray):
    """Mean NLL of ``softmax(x W^T + b)``: plain (unregularised) matrix scaling."""
    n, c = x.shape
    onehot = np.eye(c)[y]

    def f(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[: c * c].reshape(c, c), theta[c * c :]
        logp = log_softmax_np(x @ w.T + b)
        r = np.exp(logp) - onehot
        return -np.mean(logp[np.arange(n), y]), np.r_[(r.T @ x / n).ravel(), r.mean(0)]

    return f


SIZES = [(0, 300, 3), (1, 1000, 10), (2, 200, 5), (3, 500, 2)]


@pytest.mark.parametrize(("seed", "n", "c"), SIZES)
def test_vector_scaling_equals_independent_structured_minimisation(seed, n, c):
    """The default fit is temperature scaling (``beta`` by an independent root of the NLL's
    derivative), then the ridge-penalised ``softmax((1 + v) beta z + b)`` minimised by scipy
    from ``v = b = 0``; ``weight_ = beta (1 + v)``."""
    z, y = make_logits(seed, n, c)
    cal = VectorScaling().fit(logits=z, labels=y)
    weight, bias = structured_reference(z, y)
    np.testing.assert_allclose(cal.weight_, weight, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(cal.bias_, bias, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(cal.predict_proba(logits=z), softmax(z * weight + bias), atol=1e-9)


@pytest.mark.parametrize(("l2", "seed"), [((0.1, 3.0), 4), ((5.0, 0.01), 5), ((0.0, 2.0), 6)])
def test_vector_scaling_strengths_equal_independent_minimisation(l2, seed):
    """Other strengths (``diagonal_l2``, ``bias_l2``) give the same objective's minimum."""
    z, y = make_logits(seed, 400, 4)
    cal = VectorScaling(diagonal_l2=l2[0], bias_l2=l2[1]).fit(logits=z, labels=y)
    weight, bias = structured_reference(z, y, diagonal_l2=l2[0], bias_l2=l2[1])
    np.testing.assert_allclose(cal.weight_, weight, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(cal.bias_, bias, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("seed", "n", "c"), SIZES)
def test_unregularised_vector_scaling_equals_independent_minimisation(seed, n, c):
    """With every ``*_l2 = 0`` the fit is the classical vector scaling optimum, minimised by
    scipy from ``w = 1, b = 0`` (the biases up to their common shift)."""
    z, y = make_logits(seed, n, c)
    cal = VectorScaling(**UNREGULARISED).fit(logits=z, labels=y)
    ref = bfgs_minimum(vector_objective(z, y), np.r_[np.ones(c), np.zeros(c)])
    np.testing.assert_allclose(cal.weight_, ref[:c], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(cal.bias_, ref[c:] - ref[c:].mean(), rtol=1e-6, atol=1e-7)
    assert abs(cal.bias_.sum()) < 1e-12  # the gauge of the start, b = 0
    expected = softmax(z * ref[:c] + ref[c:])
    np.testing.assert_allclose(cal.predict_proba(logits=z), expected, atol=1e-9)


def test_vector_scaling_on_the_digits_logits_is_the_float64_optimum():
    """The bundled digits validation logits (718 x 10, ill-conditioned: the biases run to
    -8): Newton stops where an independent BFGS does, with a gradient at rounding level
    (the L-BFGS of earlier versions stopped at a gradient of 7.7e-9, 2e-5 away in b)."""
    data = np.load(example_path("digits_val"))
    z, y = data["logits"].astype(np.float64), data["labels"]
    cal = VectorScaling(**UNREGULARISED).fit(logits=data["logits"], labels=y)
    f = vector_objective(z, y)
    _, grad = f(np.r_[cal.weight_, cal.bias_])
    assert np.abs(grad).max() < 1e-12
    ref = bfgs_minimum(f, np.r_[np.ones(10), np.zeros(10)])
    np.testing.assert_allclose(
        cal.predict_proba(logits=z), softmax(z * ref[:10] + ref[10:]), atol=1e-7
    )


@pytest.mark.parametrize("family", ["vector", "matrix"])
def test_default_fit_on_the_digits_logits_is_the_float64_optimum(family):
    """The default (penalised) fit on the digits logits: the gradient of the structured
    objective with the documented strengths (``C/N``, ``C(C-1)/N``), written out here, is
    ~0 at the fit (``beta`` from temperature scaling, equal to an independent root of the
    NLL's derivative). Newton stops once its predicted loss decrease is below ``1e-20 L``
    (``NEWTON_TOL``), far below what float64 resolves in ``L``; with the penalty's Hessian
    (~``2 C / N``) that admits a gradient of order ``1e-11`` (vector scaling stops at
    2.4e-12, matrix scaling at ~1e-16)."""
    data = np.load(example_path("digits_val"))
    z, y = data["logits"].astype(np.float64), data["labels"]
    beta = 1 / TemperatureScaling().fit(logits=z, labels=y).temperature_
    assert beta == pytest.approx(ts_beta(z, y), rel=1e-12)
    if family == "vector":
        cal = VectorScaling().fit(logits=data["logits"], labels=y)
        theta = np.r_[cal.weight_ / beta - 1, cal.bias_]
        f = structured_objective(beta * z, y, 1.0, 1.0)
    else:
        cal = MatrixScaling().fit(logits=data["logits"], labels=y)
        theta = np.r_[(cal.weight_ / beta - np.eye(10)).ravel(), cal.bias_]
        f = structured_objective(beta * z, y, 1.0, 1.0, off_diagonal_l2=1.0)
    assert np.abs(f(theta)[1]).max() < 1e-10


@pytest.mark.parametrize(
    ("off", "diag", "bias"), [(1.0, 1.0, 1.0), (0.1, 3.0, 0.5), (5.0, 0.01, 2.0), (1.0, 0.0, 0.0)]
)
@pytest.mark.parametrize(("seed", "n", "c"), [(4, 300, 3), (5, 600, 6)])
def test_matrix_scaling_equals_independent_structured_minimisation(off, diag, bias, seed, n, c):
    """Temperature scaling (independent ``beta``), then the ridge-penalised
    ``softmax((I + Delta) beta z + b)`` minimised by scipy from ``Delta = 0, b = 0``;
    ``weight_ = beta (I + Delta)``."""
    z, y = make_logits(seed, n, c)
    cal = MatrixScaling(off_diagonal_l2=off, diagonal_l2=diag, bias_l2=bias).fit(logits=z, labels=y)
    weight, intercept = structured_reference(z, y, diag, bias, off_diagonal_l2=off)
    np.testing.assert_allclose(cal.weight_, weight, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(cal.bias_, intercept, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("seed", "n", "c"), [(4, 300, 3), (5, 600, 6)])
def test_unregularised_matrix_scaling_equals_independent_minimisation(seed, n, c):
    """Every ``*_l2 = 0``: the classical matrix scaling optimum, minimised by scipy from
    ``W = I, b = 0``. Adding one vector to every row of ``[W, b]`` changes nothing, and the
    two starts keep different such gauges: compared with each row's mean removed."""
    z, y = make_logits(seed, n, c)
    cal = MatrixScaling(off_diagonal_l2=0.0, **UNREGULARISED).fit(logits=z, labels=y)
    ref = bfgs_minimum(matrix_objective(z, y), np.r_[np.eye(c).ravel(), np.zeros(c)])
    weight, bias = ref[: c * c].reshape(c, c), ref[c * c :]
    np.testing.assert_allclose(
        cal.weight_ - cal.weight_.mean(0), weight - weight.mean(0), rtol=1e-6, atol=1e-7
    )
    np.testing.assert_allclose(cal.bias_ - cal.bias_.mean(), bias - bias.mean(), atol=1e-7)
    np.testing.assert_allclose(cal.predict_proba(logits=z), softmax(z @ weight.T + bias), atol=1e-9)


def test_matrix_scaling_converges_on_the_digits_logits():
    """The issue: unregularised matrix scaling had no minimum on the digits validation logits
    and ran for minutes. With the structured penalty on by default it converges (no
    warning) in Newton steps; its time is measured in benchmarks/, never bounded here."""
    data = np.load(example_path("digits_val"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationNotConverged)
        warnings.simplefilter("error", DegenerateCalibration)
        cal = MatrixScaling().fit(logits=data["logits"], labels=data["labels"])
    assert np.isfinite(cal.weight_).all()


def separable(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Binary logits ``[0, s]`` with ``y = 1[s > 1]``: a bias separates the classes, but the
    rows with ``0 < s < 1`` are predicted wrongly, so temperature scaling has an interior
    minimum (the structured fits go on to step 2)."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(-3, 3, 200)
    s = s[np.abs(s - 1) > 0.1]
    return np.stack([np.zeros_like(s), s], 1), (s > 1).astype(int)


@pytest.mark.parametrize(
    "make",
    [
        lambda: MatrixScaling(off_diagonal_l2=0.0, **UNREGULARISED, max_iter=30),
        lambda: VectorScaling(**UNREGULARISED, max_iter=30),
    ],
)
def test_unregularised_fit_on_separable_data_warns(make):
    """Unregularised, separable scores have no minimum: the fit stops at ``max_iter`` with a
    warning, finite, and separates the classes."""
    z, y = separable(0)
    assert 0 < np.mean(z.argmax(1) != y) < 0.5
    with pytest.warns(CalibrationNotConverged, match="stopped after 30 iterations"):
        cal = make().fit(logits=z, labels=y)
    assert np.isfinite(cal.weight_).all() and np.isfinite(cal.bias_).all()
    assert (cal.predict_proba(logits=z).argmax(1) == y).all()


@pytest.mark.parametrize("family", ["vector", "matrix"])
def test_default_penalty_has_a_minimum_on_separable_data(family):
    """The same separable scores: with the default penalty the objective is strictly convex,
    the fit converges without a warning to the independently minimised optimum, and no
    confidence reaches 1."""
    z, y = separable(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cal = (VectorScaling() if family == "vector" else MatrixScaling()).fit(logits=z, labels=y)
    weight, bias = structured_reference(z, y, off_diagonal_l2=None if family == "vector" else 1.0)
    np.testing.assert_allclose(cal.weight_, weight, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(cal.bias_, bias, rtol=1e-6, atol=1e-7)
    assert cal.predict_proba(logits=z).max() < 1 - 1e-6


def test_bad_max_iter_raises():
    z, y = make_logits(0, 20, 3)
    with pytest.raises(ValueError, match="max_iter must be an integer >= 1"):
        VectorScaling(max_iter=0).fit(logits=z, labels=y)


# ---------------------------------------------------------------------------- Platt
def binary_data(seed: int, n: int = 300):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    s = 3.0 * (2 * y - 1) + 2.5 * rng.normal(size=n) + 0.7
    return s, y


def platt_targets(y: np.ndarray) -> np.ndarray:
    """Platt's (1999) targets, written here: ``(N+ + 1)/(N+ + 2)`` and ``1/(N- + 2)``."""
    n_pos, n_neg = y.sum(), len(y) - y.sum()
    return np.where(y > 0, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))


def test_platt_default_fits_the_smoothed_targets():
    """The default fit is first-order optimal for Platt's smoothed targets (not for the
    labels); ``smooth_targets=False`` is maximum likelihood (optimal for the labels)."""
    s, y = binary_data(0)
    t = platt_targets(y)
    p = PlattScaling().fit(logits=s, labels=y).predict_proba(logits=s)[:, 1]
    assert abs(np.mean(p - t)) < 1e-12 and abs(np.mean((p - t) * s)) < 1e-12
    assert abs(np.mean((p - y) * s)) > 1e-3
    p = PlattScaling(smooth_targets=False).fit(logits=s, labels=y).predict_proba(logits=s)[:, 1]
    assert abs(np.mean(p - y)) < 1e-12 and abs(np.mean((p - y) * s)) < 1e-12


def test_platt_one_and_two_columns_agree():
    s, y = binary_data(1)
    a = PlattScaling().fit(logits=s, labels=y)
    b = PlattScaling().fit(logits=np.stack([np.zeros_like(s), s], 1) + 5.0, labels=y)
    assert a.slope_ == pytest.approx(b.slope_, rel=1e-10)
    assert a.intercept_ == pytest.approx(b.intercept_, rel=1e-10)


@pytest.mark.reference
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_platt_vs_sklearn_sigmoid(seed):
    """scikit-learn's sigmoid calibration uses Platt's smoothed targets and writes the map as
    1 / (1 + exp(A f + B)); our default (smooth_targets=True) agrees with it (A = -a, B = -b).
    Plain maximum likelihood (smooth_targets=False) differs by an amount of order 1/N that is
    pinned here."""
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.calibration import CalibratedClassifierCV, _SigmoidCalibration
    from sklearn.frozen import FrozenEstimator

    class Fixed(ClassifierMixin, BaseEstimator):
        def fit(self, x, y):
            self.classes_ = np.array([0, 1])
            return self

        def decision_function(self, x):
            return x[:, 0]

        def predict(self, x):
            return (x[:, 0] > 0).astype(int)

    s, y = binary_data(seed)
    ref = _SigmoidCalibration().fit(s, y)
    smooth = PlattScaling().fit(logits=s, labels=y)
    assert smooth.slope_ == pytest.approx(-ref.a_, rel=1e-5)
    assert smooth.intercept_ == pytest.approx(-ref.b_, rel=1e-5, abs=1e-6)
    cv = CalibratedClassifierCV(FrozenEstimator(Fixed().fit(s[:, None], y)), method="sigmoid")
    p_ref = cv.fit(s[:, None], y).predict_proba(s[:, None])
    np.testing.assert_allclose(smooth.predict_proba(logits=s), p_ref, atol=1e-6)
    plain = PlattScaling(smooth_targets=False).fit(logits=s, labels=y).predict_proba(logits=s)
    gap = np.abs(plain - p_ref).max()
    assert 1e-3 < gap < 5e-2  # the smoothed-target difference at N = 300 ...
    assert gap == pytest.approx(np.abs(plain - smooth.predict_proba(logits=s)).max(), abs=1e-6)


def test_platt_rejects_multiclass():
    z, y = make_logits(0, 30, 3)
    with pytest.raises(ValueError, match="binary"):
        PlattScaling().fit(logits=z, labels=y)


def test_platt_probs_use_logit():
    s, y = binary_data(4)
    p1 = 1 / (1 + np.exp(-s))
    a = PlattScaling().fit(logits=s, labels=y)
    b = PlattScaling().fit(probs=p1, labels=y)
    assert a.slope_ == pytest.approx(b.slope_, rel=1e-8)
    np.testing.assert_allclose(a.predict_proba(logits=s), b.predict_proba(probs=p1), atol=1e-10)
    assert softmax(np.stack([np.zeros_like(s), s], 1)).shape == (len(s), 2)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("smooth", [False, True])
def test_platt_equals_independent_minimisation(seed, smooth):
    s, y = binary_data(10 + seed, n=1000)
    t = platt_targets(y) if smooth else y.astype(float)
    x = np.stack([s, np.ones_like(s)], 1)

    def f(theta: np.ndarray) -> tuple[float, np.ndarray]:
        u = x @ theta
        return np.mean(np.logaddexp(0, u) - t * u), x.T @ (1 / (1 + np.exp(-u)) - t) / len(u)

    ref = bfgs_minimum(f, np.array([1.0, 0.0]))
    cal = PlattScaling(smooth_targets=smooth).fit(logits=s, labels=y)
    np.testing.assert_allclose([cal.slope_, cal.intercept_], ref, rtol=1e-6, atol=1e-8)
    ours = np.abs(f(np.array([cal.slope_, cal.intercept_]))[1]).max()
    assert ours < 1e-12  # stationary to float64 rounding


def test_platt_on_separable_scores():
    """Separable log-odds (every prediction correct): plain maximum likelihood has no
    minimum and warns that it stopped; the default smoothed fit has one, keeps every
    confidence below 1, and warns only that the data are degenerate."""
    s = np.r_[np.linspace(-3, -1, 50), np.linspace(1, 3, 50)]
    y = (s > 0).astype(int)
    with pytest.warns(CalibrationNotConverged, match="PlattScaling stopped"):
        with pytest.warns(DegenerateCalibration, match="no minimum"):
            cal = PlattScaling(smooth_targets=False).fit(logits=s, labels=y)
    assert np.isfinite(cal.slope_) and cal.slope_ > 1
    assert cal.predict_proba(logits=s).max() > 1 - 1e-9
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cal = PlattScaling().fit(logits=s, labels=y)
    assert [w.category for w in caught] == [DegenerateCalibration]
    assert "smoothed targets" in str(caught[0].message)
    assert cal.predict_proba(logits=s).max() < 0.999
