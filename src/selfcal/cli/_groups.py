"""``selfcal evaluate`` on predictions with groups: calibration per group, never left out.

Where the file has groups (a ``.npz``'s ``groups`` array, ``NAME.groups.npy``, a table's
``--groups COLUMN``), the report adds :func:`selfcal.evaluation.evaluate_groups`: in the
terminal the groups whose ECE most exceeds what a perfectly calibrated model shows at their
size (``--groups-shown``, worst first), the worst group's ECE and excess with intervals and
the multicalibration error; in ``--json`` every group under the key ``groups``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    from rich.console import Group as RenderGroup

    from selfcal.metrics.bootstrap import Interval
    from selfcal.metrics.group_summary import GroupEvaluation

GROUPS_SHOWN = 5
"""Groups the terminal report lists by default (the worst by excess ECE)."""


def groups_json(found: GroupEvaluation) -> dict[str, Any]:
    """Every group's numbers and the worst group's, for ``--json`` (non-finite -> null):
    :meth:`~selfcal.metrics.group_summary.GroupEvaluation.to_dict`."""
    return found.to_dict()


def groups_view(found: GroupEvaluation, shown: int, confidence: float) -> RenderGroup:
    """The worst ``shown`` groups by excess ECE as a table, and the worst-group lines."""
    from rich.console import Group as RenderGroup
    from rich.table import Table

    from selfcal.cli._common import fmt

    report = found.report
    order = report.excess_ece.nan_to_num(nan=-math.inf).argsort(descending=True)
    table = Table(
        title=f"{len(report.names)} groups: the {min(shown, len(report.names))} whose ECE most "
        f"exceeds a calibrated model's at their size ({found.n_draws} draws)"
    )
    for name in ("group", "n", "accuracy", "nll", "ece", "ece if calibrated", "excess", "p"):
        table.add_column(name, justify="left" if name == "group" else "right")
    for g in order[:shown].tolist():
        values = (report.accuracy, report.nll, report.ece, report.null_ece, report.excess_ece)
        table.add_row(
            report.names[g],
            str(int(report.size[g])),
            *(fmt(float(v[g])) for v in values),
            p_text(float(report.p_value[g]), found.n_draws),
        )
    pct = round(100 * confidence)
    worst, excess = found.worst_ece, found.worst_excess
    lines = [
        f"worst group by ECE: {report.names[report.worst]} {_shown(worst, pct)}; "
        f"the worst of {len(report.names)} calibrated groups of these sizes shows "
        f"{fmt(float(report.worst_null.mean()))} on average "
        f"(p {p_text(report.worst_p_value, found.n_draws, ' = ')})",
        f"worst group by excess ECE: {report.names[found.worst_excess_group]} "
        f"{_shown(excess, pct)}",
        f"multicalibration error (worst group x class ECCE): {_shown(found.multicalibration, pct)}"
        f", {fmt(found.multicalibration_sigma)} sigma",
    ]
    return RenderGroup(table, *lines)


def p_text(p: float, n_draws: int, equals: str = "") -> str:
    """A Monte-Carlo p-value; its floor ``1 / (R + 1)`` (no draw as bad) as ``<= floor``."""
    if math.isnan(p):
        return "n/a"
    if p <= 1 / (n_draws + 1) + 1e-12:
        return f"≤ {p:.3f}" if equals else f"≤{p:.3f}"
    return f"{equals}{p:.3f}"


def _shown(iv: Interval, pct: int) -> str:
    from selfcal.cli._common import fmt

    return f"{fmt(iv.value)} [{pct}% CI {fmt(iv.low)}, {fmt(iv.high)}]"
