"""``selfcal predict``: apply a model folder written by ``selfcal train`` to new rows
(:func:`selfcal.pipeline.predict`): calibrated probabilities, the predicted label, the
confidence and an abstain flag -- from a threshold certified on held-out rows with a stated
guarantee (``--target-risk``, :mod:`selfcal.pipeline.guarantee`), or chosen on the validation
set by the empirical rule (``--target-accuracy`` / ``--target-coverage``, no promise)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from selfcal.cli._common import stdout
from selfcal.cli._errors import errors

if TYPE_CHECKING:  # pragma: no cover - typing only
    from selfcal.abstention import Certificate
    from selfcal.pipeline.conformal import ConformalSets
    from selfcal.pipeline.selective import Threshold

CONFORMAL_SCORE = "aps"
"""``--conformal-score``'s default: :data:`selfcal.pipeline.conformal.DEFAULT_SCORE`."""
TRADE = "use --target-coverage or --target-accuracy to trade coverage for accuracy"
NO_ABSTENTION = (
    "no row abstained on (--target-risk certifies a threshold; --target-accuracy or "
    "--target-coverage choose one empirically)"
)
DELTA = 0.05
"""``--delta``'s default: :data:`selfcal.pipeline.guarantee.DEFAULT_DELTA`."""
RULE = "ltt"
"""``--rule``'s default: :data:`selfcal.pipeline.guarantee.DEFAULT_RULE`."""


def _share(count: int, n: int) -> str:
    return f"{count} of {n} rows ({100 * count / n:.3g}%)"


def abstain_note(threshold: Threshold, abstained: int, n: int) -> str:
    """One line saying how many rows are abstained on, what the threshold's target means
    and how to change it."""
    if threshold.threshold is None:
        return (
            f"abstaining on {_share(abstained, n)}: no threshold reaches accuracy "
            f"{threshold.target:g} on the validation rows, not even the most confident "
            "rows alone; lower --target-accuracy or use --target-coverage"
        )
    if threshold.kind == "accuracy":
        why = f"so that the accepted rows' accuracy is >= {threshold.target:g}"
    else:
        why = f"so that it accepts {100 * threshold.target:.3g}% of them"
    return (
        f"abstaining on {_share(abstained, n)}: the threshold {threshold.threshold:.4g} was "
        f"chosen on the validation rows {why}; {TRADE}"
    )


def certificate_note(certificate: Certificate, abstained: int, n: int) -> str:
    """The lines saying what the certified threshold promises and how many rows it answers."""
    return (
        f"abstention, {certificate.rule} at target risk {certificate.target_risk:g}: "
        f"{certificate.describe()}\nabstaining on {_share(abstained, n)}, answering "
        f"{_share(n - abstained, n)}"
    )


def conformal_note(sets: ConformalSets, coverage: float | None) -> str:
    """The line saying how the sets were made, their average size and (with labels) their
    coverage of these rows."""
    sizes = sets.sizes
    singletons = int((sizes == 1).sum())
    line = (
        f"{sets.describe()}; average set size {sizes.mean():.3f}, {singletons} of "
        f"{len(sizes)} sets a single label"
    )
    return line if coverage is None else f"{line}; coverage of these rows {coverage:.4f}"


def check_output(out: Path) -> None:
    """Refuse, before the model is loaded, an ``--out`` that is a folder or ``.parquet``
    without pyarrow (:func:`selfcal.pipeline.predict` checks the extension first)."""
    from selfcal.io._tables import check_pyarrow

    if out.is_dir():
        raise ValueError(f"{out}: is a folder; name an output file (.csv, .parquet or .npz)")
    if out.suffix.lower() in (".parquet", ".pq"):
        check_pyarrow("writing .parquet files")


