"""Name -> factory registries for what selfcal builds by name (datasets, models, losses,
calibrators, studies).

A new entry is one decorated function or class in one file; asking for an unknown name is a
``ValueError`` that lists the known ones. A module that owns a kind exposes the registry's
bound methods under its own names, e.g. ``register_loss = _LOSSES.register`` and
``available_losses = _LOSSES.available``, and builds with :meth:`Registry.build` (or
:meth:`Registry.get` when it calls the factory itself).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T", bound=Callable[..., object])
F = TypeVar("F", bound=Callable[..., object])


class Registry(Generic[T]):
    """Factories of one ``kind`` (e.g. ``"dataset"``) by name; each name is registered once."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._aliases: dict[str, str] = {}

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: register the factory (a function or a class) under ``name`` and return
        it unchanged; a second registration of ``name`` raises ``ValueError``."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")

        def decorate(factory: F) -> F:
            if name in self._entries or name in self._aliases:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = cast(T, factory)
            return factory

        return decorate

    def alias(self, alias: str, name: str) -> None:
        """Accept ``alias`` wherever ``name`` is (a second spelling, never listed by
        :meth:`names`); an alias that is already a name or an alias raises ``ValueError``."""
        if name not in self._entries:
            raise ValueError(f"{self.kind} {name!r} is not registered")
        if alias in self._entries or alias in self._aliases:
            raise ValueError(f"{self.kind} {alias!r} is already registered")
        self._aliases[alias] = name

    def resolve(self, name: str) -> str:
        """The registered name ``name`` stands for (itself, or the name it is an alias of)."""
        resolved = self._aliases.get(name, name)
        if resolved not in self._entries:
            close = difflib.get_close_matches(str(name), [*self._entries, *self._aliases], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            known = ", ".join(self.names())
            raise ValueError(f"unknown {self.kind} {name!r}; known: {known}{hint}")
        return resolved

    def aliases(self) -> Mapping[str, str]:
        """A read-only, live mapping alias -> registered name."""
        return MappingProxyType(self._aliases)

    def names(self) -> tuple[str, ...]:
        """Registered names, sorted (aliases not included)."""
        return tuple(sorted(self._entries))

    def available(self) -> list[str]:
        """Registered names, sorted, as a list."""
        return list(self.names())

    def get(self, name: str) -> T:
        """The factory registered as ``name`` (or as the name ``name`` is an alias of)."""
        return self._entries[self.resolve(name)]

    def build(self, name: str, /, **kwargs: Any) -> Any:
        """``factory(**kwargs)`` of the factory registered as ``name``; arguments the factory
        does not take are a ``ValueError`` (``bad arguments for <kind> <name>: ...``)."""
        factory = self.get(name)
        try:
            return factory(**kwargs)
        except TypeError as err:
            raise ValueError(f"bad arguments for {self.kind} {name!r}: {err}") from None

    def view(self) -> Mapping[str, T]:
        """A read-only, live mapping name -> factory, in registration order."""
        return MappingProxyType(self._entries)
