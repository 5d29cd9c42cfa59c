"""What a predictions file is: its format, from its extension (:func:`format_of`), the
bundled example it may stand for (``example:NAME``, :func:`resolve_path`), the two kinds
of scores a name can say (:data:`KINDS`), and the one rule where a name and the values
contradict each other (:func:`check_named_kind`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from selfcal.predictions import looks_like_probabilities

KINDS = ("logits", "probs")
TABULAR = (".csv", ".parquet")


def resolve_path(path: str | Path) -> Path:
    """``example:NAME`` -> the bundled file; otherwise ``path`` as a :class:`Path`."""
    text = str(path)
    if text.startswith("example:"):
        from selfcal.examples import example_path

        return example_path(text.removeprefix("example:"))
    return Path(path)


def format_of(path: Path) -> str:
    """The format key of ``path``: ``npz``, ``npy``, ``csv`` or ``parquet``."""
    suffix = path.suffix.lower()
    if suffix in (".npz", ".npy", ".csv", ".parquet"):
        return suffix[1:]
    if suffix == ".pq":
        return "parquet"
    raise ValueError(
        f"{path}: unknown file type {suffix or '(no extension)'!r}; "
        "use .npz, .npy (NAME.logits.npy + NAME.labels.npy), .csv or .parquet"
    )


def check_named_kind(
    path: str | Path, kind: str, scores: np.ndarray, array: str = "logits"
) -> None:
    """Refuse scores whose *name* says logits while every row lies in ``[0, 1]`` and sums
    to 1 (:func:`selfcal.predictions.looks_like_probabilities`): one line naming the
    evidence and both ways out. selfcal never guesses; this is a contradiction, not a guess.
    ``array``: the ``.npz`` member that holds them (``logits_val`` in a one-file prediction
    set). Every command that reads scores by their name applies this one rule, and
    ``--kind logits`` (``kind="logits"``) is its one override."""
    if kind != "logits" or not looks_like_probabilities(scores):
        return
    path = Path(path)
    one_column = scores.ndim == 1 or scores.shape[1] == 1
    evidence = (
        "every value lies in [0, 1]" if one_column else "every row lies in [0, 1] and sums to 1"
    )
    fmt = format_of(path)
    if fmt == "npz":
        renamed = "probs" + array.removeprefix("logits")
        what, fix = f"the array {array!r} holds", f"rename it {renamed!r}"
    elif fmt == "npy":
        what, fix = "the scores named .logits.npy hold", "rename the file NAME.probs.npy"
    elif one_column:
        what, fix = "the 'logit' column holds", "rename it 'prob'"
    else:
        last = scores.shape[1] - 1
        what, fix = "the logit_* columns hold", f"rename them prob_0 .. prob_{last}"
    raise ValueError(
        f"{path}: {what} probabilities ({evidence}); {fix}, or pass --kind logits "
        "(kind='logits' in Python) if these really are logits"
    )
