"""GuaranteedAbstention: one certificate or one per group, simultaneous groups, unseen groups,
the JSON round trip and the one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from selfcal import Predictions
from selfcal.abstention import GuaranteedAbstention, certify_threshold
from selfcal.exceptions import NotFittedError


def rows(seed: int, n: int = 3000, classes: int = 3):
    """Calibrated probabilities: the label drawn from each row's probabilities."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 3, (n, classes))
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = (rng.uniform(size=(n, 1)) > np.cumsum(p, 1)).sum(1).clip(max=classes - 1)
    return p, y


def test_without_groups_it_is_certify_threshold():
    p, y = rows(0)
    model = GuaranteedAbstention(0.05, 0.1).fit(p, y)
    cert = certify_threshold(p.max(1), p.argmax(1) == y, target_risk=0.05, delta=0.1)
    assert model.certificates_ == {None: cert}
    np.testing.assert_array_equal(model.predict(p), p.max(1) < cert.threshold)
    assert model.describe() == cert.describe()
    same = GuaranteedAbstention(0.05, 0.1).fit(Predictions.from_probs(p, y))
    assert same.certificates_ == model.certificates_


@pytest.mark.parametrize("rule", ["ltt", "crc", "empirical"])
def test_per_group_certificates_come_from_each_groups_rows(rule):
    p, y = rows(1)
    groups = np.array(["a", "b", "c"])[np.arange(len(y)) % 3]
    model = GuaranteedAbstention(0.05, 0.1, rule).fit(p, y, groups=groups)
    assert list(model.certificates_) == ["a", "b", "c"]
    flags = model.predict(p, groups=groups)
    for name, cert in model.certificates_.items():
        mine = groups == name
        alone = certify_threshold(
            p[mine].max(1), p[mine].argmax(1) == y[mine], target_risk=0.05, delta=0.1, rule=rule
        )
        assert cert.group == name and cert.to_json() | {"group": None} == alone.to_json()
        np.testing.assert_array_equal(flags[mine], alone.abstain(p[mine].max(1)))


def test_simultaneous_divides_delta_over_the_groups():
    p, y = rows(2, n=6000)
    groups = np.arange(len(y)) % 4
    model = GuaranteedAbstention(0.05, 0.2, simultaneous=True).fit(p, y, groups=groups)
    assert {c.delta for c in model.certificates_.values()} == {0.05}
    alone = GuaranteedAbstention(0.05, 0.2).fit(p, y, groups=groups)
    for name, cert in model.certificates_.items():
        # a smaller delta never answers more rows
        assert cert.n_answered <= alone.certificates_[name].n_answered


def test_unseen_group_is_abstained_on_with_a_warning():
    p, y = rows(3)
    groups = np.where(np.arange(len(y)) % 2 == 0, "x", "y")
    model = GuaranteedAbstention(0.1).fit(p, y, groups=groups)
    new = np.array(["x", "z", "y", "z"])
    with pytest.warns(UserWarning, match="group\\(s\\) 'z' were not seen at fit time"):
        flags = model.predict(p[:4], groups=new)
    assert flags[1] and flags[3]
    for k in (0, 2):
        threshold = model.certificates_[str(new[k])].threshold
        assert flags[k] == (threshold is None or p[k].max() < threshold)


def test_json_round_trip():
    p, y = rows(4)
    groups = np.arange(len(y)) % 2
    model = GuaranteedAbstention(0.05, simultaneous=True).fit(p, y, groups=groups)
    again = GuaranteedAbstention.from_json(model.to_json())
    assert again.certificates_ == model.certificates_ and repr(again) == repr(model)
    np.testing.assert_array_equal(again.predict(p, groups=groups), model.predict(p, groups=groups))
    doc = model.to_json()
    for change, message in [
        ({"certificates": []}, "at least one certificate"),
        ({"rule": "crc"}, "simultaneous=True divides delta"),
        ({"delta": 2}, "delta must be a finite number"),
        ({"extra": 1}, "unknown field"),
        ({"certificates": doc["certificates"][:1] * 2}, "one per distinct group"),
        ({"target_risk": 0.1}, "not the predictor's"),
    ]:
        with pytest.raises(ValueError, match=message) as err:
            GuaranteedAbstention.from_json(doc | change)
        assert "\n" not in str(err.value)


def test_bad_use_is_one_line_errors():
    p, y = rows(5, n=200)
    g = np.arange(200) % 2
    cases = [
        (lambda: GuaranteedAbstention(0), "target_risk must be a finite number in (0, 1)"),
        (lambda: GuaranteedAbstention(rule="crc", simultaneous=True), "needs rule 'ltt'"),
        (lambda: GuaranteedAbstention(simultaneous=1), "simultaneous must be True or False"),
        (lambda: GuaranteedAbstention(simultaneous=True).fit(p, y), "needs groups="),
        (lambda: GuaranteedAbstention().fit(p, y).predict(p, groups=g), "fitted without groups"),
        (lambda: GuaranteedAbstention().fit(p, y, groups=g).predict(p), "fitted per group"),
        (lambda: GuaranteedAbstention().fit(p, y, groups=np.eye(200, 2)), "overlapping"),
        (lambda: GuaranteedAbstention().fit(p * 2, y), "prob"),
        (lambda: GuaranteedAbstention().fit(p, y[:10]), "label"),
    ]
    for call, message in cases:
        with pytest.raises(
            ValueError, match=message.replace("(", r"\(").replace(")", r"\)")
        ) as err:
            call()
        assert "\n" not in str(err.value), message
    with pytest.raises(NotFittedError, match="not fitted"):
        GuaranteedAbstention().predict(p)
