"""Validation sets at the edges where a calibrator's fit is not identified, each with a held-out
test set from the same model: the cases of issue 22 ("never silently wrong"), shared by the
degenerate-case matrix test (``tests/posthoc/test_degenerate.py``) and the before/after table
of ``scripts/degenerate_cases.py``.

A model's logits are ``scale * (noise + margin * onehot(y))``: the true class's logit is raised
by ``margin`` noise units, and ``scale`` makes the model over-confident. Every case is
generated from a fixed seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Case:
    """A validation split (``kind`` scores, labels) and a test split of the same model.
    ``expect`` is what every calibrator must do on it: ``"error"`` (nothing sensible exists:
    a ``ValueError``), ``"warn"`` (a bounded result and a ``DegenerateCalibration`` warning),
    or ``"fit"`` (an ordinary fit)."""

    name: str
    what: str
    kind: str
    val: tuple[np.ndarray, np.ndarray]
    test: tuple[np.ndarray, np.ndarray]
    expect: str


def model_logits(
    rng: np.random.Generator,
    n: int,
    c: int,
    margin: float,
    scale: float = 2.0,
    labels: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(n, c)`` float64 logits ``scale * (N(0, 1) + margin * onehot(y))`` and the labels
    (uniform over the classes unless given)."""
    y = rng.integers(0, c, n) if labels is None else labels
    z = rng.normal(size=(n, c))
    z[np.arange(n), y] += margin
    return scale * z, y


