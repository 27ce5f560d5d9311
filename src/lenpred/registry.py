"""A small string-keyed registry used by every plug-in family (engines, prompt sources, policies...).

One explicit table per family; unknown keys raise an error that lists the valid ones. An entry may be
added by name with a loader (:meth:`Registry.add_lazy`): a plug-in that lives in a package above the
family's own is imported on its first lookup, not when the table is built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from lenpred.errors import UnknownKeyError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to objects (classes or factories) of one family."""

    def __init__(self, family: str) -> None:
        self.family = family
        self._table: dict[str, T] = {}
        self._loaders: dict[str, Callable[[], T]] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        if name in self._table or name in self._loaders:
            raise ValueError(f"{self.family} {name!r} is registered twice")
        self._table[name] = obj

    def add_lazy(self, name: str, loader: Callable[[], T]) -> None:
        """Register ``name`` now; ``loader()`` gives its object on the first :meth:`get`."""
        if name in self._table or name in self._loaders:
            raise ValueError(f"{self.family} {name!r} is registered twice")
        self._loaders[name] = loader

    def get(self, name: str) -> T:
        if name in self._loaders:
            self._table[name] = self._loaders.pop(name)()
        try:
            return self._table[name]
        except KeyError:
            valid = ", ".join(self.names()) or "(none)"
            raise UnknownKeyError(
                f"unknown {self.family} {name!r}", f"use one of: {valid}"
            ) from None

    def names(self) -> list[str]:
        return sorted([*self._table, *self._loaders])

    def __contains__(self, name: object) -> bool:
        return name in self._table or name in self._loaders

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
