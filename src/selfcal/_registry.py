"""Name -> factory registries for what selfcal builds by name (datasets, models, losses).

A new entry is one decorated function in one file; asking for an unknown name is a
``ValueError`` that lists the known ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T", bound=Callable[..., object])


class Registry(Generic[T]):
    """Factories of one ``kind`` (e.g. ``"dataset"``) by name; each name is registered once."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the factory under ``name`` (a second registration raises)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")

        def decorate(factory: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = factory
            return factory

        return decorate

    def names(self) -> tuple[str, ...]:
        """Registered names, sorted."""
        return tuple(sorted(self._entries))

    def get(self, name: str) -> T:
        """The factory registered as ``name``."""
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        return self._entries[name]
