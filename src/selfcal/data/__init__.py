"""Datasets: seeded, standardised train / validation / test splits behind one registry.

Datasets (``load_dataset(name, seed)``; the seed draws the samples and the split):

=================  ===========================================================  ===============
name               what                                                         train/val/test
=================  ===========================================================  ===============
``blobs-1.3``      5 isotropic 2-D Gaussians, sigma 1.3, fixed searched centres  700/300/1000
``blobs-1.7``      the same centres, sigma 1.7                                  700/300/1000
``spiral-2.5``     two interlocking spirals, arm scale 2.7, noise sigma 2.5     700/300/1000
``spiral-3.5``     the same spirals, noise sigma 3.5                            700/300/1000
``bac``            our Widmark blood-alcohol simulator, label BAC >= 0.8 ‰      700/300/1000
``breast-cancer``  scikit-learn's breast cancer set, 2 classes                  35/15/50 %
``wine``           scikit-learn's wine set, 3 classes                           35/15/50 %
``digits``         scikit-learn's 8x8 digits, 10 classes                        35/15/50 %
=================  ===========================================================  ===============

Every split is stratified and random by seed; model inputs are standardised with TRAINING-set
statistics only (see :mod:`selfcal.data.core`). The generators and every choice made are in the
modules :mod:`~selfcal.data.blobs`, :mod:`~selfcal.data.spirals`, :mod:`~selfcal.data.bac` and
:mod:`~selfcal.data.tabular`, and in each dataset's ``description``.

Public API::

    load_dataset(name: str, seed: int, **options) -> DataSplits
    dataset_names() -> tuple[str, ...]
    @register_dataset(name)  # on loader(seed: int, *, option=default, ...) -> DataSplits
    DataSplits: name, train, val, test (Split), n_classes, feature_names, description, mean, std,
                seed, options; split(name), raw(name), standardize(x_raw), n_features
    Split: x (float32 [n, d]), y (int64 [n])

The constants of the synthetic generators (Blobs centres, spiral arm scale) were chosen by
searches that ``python -m selfcal.data.search {blobs,spirals}`` reruns.

Adding a dataset: write one module with a ``@register_dataset("name")`` loader (build the
result with :func:`selfcal.data.core.build_splits` where it fits) and import it below.
"""

from __future__ import annotations

from selfcal.data import bac, blobs, spirals, tabular  # noqa: F401  (registers the datasets)
from selfcal.data.core import DataSplits, Split
from selfcal.data.registry import dataset_names, load_dataset, register_dataset

__all__ = ["DataSplits", "Split", "dataset_names", "load_dataset", "register_dataset"]
