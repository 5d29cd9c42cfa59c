"""What a post-hoc fit costs, as rules of the problem's size: which calibrators
:func:`selfcal.posthoc.auto.default_candidates` leaves out, and which no prediction-set fit
tries (:func:`memory_refusal`)."""

from __future__ import annotations

SCAN_ENTRIES = 10**5
"""Ensemble temperature scaling is left out of the default candidates past this many scores
(``N C``) -- a rule of cost, which can leave out the lowest NLL, by little. Its fit scans the
scores about 75 times and holds about seven float64 copies of them: 0.9 of ``auto``'s 2.1 s
on 5,000 x 100; 21 s and 2,770 MiB on 50,000 x 1,000 (``auto``'s whole fit: at most 1.9
copies). Under ``auto``'s NLL it never cross-validated better than temperature scaling on the
20 CIFAR-100 shared sets (``results/posthoc-real``), its log-loss was worse than temperature
scaling's on all 8 of CalArena's ImageNet models, and where it fits what no other candidate
can -- 50,000 x 1,000 logits with 10% of the labels uniform -- its test NLL was 0.006 nats
below ``auto``'s choice, TS-mix (``benchmarks/results/auto_scale.md``)."""
MATRIX_PARAMETERS = 4 * 10**6
"""Structured matrix scaling is left out of the default candidates past this many parameters
``C (C + 1)`` (from 2,000 classes) -- a rule of memory, not of evidence: its L-BFGS fit holds about
32 float64 vectors of them, 1 GB here, 26 GB at 10,000 classes. Below, cross-validation
decides: on 50,000 x 1,000 logits whose true map is a vector scaling with per-class scales and
biases sized like real networks', SMS had the lowest test NLL of every candidate, 0.057 nats
below SVS, which ``auto`` chose under the rule this one replaces (SMS left out whenever
``C (C - 1) / N > 10``, "where it fits what SVS fits"; ``benchmarks/results/auto_scale.md``)."""
TABLE_SCORES = 10**8
"""``selfcal compare`` leaves one-vs-rest Venn-Abers out of its defaults past this many
validation scores (``N C``): its tables hold about three float64 numbers per score (2.4 GB
here) and its fit sorts them all; at 50,000 x 1,000 (half of them validation rows) it fits in
7 s and predicts in 5 s on two cores."""
MATRIX_CALIBRATORS = ("sms", "matrix", "dirichlet")
"""The calibrators with a ``C x (C + 1)`` parameter matrix (:func:`memory_refusal`)."""


def memory_refusal(name: str, n_classes: int) -> str | None:
    """Why calibrator ``name`` is not fitted on ``n_classes`` classes, or ``None``: one of
    :data:`MATRIX_CALIBRATORS` past :data:`MATRIX_PARAMETERS` parameters, whose fit would hold
    about 32 float64 copies of them (100,000 classes: 80 GB a copy). The one rule of memory
    that leaves SMS out of the default candidates and that every calibrator fitted by name on
    a prediction set obeys (:func:`selfcal.posthoc._compare_fits.fit_predict`)."""
    parameters = n_classes * (n_classes + 1)
    if name not in MATRIX_CALIBRATORS or parameters <= MATRIX_PARAMETERS:
        return None
    return (
        f"left out: its {parameters:,} parameters exceed {MATRIX_PARAMETERS:,} (its L-BFGS fit "
        f"would hold about {32 * 8 * parameters / 2**30:.0f} GiB)"
    )
