"""Minimal pytree helpers for parameter dicts and optimizer states.

A *tree* is a tensor, or a dict / list / tuple / NamedTuple of trees, or a leaf that is not a
tensor (a number, ``None``) which is passed through unchanged. These are the containers that
``torch.func`` transforms accept, so everything built from them can be ``vmap``-ed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

Tree = Any


def tree_map(fn: Callable[..., Any], tree: Tree, *rest: Tree) -> Tree:
    """Apply ``fn`` to the tensor leaves of ``tree`` (and the matching leaves of ``rest``)."""
    if isinstance(tree, torch.Tensor):
        return fn(tree, *rest)
    if isinstance(tree, dict):
        return {key: tree_map(fn, tree[key], *(r[key] for r in rest)) for key in tree}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # NamedTuple
        return type(tree)(*(tree_map(fn, *items) for items in zip(tree, *rest, strict=True)))
    if isinstance(tree, (list, tuple)):
        return type(tree)(tree_map(fn, *items) for items in zip(tree, *rest, strict=True))
    return tree


def tree_leaves(tree: Tree) -> list[torch.Tensor]:
    """The tensor leaves of ``tree`` in traversal order."""
    leaves: list[torch.Tensor] = []
    tree_map(leaves.append, tree)
    return leaves


def detach(tree: Tree) -> Tree:
    """``tree`` with every tensor detached from any autograd graph."""
    return tree_map(torch.Tensor.detach, tree)


def tree_add(a: Tree, b: Tree, scale: float | torch.Tensor = 1.0) -> Tree:
    """``a + scale * b`` leaf by leaf."""
    return tree_map(lambda x, y: x + scale * y, a, b)


def tree_scale(a: Tree, scale: float | torch.Tensor) -> Tree:
    """``scale * a`` leaf by leaf."""
    return tree_map(lambda x: scale * x, a)


def tree_dot(a: Tree, b: Tree) -> torch.Tensor:
    """``<a, b>`` summed over all leaves (a 0-d tensor)."""
    products = [torch.sum(x * y) for x, y in zip(tree_leaves(a), tree_leaves(b), strict=True)]
    return torch.stack(products).sum()
