"""What a predictions file is: its format, from its extension (:func:`format_of`), the
bundled example it may stand for (``example:NAME``, :func:`resolve_path`), and the two kinds
of scores a name can say (:data:`KINDS`)."""

from __future__ import annotations

from pathlib import Path

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
