"""The input contract: explicit kinds, clear errors naming the first offending row."""

import numpy as np
import pytest
import torch

from selfcal import PROB_ATOL, Predictions
from selfcal.metrics import accuracy, brier, classwise_ece, ece, nll
from selfcal.predictions import looks_like_probabilities, prob_atol

RNG = np.random.default_rng(0)
Z = RNG.normal(size=(30, 4))
Y = RNG.integers(0, 4, 30)
P = torch.softmax(torch.tensor(Z), 1).numpy()


def test_must_say_logits_or_probs():
    with pytest.raises(ValueError, match="exactly one"):
        ece(labels=Y)
    with pytest.raises(ValueError, match="exactly one"):
        ece(labels=Y, logits=Z, probs=P)
    with pytest.raises(ValueError, match="Predictions object"):
        ece(Z, labels=Y)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda z, y: (np.where(np.arange(30)[:, None] == 17, np.nan, z), y), "NaN.*row 17"),
        (lambda z, y: (np.where(np.arange(30)[:, None] == 3, np.inf, z), y), "infinity.*row 3"),
        (
            lambda z, y: (
                np.where((np.arange(30)[:, None] == 4) & (np.arange(4) == 1), -np.inf, z),
                y,
            ),
            "infinity.*row 4",
        ),  # one -inf logit: the softmax alone is fine
        (lambda z, y: (z[None], y), "shape"),
        (lambda z, y: (z, y[:-1]), "length 29"),
        (lambda z, y: (z, np.where(np.arange(30) == 5, 4, y)), r"\[0, 4\); row 5"),
        (lambda z, y: (z, np.where(np.arange(30) == 6, -1, y)), "row 6"),
        (lambda z, y: (z, y + 0.5), "integers; row 0"),
        (lambda z, y: (z, y[:, None]), "1-D"),
        (lambda z, y: (z[:0], y[:0]), "empty"),
    ],
)
def test_bad_logits(mutate, message):
    z, y = mutate(Z, Y)
    with pytest.raises(ValueError, match=message):
        ece(logits=z, labels=y)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda p: np.where(np.arange(30)[:, None] == 9, p * 1.1, p), "sum to 1.*row 9"),
        (lambda p: np.where(np.arange(30)[:, None] == 2, -p, p), r"\[0, 1\]; row 2"),
        (lambda p: Z, "probs"),
    ],
)
def test_bad_probs(mutate, message):
    p = mutate(P)
    with pytest.raises(ValueError, match=message):
        ece(probs=p, labels=Y)


def test_row_sum_tolerance_is_stated():
    from selfcal import PROB_ATOL

    ok = P.copy()
    ok[0] *= 1 + PROB_ATOL / 2
    ece(probs=ok, labels=Y)
    bad = P.copy()
    bad[0] *= 1 + 3 * PROB_ATOL
    with pytest.raises(ValueError, match="row 0"):
        ece(probs=bad, labels=Y)


def test_single_class_rejected():
    with pytest.raises(ValueError, match="at least 2 classes"):
        ece(logits=np.zeros((3, 0)), labels=[0, 0, 0])


@pytest.mark.parametrize("metric", [ece, classwise_ece, accuracy, nll, brier])
def test_binary_one_column_equals_two_columns(metric):
    z = RNG.normal(size=200) * 2
    y = RNG.integers(0, 2, 200)
    p = 1 / (1 + np.exp(-z))
    two_logits = np.stack([np.zeros_like(z), z], 1)
    ref = metric(logits=two_logits, labels=y)
    for kwargs in (
        {"logits": z},
        {"logits": z[:, None]},
        {"probs": p},
        {"probs": p[:, None]},
        {"probs": np.stack([1 - p, p], 1)},
    ):
        assert metric(labels=y, **kwargs) == pytest.approx(ref, abs=1e-12)


def test_numpy_and_torch_agree_and_keep_form():
    a = ece(logits=Z, labels=Y)
    b = ece(logits=torch.tensor(Z), labels=torch.tensor(Y))
    assert isinstance(a, float)
    assert isinstance(b, torch.Tensor) and b.dtype == torch.float64 and b.ndim == 0
    assert a == pytest.approx(float(b), abs=1e-15)


def test_float32_and_float64_agree_to_float32_precision():
    a = ece(logits=Z.astype(np.float32), labels=Y)
    assert a == pytest.approx(ece(logits=Z, labels=Y), abs=1e-6)


def test_predictions_object_validates_once_and_is_reusable():
    pred = Predictions.from_logits(Z, Y)
    assert ece(pred) == ece(logits=Z, labels=Y)
    assert nll(pred) == nll(logits=Z, labels=Y)


def test_labels_may_be_bool_or_integral_floats():
    y = RNG.integers(0, 2, 30)
    z = RNG.normal(size=30)
    ref = ece(logits=z, labels=y)
    assert ece(logits=z, labels=y.astype(bool)) == ref
    assert ece(logits=z, labels=y.astype(float)) == ref


def test_nll_gradient_reaches_logits():
    z = torch.tensor(Z, requires_grad=True)
    nll(logits=z, labels=torch.tensor(Y)).backward()
    expected = (torch.softmax(z.detach(), 1) - torch.eye(4, dtype=torch.float64)[Y]) / 30
    torch.testing.assert_close(z.grad, expected)


