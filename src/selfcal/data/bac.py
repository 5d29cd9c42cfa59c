"""BAC -- blood alcohol concentration ([BO4SC] §4 citing Nugent & Cunningham 2005; methods §8.3).

The original simulator is not public. This is OUR reconstruction: a Widmark-formula generator
whose constants were fitted (methods §8.3, least squares) to the ~85-row case base of Doyle's thesis
(github gateslm/Blood-Alcohol-Domain). Per sample:

* gender ~ Bernoulli(0.5), coded 0 = male, 1 = female (the case base's two genders);
* body weight ~ U(45, 115) kg (the case base's frame bands 100-240+ lb, as a continuum);
* drinks ~ U{1, ..., 14} (the case base's range; ``max_drinks`` option);
* meal ~ U{none, snack, full} (the case base's categories);
* duration ~ U{30, 60, ..., 240} minutes (the case base's half-hour steps);
* Widmark: ``BAC‰ = max(0, f_meal * drinks * G / (r * W) - beta * duration_h)`` with
  G = 11 g ethanol per drink (fit ≈ 11.0; the Irish standard drink is 10 g),
  r = 0.65 male / 0.55 female (fit; Widmark's textbook factors are ≈ 0.68 / 0.55),
  beta = 0.14 ‰ per hour (fit ≈ 0.136; the textbook elimination rate is 0.10-0.20 ‰/h),
  f_meal = 1.0 / 0.98 / 0.94 for none / snack / full (fit, weakly identified);
* label = 1[BAC‰ >= 0.8] (the 80 mg/100 ml = 0.08 % legal limit); no label noise.

Inputs (7 columns): ``gender_female`` (0/1, not standardised), ``weight_kg``, ``drinks``,
``duration_min`` (standardised with train statistics), ``meal_none``, ``meal_snack``,
``meal_full`` (one-hot, not standardised). Positive rate: 67.8 % with 1-14 drinks, 55.0 % with
``max_drinks=10`` (10^6 draws, ``sample_drinkers(10**6, default_rng(0), max_drinks)``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from selfcal._validation import check_int
from selfcal.data.core import DataSplits, build_splits, check_sizes, child_rngs
from selfcal.data.registry import register_dataset

GRAMS_PER_DRINK = 11.0
"""G: grams of ethanol per drink (methods §8.3 fit)."""

WIDMARK_R = (0.65, 0.55)
"""Widmark distribution factor r by gender code (0 = male, 1 = female)."""

ELIMINATION_PER_HOUR = 0.14
"""beta: alcohol eliminated per hour, in ‰."""

MEALS = ("none", "snack", "full")
MEAL_FACTOR = (1.0, 0.98, 0.94)
"""Absorption factor f_meal by meal code (index into :data:`MEALS`)."""

LEGAL_LIMIT = 0.8
"""Label threshold in ‰ (g/L): 80 mg / 100 ml."""

WEIGHT_RANGE_KG = (45.0, 115.0)
DURATIONS_MIN = np.arange(30, 241, 30)
DURATIONS_MIN.flags.writeable = False
DEFAULT_SIZES = (700, 300, 1000)
FEATURE_NAMES = (
    "gender_female",
    "weight_kg",
    "drinks",
    "duration_min",
    "meal_none",
    "meal_snack",
    "meal_full",
)
STANDARDIZED = (False, True, True, True, False, False, False)


def widmark_bac(
    gender: np.ndarray,
    weight_kg: np.ndarray,
    drinks: np.ndarray,
    meal: np.ndarray,
    duration_min: np.ndarray,
) -> np.ndarray:
    """Blood alcohol in ‰: ``max(0, f_meal * drinks * G / (r * W) - beta * duration / 60)``.

    ``gender`` is 0 (male) / 1 (female), ``meal`` an index into :data:`MEALS`.
    """
    r = np.asarray(WIDMARK_R)[np.asarray(gender)]
    f = np.asarray(MEAL_FACTOR)[np.asarray(meal)]
    absorbed = f * np.asarray(drinks) * GRAMS_PER_DRINK / (r * np.asarray(weight_kg))
    return np.maximum(0.0, absorbed - ELIMINATION_PER_HOUR * np.asarray(duration_min) / 60.0)


def sample_drinkers(
    n: int, rng: np.random.Generator, max_drinks: int = 14
) -> dict[str, np.ndarray]:
    """Draw ``n`` people: gender, weight_kg, drinks, meal, duration_min (see module docstring)."""
    check_int("max_drinks", max_drinks)
    return {
        "gender": rng.integers(0, 2, n),
        "weight_kg": rng.uniform(*WEIGHT_RANGE_KG, n),
        "drinks": rng.integers(1, max_drinks + 1, n),
        "meal": rng.integers(0, len(MEALS), n),
        "duration_min": rng.choice(DURATIONS_MIN, n),
    }


def encode_features(people: dict[str, np.ndarray]) -> np.ndarray:
    """People -> raw input matrix ``[n, 7]`` in the column order of :data:`FEATURE_NAMES`."""
    meal_one_hot = np.eye(len(MEALS))[people["meal"]]
    columns = ("gender", "weight_kg", "drinks", "duration_min")
    numeric = [people[k].astype(np.float64) for k in columns]
    return np.column_stack([*numeric, meal_one_hot])


@register_dataset("bac")
def bac(seed: int, *, sizes: Sequence[int] = DEFAULT_SIZES, max_drinks: int = 14) -> DataSplits:
    """BAC over/under the 0.8 ‰ limit, 700/300/1000 by default (our Widmark reconstruction)."""
    sizes = check_sizes(sizes)
    data_rng, split_rng = child_rngs(seed, 2)
    people = sample_drinkers(sum(sizes), data_rng, max_drinks)
    y = (widmark_bac(**people) >= LEGAL_LIMIT).astype(np.int64)
    description = (
        "BAC: our Widmark reconstruction of the Nugent & Cunningham blood-alcohol simulator "
        f"(selfcal.data.bac docstring), drinks 1-{max_drinks}; label 1[BAC >= {LEGAL_LIMIT} per "
        f"mille]. {sum(sizes)} samples, stratified random split {sizes[0]}/{sizes[1]}/{sizes[2]} "
        "by seed; weight, drinks and duration standardised with train statistics, gender "
        "(0 = male, 1 = female) and one-hot meal left as 0/1."
    )
    return build_splits(
        name="bac",
        x_raw=encode_features(people),
        y=y,
        n_classes=2,
        sizes=sizes,
        rng=split_rng,
        feature_names=FEATURE_NAMES,
        description=description,
        seed=seed,
        options={"sizes": sizes, "max_drinks": max_drinks},
        standardized=STANDARDIZED,
    )
