"""``selfcal evaluate --target-risk EPS``: abstention with a stated guarantee
(:class:`selfcal.abstention.GuaranteedAbstention`), certified on some of a file's rows and
scored on the others.

The rows are split as ``--conformal`` splits them (:func:`split_rows`, one mechanism): a random
half of FILE's rows (``floor(N / 2)``, drawn with ``--seed``) certifies the threshold and the
other rows are scored, so the reported error rate of the answered rows is not optimistic. The
probabilities must not have been fitted on these rows (the promise needs scores that are a
fixed function of each row). Where the file has one group a row, one certificate per group
(Mondrian) is scored beside the pooled one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    from rich.table import Table

    from selfcal.predictions import Predictions

RULES = ("ltt", "crc", "empirical")
"""``--rule``'s choices: :data:`selfcal.abstention.RULES`, as a constant."""
GROUPS_SHOWN = 10
"""Groups listed in the terminal (the worst by error rate of the answered rows); JSON has all."""


def split_rows(
    pred: Predictions, seed: int, name: str = "the file"
) -> tuple[Predictions, Predictions, str]:
    """``(first, second, words)``: a random half of ``pred``'s rows (``floor(N / 2)``, drawn
    with ``seed``) and the other rows, both in file order, and the split in words."""
    import numpy as np
    import torch

    order = torch.from_numpy(np.random.default_rng(seed).permutation(pred.n_samples))
    half = pred.n_samples // 2
    first = pred.subset(order[:half].sort().values)
    second = pred.subset(order[half:].sort().values)
    words = f"a random half of {name}'s rows ({half} of {pred.n_samples}, seed {seed})"
    return first, second, words


@dataclass(frozen=True)
class AbstentionScores:
    """The certificate(s) and what they do on the scored rows: ``rows`` has one entry per
    certificate (``group`` ``None`` for the pooled one): its promise, threshold, certifying
    rows, and on the scored rows ``scored``, ``answered``, ``coverage`` and ``risk`` (error
    rate of the answered rows; ``None`` when none is answered)."""

    rule: str
    target_risk: float
    delta: float
    certified_on: str
    rows: list[dict[str, Any]]
    note: str | None = None
    """Why there is no certificate per group where the file has groups, else ``None``."""

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "target_risk": self.target_risk,
            "delta": self.delta,
            "certified_on": self.certified_on,
            "certificates": self.rows,
            "note": self.note,
        }


def abstention_scores(
    pred: Predictions, target_risk: float, delta: float, rule: str, seed: int, name: str
) -> AbstentionScores:
    """Certify on one half of ``pred`` (module doc) and score the other: the pooled
    certificate, and one per group when ``pred`` has one group a row."""
    from selfcal.abstention import GuaranteedAbstention

    pred.require_labels()
    cert_rows, scored, words = split_rows(pred, seed, name)
    rows = []
    for by_group in (False, True) if _partition(pred) else (False,):
        fit_on = cert_rows if by_group else cert_rows.with_groups(None)
        target = scored if by_group else scored.with_groups(None)
        predictor = GuaranteedAbstention(target_risk, delta, rule).fit(fit_on)
        rows += _scored_rows(predictor, target, predictor.predict(target), by_group)
    note = None
    if pred.groups is not None and not _partition(pred):
        note = (
            "the file's groups overlap (membership columns): one certificate for all rows; a "
            "certificate per group needs one group a row"
        )
    return AbstentionScores(rule, target_risk, delta, words, rows, note)


def _partition(pred: Predictions) -> bool:
    return pred.groups is not None and pred.groups.codes is not None


def _scored_rows(predictor: Any, scored: Predictions, abstain: Any, by_group: bool) -> list[Any]:
    """One entry per certificate: its fields and its answered share and error rate on the
    scored rows of its group (all scored rows for the pooled one)."""
    import numpy as np

    wrong = scored.correct.detach().cpu().numpy() < 0.5
    answered = ~np.asarray(abstain, dtype=bool)
    if by_group:
        assert scored.groups is not None
        members = {
            name: rows.cpu().numpy()
            for name, rows in zip(scored.groups.names, scored.groups.rows())
        }
    out = []
    for key, cert in predictor.certificates_.items():
        index = members.get(str(key), np.zeros(0, dtype=np.int64)) if by_group else None
        a = answered if index is None else answered[index]
        w = wrong if index is None else wrong[index]
        n_answered = int(a.sum())
        out.append(
            {
                **cert.to_json(),
                "promise": cert.describe(),
                "scored": int(a.size),
                "answered": n_answered,
                "coverage": float(a.mean()) if a.size else None,
                "risk": float(w[a].mean()) if n_answered else None,
            }
        )
    return out


def abstention_table(scores: AbstentionScores) -> Table:
    """The pooled certificate and (the worst by scored error rate) per group: threshold,
    certifying rows answered, and on the scored rows the share answered and their error rate."""
    from rich.table import Table

    title = (
        f"Abstention, rule {scores.rule} at target risk {scores.target_risk:g}"
        + (f", delta {scores.delta:g}" if scores.rule == "ltt" else "")
        + f": certified on {scores.certified_on}, scored on the others"
    )
    table = Table(title=title, title_justify="left")
    for name in ("group", "threshold", "certifying rows answered", "scored answered", "risk"):
        table.add_column(name, justify="left" if name == "group" else "right")
    pooled = [r for r in scores.rows if r["group"] is None]
    grouped = sorted(
        (r for r in scores.rows if r["group"] is not None),
        key=lambda r: -1.0 if r["risk"] is None else r["risk"],
        reverse=True,
    )
    for r in pooled + grouped[:GROUPS_SHOWN]:
        t = "none (abstain)" if r["threshold"] is None else f"{r['threshold']:.4g}"
        cov = "-" if r["coverage"] is None else f"{r['answered']} ({100 * r['coverage']:.3g}%)"
        risk = "-" if r["risk"] is None else f"{r['risk']:.4f}"
        group = "all rows" if r["group"] is None else str(r["group"])
        table.add_row(group, t, f"{r['n_answered']} of {r['n_rows']}", cov, risk)
    if len(grouped) > GROUPS_SHOWN:
        table.caption = f"{len(grouped) - GROUPS_SHOWN} more groups in --json"
    for line in [scores.note] + [r["promise"] for r in pooled]:
        if line:
            table.caption = (table.caption + "; " if table.caption else "") + line
    return table
