"""Learn-then-Test against MAPIE 1.6's ``MultiClassificationLTTController``.

The MAPIE configuration that controls our selective risk (the error rate among the answered
rows): one class-agnostic ``BinaryRisk`` with occurrence ``y_pred != y_true`` and condition
"answered" (``y_pred`` not NaN: MAPIE predicts NaN where it abstains), as a risk
(``higher_is_better=False``, so MAPIE's ``alpha`` is ``eps`` itself and its empirical risk is
``e / n`` as ours), at ``target_level=[eps]``, ``confidence_level = 1 - delta``. MAPIE counts
the effective sample size of such a ratio risk as the rows meeting the condition -- the
answered rows ``n_t``, as our p-value does -- and answers ``max_proba >= threshold``, as we do.
Its ``best_predict_param`` is the valid threshold of least *empirical risk* by default
(``best_predict_param_choice="auto"``); with ``best_predict_param_choice=abstention_rate`` it
is the valid threshold of least abstention -- the lowest valid threshold, ours.

MAPIE's built-in ``accuracy`` risk is not this: it counts an abstention (NaN) as an error over
all rows. Where the conventions differ, a test below pins the difference: MAPIE's p-value is
NaN where no row is answered, and its Holm step then stops at once (``np.argmin`` picks the
NaN), certifying nothing; ours is 1 there, never rejected, and Holm goes on.

The shared real sets (``../shared/prediction-sets`` beside the checkout, or
``$SELFCAL_PREDICTIONS``) are calibrated by temperature scaling fitted on their validation
split and certified on their test split; absent sets are skipped, the synthetic cases run
everywhere."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers.abstention import calibrated_test_split

from selfcal.abstention import _procedures as proc
from selfcal.abstention import certify_threshold

pytestmark = pytest.mark.reference
mapie = pytest.importorskip("mapie.risk_control")

SETS = ("chenyaofo_resnet56_cifar10", "chenyaofo_resnet56_cifar100", "mmlu_llama31_8b_instruct")
MAPIE_GRID = np.linspace(0, 0.99, 100)
EPS = (0.02, 0.05, 0.1, 0.2)
DELTA = 0.1
FWER = {"holm": "bonferroni_holm", "bonferroni": "bonferroni"}


def synthetic(seed: int, n: int = 4000, classes: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 2.5, (n, classes))
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = (rng.uniform(size=(n, 1)) > np.cumsum(p, 1)).sum(1).clip(max=classes - 1)
    return p, y


def mapie_ltt(p, y, eps, delta, grid, fwer="bonferroni_holm", best="abstention"):
    """MAPIE's controller for our selective risk (module doc): (best threshold, valid set)."""
    rc = mapie
    selective_error = rc.BinaryRisk(
        risk_occurrence=lambda y_true, y_pred: y_pred != y_true,
        risk_condition=lambda y_true, y_pred: ~np.isnan(y_pred.astype(float)),
        higher_is_better=False,
    )
    controller = rc.MultiClassificationLTTController(
        predict_function=lambda rows: p[rows],
        risks=[selective_error],
        target_level=[eps],
        confidence_level=1 - delta,
        best_predict_param_choice=rc.abstention_rate if best == "abstention" else "auto",
        list_predict_params=grid,
        classes=np.arange(p.shape[1]),
        fwer_method=fwer,
    )
    with warnings.catch_warnings():  # MAPIE warns where none or all are valid: the tests say so
        warnings.filterwarnings("ignore", "No predict parameters were found", UserWarning)
        warnings.filterwarnings("ignore", "All provided predict_params control", UserWarning)
        controller.calibrate(np.arange(len(y)), y)
    return controller.best_predict_param, np.asarray(controller.valid_predict_params, float)


def ours(p, y, eps, delta, grid, fwer):
    """Our certificate and valid set (every rejected grid threshold) with MAPIE's options."""
    conf, right = p.max(1), p.argmax(1) == y
    cert = certify_threshold(
        conf, right, target_risk=eps, delta=delta, grid=grid, fwer=fwer, p_value="hoeffding_bentkus"
    )
    thresholds, n, e = proc.candidates(conf, right, grid)
    pv = proc.p_values(n, e, eps, "hoeffding_bentkus")
    rejected = proc.holm(pv, delta) if fwer == "holm" else proc.bonferroni(pv, delta)
    return cert, np.sort(thresholds[rejected & (n > 0)])


