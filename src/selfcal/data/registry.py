"""Dataset registry: a dataset is one function ``loader(seed, **options) -> DataSplits``
registered under a name with :func:`register_dataset`.

Loaders must be deterministic in ``seed`` (use ``numpy.random.default_rng`` / a
``torch.Generator`` seeded from it, never global RNG state): the same seed and options give
bit-identical tensors. Options are keyword-only parameters of the loader; an option the loader
does not have is a ``ValueError`` naming the ones it has.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from selfcal._registry import Registry
from selfcal._validation import check_int
from selfcal.data.core import DataSplits

Loader = Callable[..., DataSplits]
"""``loader(seed, **options) -> DataSplits``; options are keyword-only parameters."""

_DATASETS: Registry[Loader] = Registry("dataset")


def register_dataset(name: str) -> Callable[[Loader], Loader]:
    """Decorator: register ``loader(seed, **options) -> DataSplits`` under ``name``.

    A name can be registered once; registering it again is a ``ValueError``.
    """
    return _DATASETS.register(name)


def dataset_names() -> tuple[str, ...]:
    """Names of all registered datasets, sorted."""
    return _DATASETS.names()


def _check_options(name: str, loader: Loader, options: dict[str, Any]) -> None:
    params = inspect.signature(loader).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    known = [p for p, spec in params.items() if spec.kind is inspect.Parameter.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(
            f"dataset {name!r} has no option(s) {unknown}; its options are {sorted(known)}"
        )


def load_dataset(name: str, seed: int, **options: Any) -> DataSplits:
    """Build dataset ``name`` for ``seed`` (the seed draws samples and the split).

    ``options`` are passed to the loader (e.g. ``sizes=(700, 300, 1000)``). An unknown name is a
    ``ValueError`` listing the registered ones.
    """
    loader = _DATASETS.get(name)
    _check_options(name, loader, options)
    return loader(check_int("seed", seed, minimum=0), **options)
