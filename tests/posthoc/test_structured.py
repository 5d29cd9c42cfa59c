"""TS-mix, SVS, SMS and binary affine / quadratic scaling against their authors' library
(probmetrics 1.3), and temperature scaling against scikit-learn's
(``CalibratedClassifierCV(method="temperature")``).

probmetrics fits SVS / SMS by torchmin's BFGS with its default stopping rule (gradient norm
1e-5) on float32 log-probabilities; selfcal runs Newton's method to the float64 optimum. The
tests therefore compare the *penalised objective*, written out here independently in numpy:
selfcal's value is never above probmetrics', within 5e-5 of it on their default float32 path
(1.8e-5 was seen with 30 classes) and within 1e-6 when their code runs on float64 features.
Their probabilities differ by up to ~1e-3, the distance their stopping rule leaves to the
optimum, which a test pins: selfcal's gradient there is ~1e-10, theirs ~1e-5.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from selfcal.posthoc import build_calibrator
from selfcal.posthoc.structured import ts_mix_log_probs

probmetrics = pytest.importorskip("probmetrics.calibrators")
pytestmark = pytest.mark.filterwarnings("ignore:.penalty. was deprecated:FutureWarning")  # theirs

SHAPES = [(300, 2), (400, 3), (1000, 10), (2000, 20)]


def draw(seed: int, n: int, c: int) -> tuple[np.ndarray, np.ndarray]:
    """Over-confident logits (scale 3) whose labels follow a tempered softmax with per-class
    biases, so that vector / matrix scaling have something to fit."""
    rng = np.random.default_rng(seed)
    z = 3.0 * rng.normal(size=(n, c))
    bias = rng.normal(scale=0.5, size=c)
    p = torch.softmax(torch.from_numpy(0.6 * z + bias), 1).numpy()
    y = (p.cumsum(1) > rng.random((n, 1))).argmax(1)
    return z, y


def penalised_objective(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, b: np.ndarray, vector: bool
) -> float:
    """Berta et al.'s objective with unit strengths: mean NLL of ``softmax(W x + b)`` plus
    ``C/N |diag(W) - 1|^2 + C(C-1)/N |offdiag(W)|^2 + C/N |b|^2`` (``W = diag(w)`` for SVS)."""
    n, c = x.shape
    if vector:
        logits, delta = x * w + b, np.diag(w - 1.0)
    else:
        logits, delta = x @ w.T + b, w - np.eye(c)
    off = delta - np.diag(np.diag(delta))
    top = logits.max(1, keepdims=True)
    lse = np.log(np.exp(logits - top).sum(1)) + top[:, 0]
    nll = float(np.mean(lse - logits[np.arange(n), y]))
    ridge = c / n * (np.sum(np.diag(delta) ** 2) + np.sum(b**2))
    return nll + ridge + c * (c - 1) / n * float(np.sum(off**2))


def theirs(name: str, z: np.ndarray, y: np.ndarray):
    cal = probmetrics.get_calibrator(name)
    cal.fit(torch.softmax(torch.from_numpy(z), 1).numpy(), y)
    return cal


def their_parameters(cal, name: str, c: int) -> tuple[np.ndarray, np.ndarray]:
    if name == "svs":
        return cal.v_.astype(np.float64), cal.b_.astype(np.float64)
    return cal.W_[:, :c].astype(np.float64), cal.W_[:, c].astype(np.float64)


@pytest.mark.parametrize(("n", "c"), SHAPES)
@pytest.mark.parametrize("name", ["ts", "ts-mix"])
def test_temperature_scaling_and_ts_mix_equal_probmetrics(name, n, c):
    z, y = draw(n + c, 2 * n, c)
    ours = build_calibrator(name).fit(logits=z[:n], labels=y[:n])
    ref = theirs("temp-scaling" if name == "ts" else "ts-mix", z[:n], y[:n])
    p_ref = ref.predict_proba(torch.softmax(torch.from_numpy(z[n:]), 1).numpy())
    np.testing.assert_allclose(ours.predict_proba(logits=z[n:]), p_ref, atol=2e-7, rtol=0)
    assert ours.mix_ == (1 / (n + 1) if name == "ts-mix" else 0.0)


@pytest.mark.parametrize(("n", "c"), SHAPES)
def test_temperature_scaling_equals_scikit_learn(n, c):
    """scikit-learn >= 1.8: ``CalibratedClassifierCV(FrozenEstimator(clf), method="temperature")``
    on a classifier whose decision function is the logits themselves."""
    calibration = pytest.importorskip("sklearn.calibration")
    frozen = pytest.importorskip("sklearn.frozen")
    from sklearn.base import BaseEstimator, ClassifierMixin

    class Logits(ClassifierMixin, BaseEstimator):
        def fit(self, X, y):
            self.classes_ = np.arange(X.shape[1])
            return self

        def decision_function(self, X):  # binary: one score per row, as scikit-learn's
            return X[:, 1] - X[:, 0] if X.shape[1] == 2 else X

        def predict(self, X):
            return X.argmax(1)

    z, y = draw(n * c, 2 * n, c)
    clf = Logits().fit(z[:n], y[:n])
    ref = calibration.CalibratedClassifierCV(frozen.FrozenEstimator(clf), method="temperature")
    ref.fit(z[:n], y[:n])
    ours = build_calibrator("ts").fit(logits=z[:n], labels=y[:n])
    p_ref = ref.predict_proba(z[n:])
    np.testing.assert_allclose(ours.predict_proba(logits=z[n:]), p_ref, atol=1e-7, rtol=0)


@pytest.mark.parametrize(("n", "c"), SHAPES)
@pytest.mark.parametrize("name", ["svs", "sms"])
def test_structured_scaling_reaches_probmetrics_objective(name, n, c):
    z, y = draw(7 * n + c, 2 * n, c)
    ours = build_calibrator(name).fit(logits=z[:n], labels=y[:n])
    ref = theirs(name, z[:n], y[:n])
    vector = name == "svs"
    x = ts_mix_log_probs(torch.from_numpy(z[:n]), ours.temperature_, ours.ts_mix_).numpy()
    f_ours = penalised_objective(x, y[:n], ours.weight_, ours.bias_, vector)
    f_ref = penalised_objective(x, y[:n], *their_parameters(ref, name, c), vector)
    assert f_ours <= f_ref + 1e-12
    assert f_ref - f_ours < 5e-5  # their default path: float32 features (1.8e-5 at C = 30)
    # their code path (torchmin BFGS) on float64 features: the same objective to 1e-6
    strengths = {"reg_intercept": c / n, "reg_diagonal": c / n}
    if not vector:
        strengths["reg_off_diagonal"] = c * (c - 1) / n
    fitted = ref._fit_bfgs(torch.from_numpy(x), torch.as_tensor(y[:n]), num_classes=c, **strengths)
    w64, b64 = fitted if vector else (fitted[:, :c], fitted[:, c])
    assert 0 <= penalised_objective(x, y[:n], w64, b64, vector) - f_ours < 1e-6
    p_ref = ref.predict_proba(torch.softmax(torch.from_numpy(z[n:]), 1).numpy())
    np.testing.assert_allclose(ours.predict_proba(logits=z[n:]), p_ref, atol=5e-3, rtol=0)


@pytest.mark.parametrize("name", ["svs", "sms"])
def test_the_difference_from_probmetrics_is_their_stopping_rule(name):
    """The gradient of the penalised objective (autograd, float64) at selfcal's parameters is
    at rounding level; at probmetrics' it is at their BFGS tolerance."""
    n, c = 1000, 10
    z, y = draw(3, n, c)
    ours = build_calibrator(name).fit(logits=z, labels=y)
    ref = theirs(name, z, y)
    x = ts_mix_log_probs(torch.from_numpy(z), ours.temperature_, ours.ts_mix_)
    labels = torch.as_tensor(y)

    def gradient_norm(w: np.ndarray, b: np.ndarray) -> float:
        wt = torch.tensor(w, requires_grad=True)
        bt = torch.tensor(b, requires_grad=True)
        logits = x * wt + bt if name == "svs" else x @ wt.T + bt
        delta = torch.diag(wt - 1.0) if name == "svs" else wt - torch.eye(c, dtype=x.dtype)
        off = delta - torch.diag(torch.diag(delta))
        ridge = c / n * (torch.diag(delta).square().sum() + bt.square().sum())
        loss = torch.nn.functional.cross_entropy(logits, labels) + ridge
        loss = loss + c * (c - 1) / n * off.square().sum()
        loss.backward()
        return float(torch.cat([wt.grad.reshape(-1), bt.grad]).norm())

    ours_norm = gradient_norm(ours.weight_, ours.bias_)
    ref_norm = gradient_norm(*their_parameters(ref, name, c))
    assert ours_norm < 1e-8 < 1e-7 < ref_norm < 1e-3


