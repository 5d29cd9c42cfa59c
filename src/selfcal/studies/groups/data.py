"""The groups of the groups study's sets (:func:`set_groups`), the published facts they rest
on, and the synthetic set with overlapping groups (:func:`synthetic_set`).

**Which groups.** A set whose files carry ``groups`` keeps them (MMLU: the subject of each
question). A set without them is grouped by a function of the model's own *prediction*, so the
groups are known at test time for every row, labelled or not:

* CIFAR-100 (100 classes, ``cifar100`` in the set's name): the superclass of the predicted
  class, by the dataset's public fine-to-coarse map (:data:`CIFAR100_COARSE`, 20 superclasses
  of 5 classes each);
* CIFAR-10 (10 classes, ``cifar10`` in the name): animal or vehicle of the predicted class
  (:data:`CIFAR10_VEHICLES`: airplane, automobile, ship, truck).

Both maps assume the standard class order of the datasets (torchvision's, alphabetical for
CIFAR-100). The study checks it on every set rather than trusting it: a classifier's errors
fall within the true class's group far more often than chance when the map matches the class
order (``errors_within_group`` beside ``chance_within_group``, :func:`within_group_errors`).
Any other set without groups is refused, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from selfcal.io import PredictionSet

FAMILIES = ("mmlu", "cifar100", "cifar10", "synthetic", "given")
"""The families the report groups sets by (a run stores the index as ``family``): MMLU
subjects, CIFAR-100 superclasses, CIFAR-10 animal / vehicle, the synthetic set, and any other
set whose files carry groups."""
FAMILY_TITLES = {
    "mmlu": "MMLU: the 57 subjects",
    "cifar100": "CIFAR-100: the 20 superclasses of the predicted class",
    "cifar10": "CIFAR-10: animal or vehicle of the predicted class",
    "synthetic": "Synthetic: three overlapping groups",
    "given": "Other sets: the groups in their files",
}

CIFAR100_COARSE = (
    4, 1, 14, 8, 0, 6, 7, 7, 18, 3, 3, 14, 9, 18, 7, 11, 3, 9, 7, 11,
    6, 11, 5, 10, 7, 6, 13, 15, 3, 15, 0, 11, 1, 10, 12, 14, 16, 9, 11, 5,
    5, 19, 8, 8, 15, 13, 14, 17, 18, 10, 16, 4, 17, 4, 2, 0, 17, 4, 18, 17,
    10, 3, 2, 12, 12, 16, 12, 1, 9, 19, 2, 10, 0, 1, 16, 12, 9, 13, 15, 13,
    16, 19, 2, 4, 6, 19, 5, 5, 8, 19, 18, 1, 2, 15, 6, 0, 17, 8, 14, 13,
)  # fmt: skip
"""The superclass of each CIFAR-100 class, in the dataset's class order (``apple``,
``aquarium_fish``, ``baby``, ... -- the ``fine_labels`` of the published Python pickles, which
torchvision keeps): the ``coarse_labels`` pairing of those pickles, as published in
``ryanchankh/cifar100coarse`` (``sparse2coarse.py``) and copied by many projects; each
superclass has 5 classes (checked in the tests)."""
CIFAR100_SUPERCLASSES = (
    "aquatic_mammals", "fish", "flowers", "food_containers", "fruit_and_vegetables",
    "household_electrical_devices", "household_furniture", "insects", "large_carnivores",
    "large_man-made_outdoor_things", "large_natural_outdoor_scenes",
    "large_omnivores_and_herbivores", "medium_mammals", "non-insect_invertebrates", "people",
    "reptiles", "small_mammals", "trees", "vehicles_1", "vehicles_2",
)  # fmt: skip
"""The 20 superclass names, in the order of their indices in :data:`CIFAR100_COARSE`."""
CIFAR10_VEHICLES = (0, 1, 8, 9)
"""The CIFAR-10 classes that are vehicles (airplane, automobile, ship, truck) in the dataset's
class order; the other six (bird, cat, deer, dog, frog, horse) are animals."""

MMLU_REDUX_ERRORS = {
    "abstract_algebra": 10, "anatomy": 1, "astronomy": 6, "business_ethics": 15,
    "clinical_knowledge": 1, "college_biology": 2, "college_chemistry": 25,
    "college_computer_science": 3, "college_mathematics": 1, "college_medicine": 13,
    "college_physics": 0, "computer_security": 3, "conceptual_physics": 8, "econometrics": 3,
    "electrical_engineering": 2, "elementary_mathematics": 3, "formal_logic": 13,
    "global_facts": 12, "high_school_biology": 5, "high_school_chemistry": 1,
    "high_school_computer_science": 0, "high_school_european_history": 9,
    "high_school_geography": 0, "high_school_government_and_politics": 0,
    "high_school_macroeconomics": 3, "high_school_mathematics": 1,
    "high_school_microeconomics": 2, "high_school_physics": 3, "high_school_psychology": 4,
    "high_school_statistics": 2, "high_school_us_history": 0, "high_school_world_history": 1,
    "human_aging": 13, "human_sexuality": 19, "international_law": 5, "jurisprudence": 1,
    "logical_fallacies": 26, "machine_learning": 11, "management": 1, "marketing": 4,
    "medical_genetics": 0, "miscellaneous": 10, "moral_disputes": 4, "moral_scenarios": 3,
    "nutrition": 3, "philosophy": 11, "prehistory": 0, "professional_accounting": 8,
    "professional_law": 18, "professional_medicine": 1, "professional_psychology": 4,
    "public_relations": 9, "security_studies": 6, "sociology": 2, "us_foreign_policy": 1,
    "virology": 57, "world_religions": 1,
}  # fmt: skip
"""MMLU-Redux (Gema et al. 2024, "Are We Done with MMLU?"): of the 100 questions of each MMLU
subject it re-annotated, how many have an error (any ``error_type`` other than ``ok``: wrong
ground truth, no or several correct answers, unclear question or options, expert knowledge
needed), counted from its annotation files ``mmlu_redux/mmlu_<subject>.csv`` in
``aryopg/mmlu-redux`` at commit ``4563cfa79b659d76716e5b6019f46bba85fa02db``: 370 of 5,700,
the paper's 6.49% overall, and 57 of 100 in virology, its headline."""
FLAGGED_RATE = 10
"""Subjects with at least this many errors in 100 MMLU-Redux questions are *flagged*: the
study's MMLU verdict is given with and without them (:func:`flagged_subjects`)."""