def test_with_confidence_replaces_only_the_confidence():
    import selfcal.metrics as M

    rng = np.random.default_rng(0)
    z = rng.normal(size=(200, 4)) * 2
    y = rng.integers(0, 4, 200)
    pred = Predictions.from_logits(z, y)
    c = rng.uniform(0.25, 1.0, 200)
    other = pred.with_confidence(c)
    assert torch.equal(other.predicted, pred.predicted) and torch.equal(other.correct, pred.correct)
    correct = (z.argmax(1) == y).astype(float)
    bins = np.clip(np.ceil(c * 15).astype(int) - 1, 0, 14)  # (m/15, (m+1)/15]; no exact edges
    expected = sum(abs(correct[bins == m].sum() - c[bins == m].sum()) for m in range(15)) / 200
    assert M.ece(other) == pytest.approx(expected, abs=1e-12)
    with pytest.raises(ValueError, match="row 3"):
        pred.with_confidence(np.where(np.arange(200) == 3, 1.5, 0.5))
    with pytest.raises(ValueError, match="shape"):
        pred.with_confidence(c[:10])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n_classes", [3, 100])
def test_half_precision_probabilities_are_accepted_at_their_own_rounding(dtype, n_classes):
    """AMP outputs: a softmax rounded to float16 / bfloat16 misses a row sum of 1 by more than
    PROB_ATOL (3.8e-4 seen in float16), never by more than the dtype's epsilon."""
    z = torch.randn(2000, n_classes, generator=torch.Generator().manual_seed(0)) * 3
    p = torch.softmax(z, 1).to(dtype)
    worst = float((p.double().sum(1) - 1).abs().max())
    assert worst > PROB_ATOL  # the old absolute tolerance rejected these
    assert worst <= prob_atol(dtype)
    pred = Predictions.from_probs(p)
    assert pred.scores.dtype == torch.float32
    assert float(ece(probs=p, labels=z.argmax(1))) >= 0


def test_probabilities_that_do_not_sum_to_one_name_the_likely_cause():
    p = np.array([[0.5, 0.499], [0.5, 0.5]])  # a rounding slip, not logits
    with pytest.raises(ValueError, match="row 0 sums to 0.999 \\(renormalise them"):
        Predictions.from_probs(p)
    with pytest.raises(ValueError, match="unnormalised scores are logits"):
        Predictions.from_probs(np.array([[0.5, 0.2], [0.5, 0.5]]))


@pytest.mark.parametrize(
    "labels",
    [np.array(["cat", "dog"]), ["cat", "dog"], np.array(["cat", "dog"], dtype=object)],
)
def test_string_labels_get_one_message_everywhere(labels):
    z = np.array([[1.0, 0.0], [0.0, 1.0]])
    message = "labels must be integer class indices in \\[0, C\\), got class names \\(e.g. 'cat'\\)"
    with pytest.raises(ValueError, match=message):
        Predictions.from_logits(z, labels)
    with pytest.raises(ValueError, match=message):
        ece(logits=z, labels=labels)
    from selfcal.posthoc import TemperatureScaling

    with pytest.raises(ValueError, match=message):
        TemperatureScaling().fit(logits=z, labels=labels)


def test_object_arrays_of_numbers_are_read_as_numbers():
    labels = np.array([0, 1], dtype=object)
    assert Predictions.from_logits(np.eye(2), labels).labels.tolist() == [0, 1]
    with pytest.raises(ValueError, match="labels must be integers; row 1 has nan"):
        Predictions.from_logits(np.eye(2), np.array([0, None], dtype=object))


def test_looks_like_probabilities_needs_every_row_to_be_a_distribution():
    p = np.array([[0.2, 0.8], [0.5, 0.5]])
    assert looks_like_probabilities(p)
    assert looks_like_probabilities(torch.tensor(p, dtype=torch.float16))
    assert looks_like_probabilities(p[:, 1])  # one column: every value in [0, 1]
    assert not looks_like_probabilities(np.array([[0.2, 0.8], [0.5, 0.6]]))
    assert not looks_like_probabilities(np.array([[-0.2, 1.2], [0.5, 0.5]]))
    assert not looks_like_probabilities(np.array([[np.nan, 1.0]]))
    assert not looks_like_probabilities(np.array(["a", "b"]))


def test_trusted_predictions_give_the_validated_numbers_without_reading_the_host():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(50, 4, generator=g, dtype=torch.float64)
    y = torch.randint(4, (50,), generator=g)
    for scores, kind in ((z, "logits"), (torch.softmax(z, 1), "probs")):
        checked = (
            Predictions.from_logits(z, y) if kind == "logits" else Predictions.from_probs(scores, y)
        )
        trusted = Predictions.trusted(scores, kind, y)
        assert torch.equal(trusted.confidence, checked.confidence)
        assert torch.equal(trusted.predicted, checked.predicted)
        assert torch.equal(trusted.labels, checked.labels)
    grad = z.clone().requires_grad_(True)
    assert torch.equal(
        Predictions.trusted(grad, "logits", y).confidence,
        Predictions.from_logits(grad, y).confidence,
    )
    with pytest.raises(ValueError, match="trusted predictions need"):
        Predictions.trusted(z, "logits", y.int())
    with pytest.raises(ValueError, match="trusted predictions need"):
        Predictions.trusted(z[:, :1], "logits", y)