def test_ts_mix_log_probs_never_underflow():
    """``x`` is bounded below by ``log(eps / C)`` even where ``softmax`` underflows to 0."""
    z = torch.tensor([[0.0, -1e4, 5.0]], dtype=torch.float64)
    x = ts_mix_log_probs(z, 1.0, 0.01)
    assert torch.isfinite(x).all() and float(x.min()) >= np.log(0.01 / 3) - 1e-12
    np.testing.assert_allclose(x.exp().sum().item(), 1.0, rtol=1e-14)
    np.testing.assert_array_equal(ts_mix_log_probs(z, 2.0, 0.0), torch.log_softmax(z / 2, 1))


def binary_log_loss(s: np.ndarray, y: np.ndarray, coefficients: np.ndarray) -> float:
    """Mean binary cross-entropy of ``sigmoid(a s + b + q s^2)`` (``q`` absent: Platt)."""
    u = coefficients[0] * s + coefficients[1]
    if len(coefficients) == 3:
        u = u + coefficients[2] * s * s
    return float(np.mean(np.logaddexp(0.0, u) - y * u))


@pytest.mark.parametrize("n", [200, 2000])
@pytest.mark.parametrize(("name", "reference"), [("platt", "affine"), ("quadratic", "quadratic")])
def test_binary_scaling_equals_probmetrics(name, reference, n):
    """Maximum likelihood (``smooth_targets=False``) is probmetrics' ``affine-scaling`` /
    ``quadratic-scaling``: an unpenalised scikit-learn logistic regression on ``[1, s, s^2]``
    (L-BFGS, tolerance 1e-4), ``s`` the log-odds of the float32-rounded probabilities. On the
    same ``s``: never below ours, within 1e-4 of it, and equal to 1e-9 when that regression
    runs to a tight tolerance."""
    from sklearn.linear_model import LogisticRegression

    z, y = draw(n + 11, 2 * n, 2)
    z[:, 1] += 0.1 * z[:, 1] ** 2  # a bend that the quadratic term can fit
    p = torch.softmax(torch.from_numpy(z), 1).numpy()
    ref = theirs(f"{reference}-scaling", z[:n], y[:n])
    s = ref._get_logits(p)[:, 1].astype(np.float64)  # their log-odds: [1, s(, s^2)]
    scores = np.stack([np.zeros_like(s), s], 1)
    ours = build_calibrator(name, smooth_targets=False).fit(logits=scores[:n], labels=y[:n])
    mine = [ours.slope_, ours.intercept_] + ([ours.quadratic_] if name == "quadratic" else [])

    def loss(coef: np.ndarray) -> float:  # coefficients on [1, s, s^2]
        return binary_log_loss(s[:n], y[:n], np.array([coef[1], coef[0], *coef[2:]]))

    f_ours = binary_log_loss(s[:n], y[:n], np.array(mine))
    f_ref = loss(ref.cal_.coef_[0])
    assert f_ours <= f_ref + 1e-12 and f_ref - f_ours < 1e-4
    tight = LogisticRegression(C=np.inf, fit_intercept=False, tol=1e-12, max_iter=100_000)
    features = ref._get_logits(p[:n]).astype(np.float64)
    assert abs(loss(tight.fit(features, y[:n]).coef_[0]) - f_ours) < 1e-9
    np.testing.assert_allclose(
        ours.predict_proba(logits=scores[n:]), ref.predict_proba(p[n:]), atol=2e-3, rtol=0
    )


def test_quadratic_scaling_bends_where_platt_cannot():
    """On log-odds whose true calibration map is quadratic, quadratic scaling recovers it and
    beats Platt scaling on held-out NLL; with ``q = 0`` data it is Platt to 1e-3."""
    rng = np.random.default_rng(5)
    s = rng.normal(scale=2.0, size=20000)
    y = (rng.random(s.size) < 1 / (1 + np.exp(-(0.8 * s - 0.3 + 0.15 * s * s)))).astype(int)
    z = np.stack([np.zeros_like(s), s], 1)
    fit = build_calibrator("quadratic").fit(logits=z[:10000], labels=y[:10000])
    np.testing.assert_allclose(
        [fit.slope_, fit.intercept_, fit.quadratic_], [0.8, -0.3, 0.15], atol=0.05
    )
    platt = build_calibrator("platt").fit(logits=z[:10000], labels=y[:10000])
    held_out = {}
    for cal in (fit, platt):
        p = cal.predict_proba(logits=z[10000:])[np.arange(10000), y[10000:]]
        held_out[type(cal).__name__] = -np.log(p).mean()
    assert held_out["QuadraticScaling"] < held_out["PlattScaling"] - 0.01