def flagged_subjects(threshold: int = FLAGGED_RATE) -> tuple[str, ...]:
    """The MMLU subjects whose MMLU-Redux error rate is at least ``threshold`` % (14 at 10 %:
    from virology's 57 % down to abstract algebra's and miscellaneous' 10 %), sorted."""
    return tuple(sorted(s for s, n in MMLU_REDUX_ERRORS.items() if n >= threshold))


@dataclass(frozen=True)
class SetGroups:
    """A set's family (one of :data:`FAMILIES`) and the group of each of its validation and
    test rows (labels, one a row)."""

    family: str
    val: np.ndarray
    test: np.ndarray


def predicted_groups(scores: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``table[argmax_k scores_ik]``: each row's group is that of its predicted class (the
    first of tied top scores, as ``argmax`` takes it)."""
    return table[np.argmax(np.asarray(scores), axis=1)]


def cifar100_table() -> np.ndarray:
    """Each CIFAR-100 class's superclass name, in class order."""
    return np.array([CIFAR100_SUPERCLASSES[c] for c in CIFAR100_COARSE])


def cifar10_table() -> np.ndarray:
    """Each CIFAR-10 class's kind, ``"vehicle"`` or ``"animal"``, in class order."""
    return np.array(["vehicle" if c in CIFAR10_VEHICLES else "animal" for c in range(10)])


