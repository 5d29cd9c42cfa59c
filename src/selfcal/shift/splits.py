"""Whether a validation and a test split look exchangeable: :func:`check_splits` and its
result, :class:`SplitCheck`.

Every verdict that fits a calibrator on validation and judges it on test (``selfcal compare``,
the post-hoc studies) assumes that the two splits are exchangeable -- one random partition of
rows from one distribution. :func:`check_splits` tests what labeled predictions can show of
that: the label frequencies (a permutation test, total variation distance) and the
distribution of the top-label confidence of the uncalibrated scores (Kolmogorov--Smirnov);
:mod:`selfcal.shift.two_sample` states both tests. Each runs at ``level / 2`` (Bonferroni),
so the probability that exchangeable splits are flagged is at most ``level`` whatever the
dependence between the two tests.

The default ``level`` is :data:`LEVEL` = 0.01: the check runs on every set a user compares,
and at 0.05 a folder of 42 sets would raise about two false alarms a run (at most 0.42 at
0.01, fewer since Bonferroni is conservative). The shifts that overturn a comparison are large
-- the label shift of issue 48 has a total variation of 0.87 and is flagged at any level --
and a milder one is still caught at realistic sizes: on a CIFAR-10 set, a class whose share
doubles (10% to 18%) was flagged in 51 of 100 draws of 500 test rows and in 96 of 100 of
1,000. On random re-splits of the 42 shared prediction sets, 15 of 2,100 checks were flagged
(0.71%, 95% interval 0.40% to 1.18%). Both measurements: ``results/split-check/README.md``
(``scripts/split_check.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from selfcal._validation import check_int, check_real
from selfcal.predictions import ArrayLike, Predictions, as_predictions
from selfcal.shift.two_sample import (
    ConfidenceTest,
    LabelTest,
    label_frequency_test,
    top_confidence_test,
)

LEVEL = 0.01
"""The default probability of flagging exchangeable splits (module docstring)."""
RESAMPLES = 9999
"""Default permutation tables of the label test: p-values down to ``1 / 10,000``; the work is
``O(R C)`` for ``C`` classes, whatever the number of rows."""
ASSUMPTION = "verdicts fitted on validation and judged on test assume exchangeable splits"
"""The close of a flagging :attr:`SplitCheck.message`."""


@dataclass(frozen=True)
class SplitCheck:
    """The two tests of :func:`check_splits` on a validation split of ``n_val`` rows and a test
    split of ``n_test`` rows, ``n_classes`` score columns, and the overall ``level``; each test
    rejects when its p-value is at most ``level / 2``. Read :attr:`exchangeable` and
    :attr:`message`; :meth:`to_dict` gives every number as JSON-ready values."""

    label_test: LabelTest
    confidence_test: ConfidenceTest
    level: float
    n_val: int
    n_test: int
    n_classes: int

    @property
    def test_level(self) -> float:
        """Each test's level, ``level / 2`` (Bonferroni)."""
        return self.level / 2

    @property
    def labels_differ(self) -> bool:
        """Whether the label test rejects: ``p <= level / 2``."""
        return self.label_test.p_value <= self.test_level

    @property
    def confidence_differs(self) -> bool:
        """Whether the top-confidence test rejects: ``p <= level / 2``."""
        return self.confidence_test.p_value <= self.test_level

    @property
    def exchangeable(self) -> bool:
        """Whether neither test rejects (no evidence against exchangeability; not a proof of
        it -- tiny splits give little power)."""
        return not (self.labels_differ or self.confidence_differs)

    @property
    def message(self) -> str:
        """One line for a user: what differs, with its statistic and p-value, and the
        assumption it breaks; or that neither test found a difference, with both numbers."""
        if self.exchangeable:
            return (
                f"no evidence that validation and test differ at level {self.level:g}: label total "
                f"variation {self.label_test.total_variation:.2g} "
                f"({format_p(self.label_test.p_value, self.label_test.p_floor)}), "
                f"top-confidence KS {self.confidence_test.ks:.2g} "
                f"({format_p(self.confidence_test.p_value)})"
            )
        which = [
            what
            for what, differs in (
                ("labels", self.labels_differ),
                ("top confidence", self.confidence_differs),
            )
            if differs
        ]
        verb = "differs" if which == ["top confidence"] else "differ"
        evidence = [self._label_evidence()] if self.labels_differ else []
        evidence += [self._confidence_evidence()] if self.confidence_differs else []
        return (
            f"test {' and '.join(which)} {verb} from validation: {'; '.join(evidence)}; "
            f"{ASSUMPTION}"
        )

    def _label_evidence(self) -> str:
        test = self.label_test
        text = f"total variation {test.total_variation:.2g}, {format_p(test.p_value, test.p_floor)}"
        largest = test.largest_differences(1)
        if largest:
            c = largest[0]
            text += (
                f" (class {c.label}: {c.val_share:.1%} of validation, {c.test_share:.1%} of test)"
            )
        return text

    def _confidence_evidence(self) -> str:
        test = self.confidence_test
        return (
            f"KS {test.ks:.2g}, {format_p(test.p_value)} (mean {test.val_mean:.3f} on "
            f"validation, {test.test_mean:.3f} on test)"
        )

    def to_dict(self) -> dict[str, Any]:
        """Every number, the decisions and the message, as JSON-ready values."""
        labels, conf = self.label_test, self.confidence_test
        return {
            "exchangeable": self.exchangeable,
            "message": self.message,
            "level": self.level,
            "test_level": self.test_level,
            "n_val": self.n_val,
            "n_test": self.n_test,
            "n_classes": self.n_classes,
            "labels": {
                "differ": self.labels_differ,
                "total_variation": labels.total_variation,
                "p_value": labels.p_value,
                "resamples": labels.resamples,
                "exceedances": labels.exceedances,
                "largest_differences": [
                    {"class": c.label, "val_share": c.val_share, "test_share": c.test_share}
                    for c in labels.largest_differences(5)
                ],
                "val_counts": list(labels.val_counts),
                "test_counts": list(labels.test_counts),
            },
            "confidence": {
                "differs": self.confidence_differs,
                "ks": conf.ks,
                "p_value": conf.p_value,
                "method": conf.method,
                "tied_rows": conf.tied_rows,
                "val_mean": conf.val_mean,
                "test_mean": conf.test_mean,
            },
        }

    def __repr__(self) -> str:
        return (
            f"SplitCheck(exchangeable={self.exchangeable}, level={self.level:g}, "
            f"n_val={self.n_val}, n_test={self.n_test}, n_classes={self.n_classes}, "
            f"label_test={self.label_test!r}, confidence_test={self.confidence_test!r})"
        )