def _correct_only(z: np.ndarray, y: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    keep = np.flatnonzero(z.argmax(1) == y)[:n]
    assert keep.shape[0] == n, "not enough correct rows drawn"
    return z[keep], y[keep]


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def all_correct(seed: int = 0, c: int = 3) -> Case:
    """A model with ~2% test errors whose 2,000 validation rows happen to be all correct."""
    rng = np.random.default_rng(seed)
    val = _correct_only(*model_logits(rng, 4000, c, margin=3.2), 2000)
    name = "all-correct" if c > 2 else "binary-separable"
    return Case(
        name,
        "every validation prediction correct",
        "logits",
        val,
        model_logits(rng, 5000, c, margin=3.2),
        "warn",
    )


def tied_errors(seed: int = 0) -> Case:
    """The all-correct model's rows plus two wrong only by an exact tie: logits of zeros
    labelled 1 and 2 (the first index wins a tie). No row is confidently wrong, so, as when
    every row is correct, nothing says how confident to be (the reliability audits'
    ``repro_tie_errors.py``)."""
    rng = np.random.default_rng(seed)
    z, y = _correct_only(*model_logits(rng, 1000, 4, margin=3.2), 400)
    val = (np.vstack([z, np.zeros((2, 4))]), np.concatenate([y, [1, 2]]))
    return Case(
        "tied-errors",
        "every validation error an exact tie",
        "logits",
        val,
        model_logits(rng, 5000, 4, margin=3.2),
        "warn",
    )


def one_class(seed: int = 0) -> Case:
    """Validation labels of one class only (578 rows of class 0 of 3)."""
    rng = np.random.default_rng(seed)
    val = model_logits(rng, 578, 3, margin=1.0, labels=np.zeros(578, dtype=np.int64))
    return Case(
        "one-class",
        "1 of 3 classes in the labels",
        "logits",
        val,
        model_logits(rng, 5000, 3, margin=1.0),
        "error",
    )


def missing_class(seed: int = 0) -> Case:
    """Validation labels cover 3 of 4 classes; the test set has all four."""
    rng = np.random.default_rng(seed)
    val = model_logits(rng, 600, 4, margin=1.5, labels=rng.integers(0, 3, 600))
    return Case(
        "missing-class",
        "3 of 4 classes in the labels",
        "logits",
        val,
        model_logits(rng, 5000, 4, margin=1.5),
        "warn",
    )


def huge_logit(seed: int = 0, value: float = 1e308) -> Case:
    """One validation row with a wrong-class logit of ``value`` among ordinary ones: 1e308
    overflows the likelihood fits' arithmetic, 1e6 only dominates their loss."""
    rng = np.random.default_rng(seed)
    z, y = model_logits(rng, 2000, 3, margin=1.0)
    z[7, (y[7] + 1) % 3] = value
    name = "huge-logit" if value > 1e150 else "outlier-logit"
    return Case(
        name,
        f"one logit of {value:g}",
        "logits",
        (z, y),
        model_logits(rng, 5000, 3, margin=1.0),
        "warn",
    )


def tiny(seed: int = 0) -> Case:
    """Eight validation rows for ten classes (fewer rows than parameters, classes missing)."""
    rng = np.random.default_rng(seed)
    val = model_logits(rng, 8, 10, margin=2.0, labels=np.arange(8) % 4)
    return Case(
        "tiny", "8 rows, 10 classes", "logits", val, model_logits(rng, 5000, 10, margin=2.0), "warn"
    )


def constant_scores(seed: int = 0) -> Case:
    """An uninformative model: every logit 0 (every probability 1/C)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, 500)
    z = np.zeros((500, 3))
    return Case(
        "constant",
        "every logit equal",
        "logits",
        (z, y),
        (np.zeros((5000, 3)), rng.integers(0, 3, 5000)),
        "fit",
    )


def zero_probs(seed: int = 0) -> Case:
    """Probabilities with exact zeros (a float32 softmax that underflowed), C = 7."""
    rng = np.random.default_rng(seed)
    val = model_logits(rng, 2000, 7, margin=1.5, scale=30.0)
    test = model_logits(rng, 5000, 7, margin=1.5, scale=30.0)
    probs = [softmax(z.astype(np.float32)).astype(np.float64) for z, _ in (val, test)]
    probs = [p / p.sum(1, keepdims=True) for p in probs]
    assert (probs[0] == 0).any()
    return Case(
        "zero-probs",
        "probabilities with exact zeros",
        "probs",
        (probs[0], val[1]),
        (probs[1], test[1]),
        "fit",
    )


def ordinary(seed: int = 0, c: int = 7) -> Case:
    """An ordinary over-confident model, C = 7, 2,000 validation rows."""
    rng = np.random.default_rng(seed)
    return Case(
        "ordinary",
        "7 classes, 2000 rows",
        "logits",
        model_logits(rng, 2000, c, 1.5),
        model_logits(rng, 5000, c, 1.5),
        "fit",
    )


def cases() -> list[Case]:
    """Every case, in the order of the issue's list."""
    return [
        all_correct(),
        all_correct(c=2),
        tied_errors(),
        one_class(),
        missing_class(),
        huge_logit(),
        huge_logit(value=1e6),
        tiny(),
        constant_scores(),
        zero_probs(),
        ordinary(),
    ]


# ---------------------------------------------------------------- regularisation (item 3)
FAMILIES = {
    # name: (classes, margin, scale, class spread): logits scale * w_k * (noise + margin
    # onehot) + b_k with log w_k, b_k ~ N(0, spread^2) fixed per draw
    "isotropic": (3, 1.5, 3.0, 0.0),  # temperature scaling is the true map
    "small": (5, 1.5, 2.5, 0.3),
    "separable": (3, 4.0, 2.0, 0.2),
    "many-classes": (20, 2.0, 2.0, 0.3),
    "binary": (2, 1.5, 3.0, 0.3),
    "class-biased": (10, 1.5, 2.0, 0.6),
}
"""The generated problems of the regularisation property test."""

STRUCTURED = ("vector", "matrix", "dirichlet")
VALIDATION_SIZES = (100, 200, 500)


def family_split(name: str, seed: int, n_val: int, n_test: int = 3000):
    """``((z_val, y_val), (z_test, y_test))`` of one draw of family ``name``."""
    c, margin, scale, spread = FAMILIES[name]
    rng = np.random.default_rng(seed)
    w = np.exp(spread * rng.normal(size=c))
    b = spread * rng.normal(size=c)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, c, n)
        z = rng.normal(size=(n, c))
        z[np.arange(n), y] += margin
        return scale * w * z + b, y

    return draw(n_val), draw(n_test)


def structured_vs_temperature(seeds: int = 6) -> list[dict[str, object]]:
    """For every family and validation size: the held-out NLL of temperature scaling and, for
    vector / matrix / Dirichlet scaling with their default penalties, the paired differences
    from it and their ratios to it, over ``seeds`` draws (draws whose validation labels hold
    one class are skipped)."""
    import warnings

    from selfcal.metrics import nll
    from selfcal.posthoc import build_calibrator

    rows = []
    for name in FAMILIES:
        for n_val in VALIDATION_SIZES:
            row: dict[str, object] = {"family": name, "n_val": n_val, "ts": []}
            row.update({m: [] for m in STRUCTURED})
            for seed in range(seeds):
                (zv, yv), (zt, yt) = family_split(name, seed, n_val)
                if len(np.unique(yv)) < 2:
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    for method in ("ts", *STRUCTURED):
                        cal = build_calibrator(method).fit(logits=zv, labels=yv)
                        p = cal.predict_proba(logits=zt)
                        row[method].append(float(nll(probs=p, labels=yt)))  # type: ignore[union-attr]
            rows.append(row)
    return rows