def compare(p, y, label):
    delta = 1 - (1 - DELTA)  # the delta MAPIE recovers from confidence_level, bit for bit
    checked = certified = 0
    for eps in EPS:
        for grid in (MAPIE_GRID, np.linspace(0.3, p.max(1).max(), 37)):
            for fwer, theirs in FWER.items():
                best, valid = mapie_ltt(p, y, eps, delta, grid, theirs)
                cert, mine = ours(p, y, eps, delta, grid, fwer)
                np.testing.assert_array_equal(mine, valid, err_msg=f"{label} eps {eps} {fwer}")
                assert cert.threshold == best, (label, eps, fwer, cert.threshold, best)
                checked += 1
                certified += best is not None
    print(f"{label}: {checked} configurations equal to MAPIE's, {certified} with a threshold")
    assert certified > 0


@pytest.mark.parametrize("name", SETS)
def test_equal_to_mapie_on_shared_sets(name):
    p, y = calibrated_test_split(name)
    compare(p, y, name)


@pytest.mark.parametrize("seed", range(4))
def test_equal_to_mapie_on_synthetic_rows(seed):
    p, y = synthetic(seed)
    compare(p, y, f"synthetic {seed}")


def default_rows(p, y, label):
    """Rows answered by our default and by MAPIE's default grid and Holm (both choices of its
    best threshold); ours must answer at least as many."""
    conf = p.max(1)
    for eps in EPS:
        mine = certify_threshold(conf, p.argmax(1) == y, target_risk=eps, delta=DELTA)
        theirs = {}
        for best in ("abstention", "auto"):
            t, _ = mapie_ltt(p, y, eps, 1 - (1 - DELTA), MAPIE_GRID, best=best)
            theirs[best] = 0 if t is None else int((conf >= t).sum())
        print(
            f"{label} eps {eps}: ours answers {mine.n_answered} of {len(y)}, MAPIE's default "
            f"{theirs['auto']} (lowest valid threshold: {theirs['abstention']})"
        )
        assert mine.n_answered >= max(theirs.values())


@pytest.mark.parametrize("name", SETS)
def test_default_answers_at_least_as_many_rows_as_mapie_on_shared_sets(name):
    p, y = calibrated_test_split(name)
    default_rows(p, y, name)


def test_default_answers_at_least_as_many_rows_as_mapie_on_synthetic_rows():
    for seed in range(3):
        p, y = synthetic(seed)
        default_rows(p, y, f"synthetic {seed}")


def test_conventions_differ_where_no_row_is_answered():
    """A grid value above every confidence answers no row: MAPIE's p-value is NaN there and
    its Holm step stops on it, certifying nothing; ours is 1 and Holm certifies the rest.
    Bonferroni agrees (a NaN is never below the level)."""
    p, y = synthetic(0)
    grid = np.append(np.linspace(0.3, 0.9, 20), 1.5)
    best, valid = mapie_ltt(p, y, 0.1, DELTA, grid)
    cert, mine = ours(p, y, 0.1, DELTA, grid, "holm")
    assert best is None and valid.size == 0
    assert cert.threshold is not None and mine.size > 0
    best, valid = mapie_ltt(p, y, 0.1, DELTA, grid, "bonferroni")
    cert, mine = ours(p, y, 0.1, DELTA, grid, "bonferroni")
    assert cert.threshold == best and np.array_equal(mine, valid)


def test_mapie_default_choice_is_the_least_risky_valid_threshold():
    """MAPIE's ``best_predict_param_choice="auto"`` picks the valid threshold of least
    empirical risk, not the lowest valid one: it answers fewer rows than the same valid set
    read as we read it."""
    p, y = synthetic(1)
    auto, valid = mapie_ltt(p, y, 0.1, DELTA, MAPIE_GRID, best="auto")
    lowest, _ = mapie_ltt(p, y, 0.1, DELTA, MAPIE_GRID)
    cert, _ = ours(p, y, 0.1, DELTA, MAPIE_GRID, "holm")
    assert valid.size > 1 and lowest == valid.min() == cert.threshold
    assert auto is not None and auto > lowest