def format_p(p: float, floor: float | None = None) -> str:
    """A p-value for a message: ``p ≤ floor`` at a permutation test's floor ``1 / (R + 1)``,
    ``p < 1e-300`` where it underflowed to 0, two significant digits from 0.001 up, else
    ``p = 2.1e-45``."""
    if floor is not None and p <= floor:
        return f"p ≤ {floor:.2g}"
    if p == 0.0:
        return "p < 1e-300"
    return f"p = {p:.2g}" if p >= 1e-3 else f"p = {p:.1e}"


def check_splits(
    val: Predictions | None = None,
    test: Predictions | None = None,
    *,
    val_logits: ArrayLike | None = None,
    val_probs: ArrayLike | None = None,
    val_labels: ArrayLike | None = None,
    test_logits: ArrayLike | None = None,
    test_probs: ArrayLike | None = None,
    test_labels: ArrayLike | None = None,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> SplitCheck:
    """Test whether a validation and a test split look exchangeable, as far as labeled
    predictions show it (module docstring): equal label frequencies (permutation test of the
    total variation distance, ``resamples`` tables drawn with ``seed``) and equal distributions
    of the top-label confidence (two-sample Kolmogorov--Smirnov), each at ``level / 2``.

    Each split is a :class:`~selfcal.predictions.Predictions` with labels, or arrays named by
    kind: ``val_logits=`` or ``val_probs=`` with ``val_labels=`` (and ``test_...`` alike;
    selfcal never guesses which an array holds). The two may be of different kinds (the
    confidence is ``max_k p_k`` either way) but must score the same classes.

    Deterministic given ``seed``. What it cannot see: a shift that leaves both margins alone --
    inputs that change while the model's top confidence and the label frequencies do not
    (covariate shift the model is blind to), or a change in which predictions are right at a
    given confidence (concept shift). It tests the observable margins only, and a pass is
    absence of evidence, not evidence of exchangeability.

    Edge cases: a class absent from both splits changes nothing (the label test is over the
    classes that occur); one class in every row gives the label test ``p = 1``; with two
    classes it is the permutation test of two proportions; splits of one row are accepted.
    Tiny splits are valid but powerless: with 5 + 5 rows neither test can reach
    ``p <= 0.005`` (the most extreme split has the exact p-value ``2 / C(10, 5) = 0.0079`` in
    both), so nothing is flagged at the default level.
    """
    level = check_real("level", level, 0.0, 1.0, low_open=True, high_open=True)
    resamples = check_resamples(resamples, level)
    seed = check_int("seed", seed, minimum=0)
    val_pred = split_predictions("val", val, val_logits, val_probs, val_labels)
    test_pred = split_predictions("test", test, test_logits, test_probs, test_labels)
    if val_pred.n_classes != test_pred.n_classes:
        raise ValueError(
            f"val scores {val_pred.n_classes} classes and test {test_pred.n_classes}: the "
            "splits must score the same classes"
        )
    val_y, test_y = (p.require_labels().cpu().numpy() for p in (val_pred, test_pred))
    val_conf, test_conf = (
        p.confidence.detach().cpu().double().numpy() for p in (val_pred, test_pred)
    )
    return SplitCheck(
        label_frequency_test(val_y, test_y, val_pred.n_classes, resamples=resamples, seed=seed),
        top_confidence_test(val_conf, test_conf),
        level,
        val_pred.n_samples,
        test_pred.n_samples,
        val_pred.n_classes,
    )


def check_resamples(resamples: object, level: float) -> int:
    """An integer number of permutation tables with which the label test can reject: the
    p-value is at least ``1 / (R + 1)``, so ``R >= 2 / level - 1``."""
    count = check_int("resamples", resamples)
    needed = math.ceil(round(2 / level - 1, 9))
    if count < needed:
        raise ValueError(
            f"resamples must be at least {needed} at level {level:g}: the label test's p-value "
            f"is at least 1 / (resamples + 1), so {count} could never reach level / 2 = "
            f"{level / 2:g}"
        )
    return count


def split_predictions(
    name: str,
    predictions: Predictions | None,
    logits: ArrayLike | None,
    probs: ArrayLike | None,
    labels: ArrayLike | None,
) -> Predictions:
    """Split ``name``'s predictions, validated by the input contract of
    :mod:`selfcal.predictions`, each problem one line naming the split."""
    if predictions is not None and not isinstance(predictions, Predictions):
        raise ValueError(
            f"{name} must be a selfcal Predictions object; pass arrays as {name}_logits=... "
            f"or {name}_probs=... with {name}_labels=..."
        )
    if sum(x is not None for x in (predictions, logits, probs)) != 1:
        raise ValueError(
            f"pass exactly one of {name}, {name}_logits=... or {name}_probs=... (selfcal "
            "never guesses which an array holds)"
        )
    try:
        pred = as_predictions(
            predictions, labels=labels, logits=logits, probs=probs, need_labels=False
        )
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None
    if pred.n_samples == 0:
        raise ValueError(f"{name} is empty: each split needs at least one row")
    if pred.labels is None:
        raise ValueError(
            f"{name} has no labels: the label test needs them (pass {name}_labels=...)"
        )
    return pred
