"""A small string-keyed registry used by every plug-in family (engines, prompt sources, policies...).

One explicit table per family; unknown keys raise an error that lists the valid ones.
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

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        if name in self._table:
            raise ValueError(f"{self.family} {name!r} is registered twice")
        self._table[name] = obj

    def get(self, name: str) -> T:
        try:
            return self._table[name]
        except KeyError:
            valid = ", ".join(sorted(self._table)) or "(none)"
            raise UnknownKeyError(
                f"unknown {self.family} {name!r}", f"use one of: {valid}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._table)

    def __contains__(self, name: object) -> bool:
        return name in self._table

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
