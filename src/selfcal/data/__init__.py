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
``digits-images``  the same digits as [n, 1, 8, 8] images, the same split        35/15/50 %
``mnist1d``        MNIST-1D from the mnist1d generator, [n, 1, 40], 10 classes   3600/400/1000
``cifar10``        CIFAR-10 from a local copy (root= / $SELFCAL_DATA)           45k/5k/10k
``cifar100``       CIFAR-100 from a local copy (root= / $SELFCAL_DATA)          45k/5k/10k
``tiny-imagenet``  Tiny-ImageNet-200 from a local copy, 64x64                   90k/10k/10k
=================  ===========================================================  ===============

Image and sequence sets are standardised per channel; CIFAR and Tiny-ImageNet use the reference
code's fixed normalisation constants and index-shuffle splits (``split="meta"`` adds the 8:1:1
``meta_val`` split in ``DataSplits.extra``); :mod:`selfcal.data.augment` holds the batched
random-crop + flip augmentation.

Every split is stratified and random by seed; model inputs are standardised with TRAINING-set
statistics only (see :mod:`selfcal.data.core`). The generators and every choice made are in the
modules :mod:`~selfcal.data.blobs`, :mod:`~selfcal.data.spirals`, :mod:`~selfcal.data.bac` and
:mod:`~selfcal.data.tabular`, and in each dataset's ``description``.

Public API::

    load_dataset(name: str, seed: int, **options) -> DataSplits
    dataset_names() -> tuple[str, ...]
    @register_dataset(name)  # on loader(seed: int, *, option=default, ...) -> DataSplits
    DataSplits: name, train, val, test (Split), n_classes, feature_names, description, mean, std,
                seed, options, extra (further named splits, e.g. "meta_val"); split(name),
                raw(name), standardize(x_raw), n_features, split_names
    Split: x (float32 [n, d] or [n, C, ...] for sequences / images), y (int64 [n])

The constants of the synthetic generators (Blobs centres, spiral arm scale) were chosen by
searches that ``python -m selfcal.data.search {blobs,spirals}`` reruns.

Adding a dataset: write one module with a ``@register_dataset("name")`` loader (build the
result with :func:`selfcal.data.core.build_splits` where it fits) and import it below.
"""

from __future__ import annotations

from selfcal.data import (  # noqa: F401  (registers the datasets)
    bac,
    blobs,
    cifar,
    digits_images,
    mnist1d,
    spirals,
    tabular,
    tiny_imagenet,
)
from selfcal.data.core import DataSplits, Split
from selfcal.data.registry import dataset_names, load_dataset, register_dataset

__all__ = ["DataSplits", "Split", "dataset_names", "load_dataset", "register_dataset"]
