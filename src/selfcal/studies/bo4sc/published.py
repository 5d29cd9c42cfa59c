"""[BO4SC] Table 1 (Sanguin et al., AICS 2024): test ECE and accuracy, fractions; single runs,
no seeds reported (methods §4.6)."""

PAPER_DATASETS = ("blobs-1.3", "blobs-1.7", "spiral-2.5", "spiral-3.5", "bac")
PUBLISHED: dict[str, dict[str, dict[str, float]]] = {
    "ece": {
        "standard": dict(zip(PAPER_DATASETS, (0.026, 0.074, 0.064, 0.109, 0.018))),
        "isoreg": dict(zip(PAPER_DATASETS, (0.023, 0.039, 0.039, 0.143, 0.004))),
        "bo4sc": dict(zip(PAPER_DATASETS, (0.017, 0.016, 0.025, 0.067, 0.012))),
    },
    "accuracy": {
        "standard": dict(zip(PAPER_DATASETS, (0.94, 0.876, 0.91, 0.815, 0.989))),
        "isoreg": dict(zip(PAPER_DATASETS, (0.94, 0.876, 0.91, 0.815, 0.989))),
        "bo4sc": dict(zip(PAPER_DATASETS, (0.931, 0.859, 0.923, 0.801, 0.994))),
    },
}
"""metric -> method -> dataset -> value."""
