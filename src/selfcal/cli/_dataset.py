"""``selfcal dataset``: write a built-in tabular dataset's train / validation / test splits as
files that ``selfcal train`` and ``selfcal predict`` read -- to try them, or to hand the
same split to another tool."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from selfcal.cli._common import stdout
from selfcal.cli._errors import errors

if TYPE_CHECKING:  # pragma: no cover - typing only
    import numpy as np

FORMATS = ("csv", "parquet", "npz")


def dataset(
    name: Annotated[str, typer.Argument(help="A built-in dataset, e.g. breast-cancer.")],
    out: Annotated[Path, typer.Option("--out", help="Folder for train / val / test files.")],
    seed: Annotated[int, typer.Option("--seed", min=0, help="Draws the samples and split.")] = 0,
    fmt: Annotated[str, typer.Option("--format", help="csv, parquet or npz.")] = "csv",
) -> None:
    """Write dataset NAME's train, val and test splits to OUT.

    Files OUT/train.FORMAT etc.: the raw (unstandardised) features, one column each, and a
    'label' column (npz: arrays x, y and feature_names)."""
    with errors():
        from selfcal._validation import check_choice
        from selfcal.data import load_dataset

        check_choice("--format", fmt, FORMATS)
        data = load_dataset(name, seed)
        if data.train.x.ndim != 2:
            raise ValueError(f"{name} is not tabular (its inputs have shape {data.train.x.shape})")
        columns = data.feature_names or tuple(f"x{j}" for j in range(data.n_features))
        console = stdout()
        for split in ("train", "val", "test"):
            path = write_split(
                out / f"{split}.{fmt}",
                data.raw(split).numpy(),
                columns,
                data.split(split).y.numpy(),
            )
            console.print(f"wrote {path}: {len(data.split(split))} rows")


def write_split(path: Path, x: np.ndarray, columns: tuple[str, ...], y: np.ndarray) -> Path:
    """One split as a table (one column per feature, then ``label``) or an ``.npz``."""
    import numpy as np

    from selfcal.io import write_table

    if path.suffix == ".npz":
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, x=x, y=y, feature_names=np.asarray(columns, dtype=str))
        return path
    if "label" in columns:
        raise ValueError("a feature is named 'label'; write --format npz")
    return write_table(path, {**{c: x[:, j] for j, c in enumerate(columns)}, "label": y})