def predict(
    folder: Annotated[Path, typer.Argument(help="Model folder written by selfcal train.")],
    data: Annotated[str, typer.Argument(help="Rows to predict (.csv, .parquet, .npz).")],
    out: Annotated[Path, typer.Option("--out", help="Output file (.csv, .parquet, .npz).")],
    target_accuracy: Annotated[
        float | None,
        typer.Option(
            "--target-accuracy",
            help="Empirical rule, no guarantee: abstain below the smallest threshold whose "
            "selective accuracy (the accuracy of the accepted rows) on the validation set is "
            "at least this (e.g. 0.95). Without a target, no row is abstained on.",
        ),
    ] = None,
    target_coverage: Annotated[
        float | None,
        typer.Option(
            "--target-coverage",
            help="Empirical rule, no guarantee: abstain below the threshold that keeps this "
            "share of the validation set.",
        ),
    ] = None,
    target_risk: Annotated[
        float | None,
        typer.Option(
            "--target-risk",
            help="Abstain below a threshold certified on the validation rows that selfcal "
            "train --conformal-split held out: with --rule ltt, the error rate of the answered "
            "rows is at most this with probability >= 1 - DELTA (e.g. 0.01).",
        ),
    ] = None,
    delta: Annotated[
        float,
        typer.Option("--delta", help="--target-risk's allowed failure probability (ltt)."),
    ] = DELTA,
    rule: Annotated[
        str,
        typer.Option(
            "--rule",
            help="--target-risk's rule: ltt (Learn-then-Test: P(error rate of answered rows > "
            "RISK) <= DELTA), crc (conformal risk control: E[share answered and wrong] <= "
            "RISK) or empirical (no promise).",
        ),
    ] = RULE,
    conformal: Annotated[
        float | None,
        typer.Option(
            "--conformal",
            help="Also write a conformal prediction set per row (columns set, set_size) that "
            "holds the true label with probability >= 1 - ALPHA: split conformal prediction "
            "calibrated on the validation rows that selfcal train --conformal-split held out.",
        ),
    ] = None,
    conformal_score: Annotated[
        str,
        typer.Option(
            "--conformal-score",
            help="Conformity score of --conformal: lac, aps, raps or saps.",
        ),
    ] = CONFORMAL_SCORE,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the threshold and counts as one JSON object.")
    ] = False,
) -> None:
    """Predict DATA with the model in FOLDER; with a target, abstain where confidence is low.

    Per row: the calibrated probability of each class, the predicted label, its confidence,
    with --target-risk (certified), --target-accuracy or --target-coverage (empirical)
    whether to abstain, and with --conformal a prediction set. Rows whose label the model
    never saw are predicted, not scored."""
    with errors():
        check_output(out)
        from selfcal.pipeline import predict as run

        result = run(
            folder,
            data,
            out,
            target_accuracy=target_accuracy,
            target_coverage=target_coverage,
            conformal=conformal,
            conformal_score=conformal_score,
            target_risk=target_risk,
            delta=delta,
            rule=rule,
        )
        n = len(result.confidence)
        abstained = 0 if result.abstain is None else int(result.abstain.sum())
        if result.threshold is not None:
            typer.echo(abstain_note(result.threshold, abstained, n), err=True)
        certificate = result.certificate
        if as_json:
            payload = {
                "out": str(result.path),
                "rows": n,
                "abstained": abstained,
                "accepted_accuracy": result.accepted_accuracy,
                "threshold": None if result.threshold is None else result.threshold.to_json(),
                "certificate": None if certificate is None else certificate.to_json(),
                "unseen_labels": result.unseen_labels,
            }
            if result.conformal is not None:
                payload["conformal"] = {
                    **result.conformal.to_json(),
                    "coverage": result.set_coverage,
                }
            sys.stdout.write(json.dumps(payload) + "\n")
            return
        console = stdout()
        accuracy = result.accepted_accuracy
        if certificate is not None:
            console.print(certificate_note(certificate, abstained, n))
            scored = "" if accuracy is None else f"; accuracy of the answered rows {accuracy:.4f}"
            console.print(f"wrote {result.path}: {n} rows, {abstained} abstained{scored}")
        elif result.threshold is None:
            scored = "" if accuracy is None else f"; accuracy {accuracy:.4f}"
            console.print(f"wrote {result.path}: {n} rows{scored}; {NO_ABSTENTION}")
        else:
            console.print(f"abstention, {result.threshold.describe()}")
            scored = "" if accuracy is None else f"; accuracy of the accepted rows {accuracy:.4f}"
            console.print(f"wrote {result.path}: {n} rows, {abstained} abstained{scored}")
        if result.conformal is not None:
            console.print(conformal_note(result.conformal, result.set_coverage))