def set_groups(name: str, data: PredictionSet) -> SetGroups:
    """The groups of set ``name`` (module docstring): its files' groups (family ``mmlu`` when
    every group is an MMLU subject, else ``given``); else, by its name and class count,
    CIFAR-100's superclass or CIFAR-10's animal / vehicle of the predicted class. Any other
    set is a ``ValueError`` naming what is missing."""
    if data.val_groups is not None and data.test_groups is not None:
        names = set(np.unique(data.val_groups).tolist()) | set(np.unique(data.test_groups).tolist())
        family = "mmlu" if names <= set(MMLU_REDUX_ERRORS) else "given"
        return SetGroups(family, np.asarray(data.val_groups), np.asarray(data.test_groups))
    lowered = name.lower()
    if "cifar100" in lowered and data.n_classes == 100:
        table = cifar100_table()
        family = "cifar100"
    elif "cifar10" in lowered and "cifar100" not in lowered and data.n_classes == 10:
        table = cifar10_table()
        family = "cifar10"
    else:
        raise ValueError(
            f"set {name!r} has no groups: its files carry none, and it is neither CIFAR-100 "
            "(100 classes, 'cifar100' in its name) nor CIFAR-10 (10 classes, 'cifar10'), "
            "whose groups the study derives from the predicted class"
        )
    return SetGroups(family, predicted_groups(data.val, table), predicted_groups(data.test, table))


def within_group_errors(
    scores: np.ndarray, labels: np.ndarray, table: np.ndarray
) -> tuple[float, float]:
    """``(observed, chance)`` for a set grouped by its predicted class through ``table`` (each
    class's group): the fraction of wrong top predictions whose predicted class lies in the
    true class's group, and what it would be if a wrong prediction picked any other class
    uniformly, ``mean_i (|group(y_i)| - 1) / (C - 1)`` over the wrong rows. An observed
    fraction far above chance says the map matches the class order (a shuffled order would
    give about chance)."""
    predicted = np.argmax(scores, axis=1)
    wrong = predicted != labels
    if not wrong.any():
        return float("nan"), float("nan")
    same = table[predicted[wrong]] == table[labels[wrong]]
    _, inverse, counts = np.unique(table, return_inverse=True, return_counts=True)
    chance = (counts[inverse][labels[wrong]] - 1) / (len(table) - 1)
    return float(same.mean()), float(chance.mean())


SYNTHETIC = "synthetic-overlapping"
"""The dataset name of the synthetic set."""
SYNTHETIC_GROUPS = ("A", "B", "C")
"""Its three overlapping groups."""
SYNTHETIC_SHARES = (0.3, 0.2, 0.15)
"""The chance that a row is in each group, independently: rows lie in none, one, two or all
three (about 0.6 % in all three)."""


def synthetic_set(n_rows: int, n_classes: int, seed: int) -> tuple[np.ndarray, ...]:
    """A seeded set whose model is miscalibrated *differently per group*, with overlapping
    groups: ``(logits, labels, membership)`` with ``membership`` a bool ``(N, 3)`` matrix
    (columns :data:`SYNTHETIC_GROUPS`).

    Each row draws true logits ``t_i ~ N(0, 2^2 I_C)`` and its label from ``softmax(t_i)``
    (so ``softmax(t_i)`` is the calibrated answer), and its groups independently with the
    chances :data:`SYNTHETIC_SHARES`. The model reports ``z_i = s_i t_i + b_i`` with
    ``s_i = 1.5 * 2^[i in A] * 0.5^[i in B]`` (overconfident everywhere, twice more in A,
    half as much in B -- the two effects multiply on A and B) and ``b_i = 2 e_0 [i in C]``
    (group C's rows inflate class 0). One temperature fixes the shared factor 1.5, not the
    groups' own distortions: what a group-aware calibrator is for."""
    rng = np.random.default_rng([seed, 0x6A0])
    true = rng.normal(0.0, 2.0, size=(n_rows, n_classes))
    p = np.exp(true - true.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    labels = (rng.random((n_rows, 1)) > np.cumsum(p, 1)).sum(1)
    labels = np.minimum(labels, n_classes - 1).astype(np.int64)
    member = rng.random((n_rows, len(SYNTHETIC_SHARES))) < np.asarray(SYNTHETIC_SHARES)
    scale = 1.5 * np.where(member[:, 0], 2.0, 1.0) * np.where(member[:, 1], 0.5, 1.0)
    logits = true * scale[:, None]
    logits[:, 0] += 2.0 * member[:, 2]
    return logits.astype(np.float64), labels, member
