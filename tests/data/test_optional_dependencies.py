"""Without the ``full`` extra, what needs one of its packages says which, and how to install it
(one mechanism: :func:`selfcal._optional.require`)."""

from __future__ import annotations

import sys

import pytest

from selfcal._optional import require
from selfcal.data import load_dataset


@pytest.mark.parametrize(
    ("dataset", "module", "package"),
    [("digits", "sklearn.datasets", "scikit-learn"), ("mnist1d", "mnist1d.data", "mnist1d")],
)
def test_a_dataset_without_its_package_names_the_extra(dataset, module, package, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # its import now fails
    with pytest.raises(ImportError, match=rf"needs {package}: pip install 'selfcal\[full\]'"):
        load_dataset(dataset, seed=0)


def test_require_returns_the_module_and_chains_the_cause():
    assert require("math", "arithmetic", "python").sqrt(4.0) == 2.0
    with pytest.raises(ImportError, match=r"^x needs y: pip install 'selfcal\[full\]' \(or y\)$"):
        try:
            require("selfcal_no_such_module", "x", "y")
        except ImportError as error:
            assert isinstance(error.__cause__, ModuleNotFoundError)
            raise
