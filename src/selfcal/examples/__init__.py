"""Bundled example predictions, reachable from the command line as ``example:NAME``.

``digits_val`` and ``digits_test`` hold the logits and labels of a small MLP trained on
scikit-learn's 8x8 digits (10 classes); ``scripts/make_example.py`` regenerates them. Each file
is an ``.npz`` archive with arrays ``logits`` ``(N, 10)`` and ``labels`` ``(N,)``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

EXAMPLES = {
    "digits_val": "digits_val.npz",
    "digits_test": "digits_test.npz",
}
"""Example name -> file name in this package."""


def example_path(name: str) -> Path:
    """Filesystem path of the bundled example ``name`` (see :data:`EXAMPLES`)."""
    if name not in EXAMPLES:
        raise ValueError(f"unknown example {name!r}; available: {', '.join(sorted(EXAMPLES))}")
    path = Path(str(resources.files(__name__).joinpath(EXAMPLES[name])))
    if not path.exists():
        raise FileNotFoundError(f"{path}: bundled example missing (run scripts/make_example.py)")
    return path
