"""A small named registry: one per kind of thing (environments, estimators, backends, teachers).

Entries can be objects or lazy ``"module:attribute"`` strings, so registering a name never
imports heavy dependencies (the emulator, torch) until the entry is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class RegistryError(KeyError):
    """An unknown or duplicate name; the message lists what is available."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


def import_object(path: str) -> Any:
    """Import ``"package.module:attribute"``."""
    module_name, sep, attribute = path.partition(":")
    if not sep or not attribute:
        raise ValueError(f"expected 'module:attribute', got {path!r}")
    return getattr(importlib.import_module(module_name), attribute)


class Registry(Generic[T]):
    """Maps names to objects (or lazy import paths) of one kind."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T | str] = {}

    def register(self, name: str, entry: T | str | None = None, *, overwrite: bool = False):
        """Register ``entry`` under ``name``; without ``entry`` this is a decorator."""

        def _add(obj: T | str) -> T | str:
            if name in self._entries and not overwrite:
                raise RegistryError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = obj
            return obj

        if entry is None:
            return _add
        return _add(entry)

    def get(self, name: str) -> T:
        try:
            entry = self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "(none)"
            raise RegistryError(f"unknown {self.kind} {name!r}; known: {known}") from None
        if isinstance(entry, str):
            entry = import_object(entry)
            self._entries[name] = entry
        return entry  # type: ignore[return-value]

    __getitem__ = get

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)
